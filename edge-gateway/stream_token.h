/*
 * stream_token: the access token of one open stream over its life.  A
 * stream admitted with a token (st_auth_store_check) ends with reconnect
 * token_expired at the token's exp, and when a reload removes the key that
 * verified it (docs/security.md); this module is the timer and the key
 * check behind both, and says when; the stream (stream.c) does the ending.
 *
 * Threads: the stream's loop.  The callback never runs after
 * stream_token_free.
 */
#ifndef EDGE_STREAM_TOKEN_H
#define EDGE_STREAM_TOKEN_H

#include <stdbool.h>
#include <stdint.h>

#include "st_auth_store.h"

struct event_base;
typedef struct stream_token stream_token;

/*
 * A stream's token: exp_ms its exp (wall-clock ms since the epoch, 0 =
 * none), key_id its verifying key (st_auth_grant_key, 0 = none).
 * expired(arg) runs on base's loop once exp passed (after stream_token_arm).
 * auth NULL (no access control): returns NULL, which every call below
 * takes as a token that never expires.  auth is borrowed and must outlive
 * it.  Owned by the caller (stream_token_free).
 */
stream_token *stream_token_new(struct event_base *base, st_auth_store *auth, uint64_t exp_ms, uint64_t key_id,
			       void (*expired)(void *arg), void *arg);
/*
 * Starts the exp timer (once the response started: before, an expiry has
 * nothing to end).  exp is the issuer's wall-clock time and the timer runs
 * on the loop's monotonic clock, so the delay is measured once, here, from
 * the store's wall clock; a token already past exp fires at once.
 */
void stream_token_arm(stream_token *t);
/*
 * The key set was swapped: true, once, when the key that verified the
 * token is no longer in it (the stream then ends as at exp); a later
 * reload never says so again.
 */
bool stream_token_key_gone(stream_token *t);
/* Stops the timer and frees.  NULL-safe. */
void stream_token_free(stream_token *t);

#endif
