/*
 * conntab: the ingest's producer connections, for the rules that keep the
 * ingest from being locked out (docs/writer.md "Connections: deadline,
 * caps").  One entry per open connection (nng pipe id), with the address
 * it came from and when it arrived; at most `cap` entries, at most
 * `per_addr` from one address.
 *
 *   - A connection that has completed no request `idle_ms` after it
 *     arrived is due to be closed (conntab_expired).  Once it has sent one
 *     request it is never closed for idling: producers keep their
 *     connections open between bursts.
 *     While request bytes keep arriving (or wait unread: nng is behind),
 *     the deadline counts from the last of them (conntab_peer); while the
 *     caller's receivers are all busy (a whole request may wait in nng),
 *     it counts from the last moment they were (conntab_expired).
 *   - A new connection past a cap (its address's or the global one)
 *     displaces the oldest connection in that scope that has completed no
 *     request, has sent nothing since its SP header, and is at least
 *     `displace_ms` old; when there is none, the
 *     new one is refused.  The minimum age spares a producer whose first
 *     request is still on its way (a large one takes a while): without it,
 *     producers past a cap that all send large requests would displace
 *     each other for ever.
 *     So silent connections can delay a producer's connection only by the
 *     time it takes to send its first request, never lock it out.
 *
 * Addresses: IPv4 by address, IPv6 by its /64 (the edge's rule for
 * streams), an IPv4-mapped IPv6 address as IPv4; a key of length 0
 * (ipc://, inproc://) is under the global cap only.
 *
 * Not thread-safe: ingest.c holds its own mutex around every call.
 * Time is whatever clock the caller reads (ms).
 */
#ifndef BW_CONNTAB_H
#define BW_CONNTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Slack for the kernel's coarse clock (jiffies) on when the SP header arrived. */
#define CONNTAB_DATA_MARGIN_MS 100u

typedef struct conntab conntab;

typedef struct conntab_addr {
	unsigned char b[8];
	uint8_t len;            /* 0: not an IP connection (no per-address cap) */
	unsigned char peer[18]; /* the whole peer, address (IPv6 form) and port: for conntab_has_peer */
} conntab_addr;

typedef enum {
	CONNTAB_ADMIT,         /* in the table */
	CONNTAB_REFUSE_ADDR,   /* its address has per_addr connections, none of them displaceable */
	CONNTAB_REFUSE_GLOBAL, /* the table is full, none of them displaceable */
} conntab_verdict;

/* cap >= 1, per_addr >= 1, idle_ms >= 1. */
conntab *conntab_new(size_t cap, size_t per_addr, uint64_t idle_ms, uint64_t displace_ms);
void conntab_free(conntab *t); /* NULL-safe */

/*
 * Connection id arrived from a at now.  On CONNTAB_ADMIT, *displaced is the
 * id of a connection removed to make room (the caller closes it), or 0.
 */
conntab_verdict conntab_admit(conntab *t, uint32_t id, const conntab_addr *a, uint64_t now, uint32_t *displaced);
/* Connection id sent a request (unknown ids are ignored). */
void conntab_seen(conntab *t, uint32_t id);
/* Connection id is gone (unknown ids are ignored). */
void conntab_remove(conntab *t, uint32_t id);
/*
 * Removes up to max connections that completed no request within idle_ms
 * and writes their ids to ids (the caller closes them); returns how many.
 * behind_at: the last time the caller had no receiver free (0: never).  A
 * whole request can wait inside nng for a receiver, its bytes all read and
 * none arriving, so the deadline counts from behind_at too: a connection is
 * closed only once the writer has been ready to take its request for
 * idle_ms (the writer's delay is never the peer's fault).
 */
size_t conntab_expired(conntab *t, uint64_t now, uint64_t behind_at, uint32_t *ids, size_t max);
size_t conntab_count(const conntab *t);
/*
 * True when a connection in the table came from peer (conntab_addr.peer).
 * data_at: when request bytes last arrived on it (now while bytes wait
 * unread in the kernel: the writer is behind, not the peer), 0 when
 * unknown.  Bytes that arrived CONNTAB_DATA_MARGIN_MS or more after the
 * connection was admitted (its SP header comes before) are a request on
 * its way: the idle deadline of a connection that has completed no request
 * restarts at data_at, and it is no longer displaced, so a large request
 * that nng is still reading is never cut.
 */
bool conntab_peer(conntab *t, const unsigned char peer[18], uint64_t data_at);

#endif
