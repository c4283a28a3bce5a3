/*
 * sub: the edge's SUB side - one nng sub0 socket dialing every writer.
 *
 * Subscribes to everything, receive buffer SUB_RECVBUF messages, messages
 * above PROTO_MAX_PUB refused by nng, reconnect 100 ms doubling to 5 s.
 * So what writers can make nng hold here is at most SUB_RECVBUF x
 * PROTO_MAX_PUB (256 x 512 KiB = 128 MiB) queued, plus one message being
 * read per writer connection (at most SUB_MAX_URLS x SUB_MAX_ADDRS
 * connections x 512 KiB); past the queue SUB
 * drops the oldest and the sequencer fills the hole from PostgreSQL.  Each URL
 * is dialed with NNG_FLAG_NONBLOCK (so a writer that is down at start is
 * retried).  A tcp:// URL whose host is a DNS name is resolved off the loop
 * (st_resolve) at start and every SUB_RESOLVE_MS, and sooner while one of
 * its addresses has no pipe (from SUB_RERESOLVE_MIN_MS after a pipe's loss,
 * doubling up to SUB_RESOLVE_MS: reresolve.h); never two lookups at once for
 * one URL.  Every address is dialed as tcp://IP:PORT, dialers of addresses
 * that disappeared are closed (a failed resolution keeps the current set).
 *
 * Messages are read on the loop thread: NNG_OPT_RECVFD is watched by
 * libevent and drained with NNG_FLAG_NONBLOCK, at most SUB_BATCH messages
 * per callback, so nng threads never touch the loop.
 *
 * Requires evthread_use_pthreads() before event_base_new() (st_resolve
 * hands its answers over through an st_mailbox, and so do the pipe
 * notifications their losses).
 */
#ifndef EDGE_SUB_H
#define EDGE_SUB_H

#include <stdbool.h>
#include <stddef.h>

#include "st_err.h"

struct event_base;
typedef struct sub sub;

#define SUB_MAX_URLS 64u
/* Messages nng queues for us: a writer's flush of 20,000 events is 79 messages
 * of 256 events, so two writers' bursts fit while the intake pauses. */
#define SUB_RECVBUF 256
#define SUB_MAX_ADDRS 32u /* addresses dialed per DNS name */
#define SUB_RESOLVE_MS 10000u
/* The first lookup after a writer's pipe went away (then doubling). */
#define SUB_RERESOLVE_MIN_MS 250u
/*
 * Messages per loop callback.  One: the fan-out of a message (up to
 * PUBLISH_MAX_EVENTS frames per subscriber) reaches the sockets before the
 * next is read, so a burst waits in nng's receive queue, not in the
 * streams' bounded queues, and a fast reader never overflows.
 */
#define SUB_BATCH 1u
#define SUB_URL_MAX 512u

/*
 * One published message, on the loop thread; data is valid only during the
 * call (the nng message is freed after it).  The callback must not call
 * sub_free.
 */
typedef void (*sub_fn)(void *arg, const void *data, size_t len);

/*
 * urls: 1..SUB_MAX_URLS nng URLs (copied), e.g. tcp://writer:7451.
 * ST_EINVAL for a malformed or too long URL or a bad count, ST_ESYS when
 * nng fails (logged).  Loop thread.
 */
st_err sub_new(struct event_base *base, const char *const *urls, size_t n, sub_fn fn, void *arg, sub **out);

/* Discards the lookups still out (never waits for one: a slow DNS server
 * cannot hold a shutdown), closes the socket.  Loop thread, outside sub
 * callbacks.  NULL-safe. */
void sub_free(sub *s);

/* Pipes (connections) currently up for URL i (all its addresses), and in total.
 * Any thread (atomic counters kept by nng's pipe notifications). */
/*
 * Flow control: while paused the receive descriptor is not watched, so
 * published messages wait in nng's receive queue (NNG_OPT_RECVBUF; beyond it
 * SUB drops the oldest and the sequencer fills the hole from PostgreSQL).
 * Loop thread.  Idempotent.
 */
void sub_pause(sub *s, bool paused);
bool sub_paused(const sub *s);
/*
 * A published message is queued in nng, not read yet (the edge paused its
 * intake, or is still reading a burst ahead of it), or taken and in the
 * callback's hands.  A poll of the receive descriptor, which is never
 * read, then a flag the reader sets before it takes one and clears after
 * the callback returned: a caller that then reads what the callback
 * records of a message sees it or sees it waiting, never neither.  Any
 * thread, while s lives.
 */
bool sub_msg_waiting(const sub *s);
size_t sub_url_pipes(const sub *s, size_t i);
size_t sub_pipes(const sub *s);
/* Messages received, and receive errors other than EAGAIN. */
unsigned long long sub_received(const sub *s);

#endif
