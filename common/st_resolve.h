/*
 * st_resolve: host names resolved off the event loop.
 *
 * getaddrinfo can take seconds (slow DNS, Kubernetes search domains with
 * ndots:5), and the loop must never wait for it.  Each lookup runs on a
 * short-lived thread of its own, which owns the request while it resolves;
 * the answer comes back to the loop through the resolver's st_mailbox, the
 * one place where threads meet.  A lookup that is cancelled, or whose
 * resolver is freed, still finishes on its thread and is then discarded
 * there or on the loop: nothing waits for it.
 *
 * Bounds: at most ST_RESOLVE_MAX_NAMES names per lookup, the first
 * ST_RESOLVE_MAX_ADDRS distinct addresses of each (a resolver may be set to
 * keep more, up to ST_RESOLVE_ADDRS_CAP), and at most
 * ST_RESOLVE_MAX_INFLIGHT lookups (threads) per resolver at a time.
 *
 * Thread: every function and callback on the loop thread of base.
 */
#ifndef ST_RESOLVE_H
#define ST_RESOLVE_H

#include <stddef.h>

#include "st_err.h"

#define ST_RESOLVE_MAX_NAMES 16u
#define ST_RESOLVE_MAX_ADDRS 8u
#define ST_RESOLVE_ADDRS_CAP 64u
#define ST_RESOLVE_MAX_INFLIGHT 16u

struct event_base;
typedef struct st_resolver st_resolver;
typedef struct st_resolve_req st_resolve_req;

/*
 * The answer, on the loop thread.  addrs[i] holds the numeric addresses of
 * names[i] (IPv4 or IPv6 text, comma-separated, in getaddrinfo's order), ""
 * when that name did not resolve.  err is NULL when at least one name
 * resolved, else the reason (getaddrinfo's message for the first name).
 * Everything is valid during the call only; the request is gone after it.
 */
typedef void (*st_resolve_fn)(void *arg, const char *const *addrs, size_t n, const char *err);

/* Loop thread; evthread_use_pthreads() must have been called. */
st_err st_resolver_new(struct event_base *base, st_resolver **out);

/*
 * Loop thread.  Lookups started afterwards keep the first n distinct
 * addresses of each name (1 <= n <= ST_RESOLVE_ADDRS_CAP, clamped) instead
 * of ST_RESOLVE_MAX_ADDRS: the edge dials every writer behind one name.
 */
void st_resolver_set_max_addrs(st_resolver *r, size_t n);

/* Loop thread.  Lookups still running are discarded without callbacks
 * (their threads end by themselves).  NULL-safe. */
void st_resolver_free(st_resolver *r);

/*
 * Starts resolving names[0..n) (1 <= n <= ST_RESOLVE_MAX_NAMES, copied).
 * ST_OK: fn will be called exactly once, later (never from inside this
 * call), unless the request is cancelled or the resolver freed first.
 * ST_EINVAL: bad n or an empty name.  ST_EBUSY: ST_RESOLVE_MAX_INFLIGHT
 * lookups are running.  ST_ESYS: no thread could be started.
 */
st_err st_resolver_lookup(st_resolver *r, const char *const *names, size_t n, st_resolve_fn fn, void *arg,
			  st_resolve_req **out);

/* fn of q will never be called; q must not be used afterwards.  Not from
 * inside q's own callback.  NULL-safe. */
void st_resolve_cancel(st_resolve_req *q);

#endif
