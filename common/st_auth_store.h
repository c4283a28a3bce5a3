/*
 * st_auth_store: the access control a program shares between its threads
 * (docs/security.md): the current key set of st_auth.h, swapped whole on
 * reload, and the policy it checks tokens with.  The edge checks a
 * stream's request with it (st_auth_store_check: extraction, verification,
 * every topic covered) and ends the streams of a removed key
 * (st_auth_store_has_key); the writer verifies a producer's token
 * (st_auth_store_verify); st_keywatch swaps the keys.
 *
 * Its own module on top of st_auth's two pure layers (key sets and
 * verification): this is the one part with shared state, a mutex and a
 * clock.
 *
 * Threads: every call but new and free from any thread.  A reader takes
 * its own reference to the key set under the mutex, so a reload never
 * frees keys under a check in progress and the mutex is never held during
 * crypto.
 */
#ifndef ST_AUTH_STORE_H
#define ST_AUTH_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "st_auth.h"
#include "st_clock.h"

typedef struct st_auth_config {
	st_auth_policy policy; /* strings copied */
	const char *cookie;    /* cookie name; NULL = "studio_token"; copied */
	bool query_token;      /* access_token= in the query is accepted */
	const st_clock *wall;  /* ms since the epoch (st_clock_realtime(), or a fake); borrowed */
} st_auth_config;

typedef struct st_auth_store st_auth_store;

/* Takes over ks's reference.  Main thread, at start. */
st_auth_store *st_auth_store_new(st_auth_keys *ks, const st_auth_config *cfg);
/* After every loop that uses it stopped.  NULL-safe. */
void st_auth_store_free(st_auth_store *st);
/* Replaces the key set (takes over ks's reference); checks in progress keep the old one.  Any thread. */
void st_auth_store_swap(st_auth_store *st, st_auth_keys *ks);
/* Swaps so far: a reader that saw another value looks again (edge: streams of removed keys).  Any thread. */
uint64_t st_auth_store_generation(st_auth_store *st);
/* True while the current set holds the key with this id (st_auth_grant_key).  Any thread. */
bool st_auth_store_has_key(st_auth_store *st, uint64_t key_id);
/* Keys in the current set.  Any thread. */
size_t st_auth_store_key_count(st_auth_store *st);
bool st_auth_store_query_token(const st_auth_store *st);
/* The cookie that carries the token (st_auth_config.cookie).  Any thread. */
const char *st_auth_store_cookie_name(const st_auth_store *st);

/*
 * The whole check of one request: extraction from the given header values
 * and query token, verification with the current keys at the store's wall
 * clock, and coverage of every topic[i][0..lens[i]).  A stream's admission:
 * a token past its exp is refused (ST_AUTH_EXPIRED) even within the leeway,
 * since the stream would end at exp at once.  On ST_AUTH_OK, *exp_ms is the
 * token's exp (ms since the epoch) and *key_id the verifying key's id.
 * *why: a static reason for debug logs (never the token).  Any thread.
 */
enum st_auth_result st_auth_store_check(st_auth_store *st, const char *authorization, const char *cookie,
					const char *query_token, const char *const *topics, const size_t *lens,
					size_t n, uint64_t *exp_ms, uint64_t *key_id, const char **why);
/*
 * One token as it came (the writer's ingest: no header to extract it from),
 * verified with the current keys at the store's wall clock.  NULL token:
 * ST_AUTH_MISSING.  On ST_AUTH_OK *out is the grant (owned by the caller:
 * it checks the topics with st_auth_grant_covers); otherwise NULL.  *why:
 * a static reason.  Any thread.
 */
enum st_auth_result st_auth_store_verify(st_auth_store *st, const char *token, size_t len, st_auth_grant **out,
					 const char **why);
/* The store's wall clock now (ms since the epoch). */
uint64_t st_auth_store_now_ms(const st_auth_store *st);

#endif
