/*
 * reqcache: what makes a REQ resend recognisable (docs/writer.md "Request
 * slots, resends").
 *
 * A request is named by (request id, length, body hash): nng's REQ socket
 * puts a 32-bit request id in front of every request, keeps it when it
 * resends (after NNG_OPT_REQ_RESENDTIME, or when its connection drops, on a
 * new connection), and gives every other request of the same socket another
 * id.  The pipe is NOT part of the name: a resend over a new connection has
 * another pipe.
 *
 * Two kinds of entries share one table:
 *   pending   a request accepted and not yet answered; its owner (the
 *             writer's work object) is returned, so that a resend only
 *             re-routes the coming reply instead of becoming a second
 *             request;
 *   answered  a request answered {"ok":true,...}: its reply bytes, for a
 *             resend that arrives after the answer (the reply was lost on
 *             the way), which then gets the same reply and stores nothing.
 *             Answered entries are bounded in number, in bytes (reply plus
 *             entry) and in age; past a bound the oldest go first.
 * A request answered with a refusal (invalid, busy, unavailable) stored
 * nothing, so its entry goes at once: a resend of it is judged afresh.
 *
 * The table is indexed by (id, length) alone, so a caller can ask
 * reqcache_maybe before hashing the body: only a request whose id and
 * length are already known needs the hash.
 *
 * Thread: none of its own; the caller serialises every call (ingest holds
 * its mutex).  Time is passed in (ms, monotonic), so tests drive it.
 */
#ifndef BW_REQCACHE_H
#define BW_REQCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct reqcache reqcache;

typedef struct reqcache_key {
	uint32_t id;   /* the REQ request id (high bit set) */
	uint32_t len;  /* body length */
	uint64_t hash; /* st_hash_bytes of the body */
} reqcache_key;

typedef enum { REQCACHE_NEW = 0, REQCACHE_PENDING, REQCACHE_ANSWERED } reqcache_state;

/* Bounds of the answered entries: count, bytes (reply + entry), age in ms (>= 1 each). */
reqcache *reqcache_new(size_t max_answered, size_t max_bytes, uint64_t ttl_ms);
void reqcache_free(reqcache *c); /* NULL-safe; owners of pending entries are not touched */

/* Whether some entry has this id and length (then the body must be hashed to tell). */
bool reqcache_maybe(reqcache *c, uint32_t id, size_t len, uint64_t now);

/*
 * Looks k up.  PENDING: *owner is the pending entry's owner.  ANSWERED:
 * *reply / *reply_len point to the stored reply, valid until the next call
 * that changes the cache (copy it before unlocking).  Expires old answers.
 */
reqcache_state reqcache_find(reqcache *c, const reqcache_key *k, uint64_t now, void **owner, const void **reply,
			     size_t *reply_len);

/* Adds a pending entry for owner (non-NULL); k must not be in the cache (reqcache_find said NEW). */
void reqcache_add(reqcache *c, const reqcache_key *k, void *owner);

/*
 * owner's request was answered.  With reply (an ok answer, copied) its entry
 * becomes an answered one stamped now, and the oldest answered entries past
 * the bounds go; a reply larger than every bound is not kept.  With reply ==
 * NULL (a refusal) the entry goes.  No-op when owner has no pending entry.
 */
void reqcache_answer(reqcache *c, const reqcache_key *k, void *owner, const void *reply, size_t reply_len,
		     uint64_t now);

size_t reqcache_pending(const reqcache *c);
size_t reqcache_answered(const reqcache *c);
size_t reqcache_bytes(const reqcache *c); /* of the answered entries, reply + entry */
/* What an answered entry costs besides its reply bytes (for the memory arithmetic). */
size_t reqcache_entry_size(void);

#endif
