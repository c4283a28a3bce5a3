/*
 * stream_token: a stream's token over its life (see stream_token.h).
 *
 * Its own module because it is the one part of a stream that looks at
 * access control after admission, and because a stream without access
 * control needs none of it: the stream keeps one pointer, NULL then.
 */
#include "stream_token.h"

#include <event2/event.h>
#include <stdlib.h>

#include "st_util.h"

struct stream_token {
	struct event_base *base;
	st_auth_store *auth;  /* borrowed */
	uint64_t exp_ms;      /* the token's exp (wall-clock ms), 0 = none */
	uint64_t key_id;      /* the verifying key, 0 = none or already gone */
	struct event *ev_exp; /* the exp timer, owned; NULL until armed */
	void (*expired)(void *arg);
	void *arg;
};

stream_token *
stream_token_new(struct event_base *base, st_auth_store *auth, uint64_t exp_ms, uint64_t key_id,
		 void (*expired)(void *arg), void *arg)
{
	stream_token *t;

	if (auth == NULL)
		return NULL;
	t = st_xcalloc(1, sizeof(*t));
	t->base = base;
	t->auth = auth;
	t->exp_ms = exp_ms;
	t->key_id = key_id;
	t->expired = expired;
	t->arg = arg;
	return t;
}

/* The token's exp passed: the client comes back with a fresh token and its last id. */
static void
exp_cb(evutil_socket_t fd, short what, void *arg)
{
	stream_token *t = arg;

	(void)fd;
	(void)what;
	t->expired(t->arg);
}

void
stream_token_arm(stream_token *t)
{
	uint64_t now, left;
	struct timeval tv;

	if (t == NULL || t->exp_ms == 0 || t->ev_exp != NULL)
		return;
	/* Admission refuses a token past its exp (st_auth_store_check), so the
	 * delay is 0 only when exp passed while the resume check ran. */
	now = st_auth_store_now_ms(t->auth);
	left = t->exp_ms > now ? t->exp_ms - now : 0;
	tv = st_timeval_ms(left);
	t->ev_exp = evtimer_new(t->base, exp_cb, t);
	ST_ASSERT(t->ev_exp != NULL);
	evtimer_add(t->ev_exp, &tv);
}

bool
stream_token_key_gone(stream_token *t)
{
	if (t == NULL || t->key_id == 0 || st_auth_store_has_key(t->auth, t->key_id))
		return false;
	/* Once: a later reload must not end it a second time. */
	t->key_id = 0;
	return true;
}

void
stream_token_free(stream_token *t)
{
	if (t == NULL)
		return;
	if (t->ev_exp)
		event_free(t->ev_exp);
	free(t);
}
