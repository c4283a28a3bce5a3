/*
 * st_auth_store: the shared key set and policy (see st_auth_store.h).
 *
 * DESIGN
 *
 * The key set is immutable and reference counted (st_auth.h), so a reload
 * builds a whole new set and swaps a pointer: the mutex is held only to
 * take a reference or to swap, never during crypto.  The generation counts
 * swaps, so a loop can tell cheaply whether its streams' keys need looking
 * at again.
 */
#include "st_auth_store.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "st_util.h"

struct st_auth_store {
	pthread_mutex_t mu;              /* guards cur only */
	st_auth_keys *cur;               /* one reference */
	atomic_uint_fast64_t generation; /* swaps so far (st_auth_store_generation) */
	st_auth_policy policy;           /* strings owned */
	char *cookie;                    /* owned */
	bool query_token;
	const st_clock *wall; /* borrowed */
};

static char *
dup_or_null(const char *s)
{
	return s && *s ? st_xstrdup(s) : NULL;
}

st_auth_store *
st_auth_store_new(st_auth_keys *ks, const st_auth_config *cfg)
{
	st_auth_store *st = st_xcalloc(1, sizeof(*st));

	pthread_mutex_init(&st->mu, NULL);
	st->cur = ks;
	atomic_init(&st->generation, 0);
	st->policy.leeway_s = cfg->policy.leeway_s;
	st->policy.max_lifetime_s = cfg->policy.max_lifetime_s;
	st->policy.audience = dup_or_null(cfg->policy.audience);
	st->policy.issuer = dup_or_null(cfg->policy.issuer);
	st->policy.topics_claim = dup_or_null(cfg->policy.topics_claim);
	st->cookie = st_xstrdup(cfg->cookie && *cfg->cookie ? cfg->cookie : "studio_token");
	st->query_token = cfg->query_token;
	st->wall = cfg->wall ? cfg->wall : st_clock_realtime();
	return st;
}

void
st_auth_store_free(st_auth_store *st)
{
	if (st == NULL)
		return;
	st_auth_keys_unref(st->cur);
	free((char *)st->policy.audience);
	free((char *)st->policy.issuer);
	free((char *)st->policy.topics_claim);
	free(st->cookie);
	pthread_mutex_destroy(&st->mu);
	free(st);
}

void
st_auth_store_swap(st_auth_store *st, st_auth_keys *ks)
{
	st_auth_keys *old;

	pthread_mutex_lock(&st->mu);
	old = st->cur;
	st->cur = ks;
	pthread_mutex_unlock(&st->mu);
	atomic_fetch_add(&st->generation, 1);
	/* A check holding the old set keeps it alive until it is done. */
	st_auth_keys_unref(old);
}

static st_auth_keys *
store_current(st_auth_store *st)
{
	st_auth_keys *ks;

	pthread_mutex_lock(&st->mu);
	ks = st_auth_keys_ref(st->cur);
	pthread_mutex_unlock(&st->mu);
	return ks;
}

size_t
st_auth_store_key_count(st_auth_store *st)
{
	st_auth_keys *ks = store_current(st);
	size_t n = st_auth_keys_count(ks);

	st_auth_keys_unref(ks);
	return n;
}

uint64_t
st_auth_store_generation(st_auth_store *st)
{
	return atomic_load(&st->generation);
}

bool
st_auth_store_has_key(st_auth_store *st, uint64_t key_id)
{
	st_auth_keys *ks = store_current(st);
	bool found = st_auth_keys_has(ks, key_id);

	st_auth_keys_unref(ks);
	return found;
}

bool
st_auth_store_query_token(const st_auth_store *st)
{
	return st->query_token;
}

const char *
st_auth_store_cookie_name(const st_auth_store *st)
{
	return st->cookie;
}

uint64_t
st_auth_store_now_ms(const st_auth_store *st)
{
	return st_clock_now(st->wall);
}

enum st_auth_result
st_auth_store_verify(st_auth_store *st, const char *token, size_t len, st_auth_grant **out, const char **why)
{
	st_auth_keys *ks;
	enum st_auth_result r;

	*out = NULL;
	if (token == NULL) {
		*why = "no token";
		return ST_AUTH_MISSING;
	}
	ks = store_current(st);
	r = st_auth_verify(ks, token, len, st_clock_now(st->wall), &st->policy, out, why);
	st_auth_keys_unref(ks);
	return r;
}

enum st_auth_result
st_auth_store_check(st_auth_store *st, const char *authorization, const char *cookie, const char *query_token,
		    const char *const *topics, const size_t *lens, size_t n, uint64_t *exp_ms, uint64_t *key_id,
		    const char **why)
{
	const char *tok;
	size_t len;
	st_auth_grant *g = NULL;
	enum st_auth_result r;

	if (st_auth_token_extract(authorization, cookie, st->cookie, query_token, st->query_token, &tok, &len) ==
	    ST_AUTH_SRC_NONE) {
		*why = "no token";
		return ST_AUTH_MISSING;
	}
	if ((r = st_auth_store_verify(st, tok, len, &g, why)) != ST_AUTH_OK)
		return r;
	/*
	 * The leeway lets a token past its exp through verification (clock
	 * skew), but a stream ends at exp: admitting it would end it at once,
	 * and a browser would loop so for the length of the leeway.
	 */
	if (st_auth_grant_exp_ms(g) <= st_clock_now(st->wall)) {
		*why = "expired (within the leeway, but a stream ends at exp)";
		st_auth_grant_free(g);
		return ST_AUTH_EXPIRED;
	}
	for (size_t i = 0; i < n; i++) {
		if (!st_auth_grant_covers(g, topics[i], lens[i])) {
			*why = "a topic is not covered by the token";
			st_auth_grant_free(g);
			return ST_AUTH_FORBIDDEN;
		}
	}
	*exp_ms = st_auth_grant_exp_ms(g);
	*key_id = st_auth_grant_key(g);
	st_auth_grant_free(g);
	return ST_AUTH_OK;
}
