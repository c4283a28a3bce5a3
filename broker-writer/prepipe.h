/*
 * prepipe: the deadline for connections that are not nng pipes yet (docs/
 * writer.md "Connections: deadline, caps").  nng 1.5.2 gives no handle on a
 * connection until its SP header exchange (and, on tls+tcp, its TLS
 * handshake) is done, and on tls+tcp its own 10 s negotiation timeout is
 * lost while the handshake waits for the peer (src/supplemental/tls/
 * tls_common.c: tls_cancel aborts the idle tcp_send aio, not the pending
 * tcp_recv), so a silent TLS connection is held for ever.
 *
 * So this module looks at the process's descriptors (/proc/self/fd): every
 * connected TCP socket whose local port is the ingest's, and that the
 * caller has never known as a pipe, is remembered by its inode from the
 * first sweep that sees it; one still there deadline_ms later is shut
 * down (shutdown(2) on a dup of the descriptor, checked to be the same
 * socket: nng sees end-of-file on its pending read and frees the
 * connection itself; the descriptor is never closed under it).
 *
 * At most PREPIPE_TRACK connections are remembered at once (the rest wait
 * for a later sweep).  Linux only (/proc); elsewhere a sweep does nothing.
 * One thread at a time (the ingest's sweep).
 */
#ifndef BW_PREPIPE_H
#define BW_PREPIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PREPIPE_TRACK 4096u

typedef struct prepipe prepipe;

/* A peer as an IPv6 address (IPv4 mapped) and port: how pipes are matched to sockets. */
typedef struct prepipe_peer {
	unsigned char addr[16];
	uint16_t port;
} prepipe_peer;

/*
 * True when peer is a connection the caller knows as a pipe.  data_at (the
 * sweep's clock): when data last arrived on it (TCP_INFO), or the sweep's
 * now while bytes wait unread in its kernel buffer (nng has not read them
 * yet: the peer is not the one that is slow); 0 when unknown.  The ingest
 * restarts that pipe's deadline from it (conntab_peer).
 */
typedef bool (*prepipe_is_pipe_fn)(const prepipe_peer *peer, uint64_t data_at, void *arg);

prepipe *prepipe_new(uint16_t local_port, uint64_t deadline_ms);
void prepipe_free(prepipe *p); /* NULL-safe */

/* Shuts down the connections past the deadline; returns how many. */
size_t prepipe_sweep(prepipe *p, uint64_t now, prepipe_is_pipe_fn is_pipe, void *arg);

#endif
