/*
 * publish: the writer's pub0 socket, listened on --publish.
 *
 * Committed events go out in seq order as proto batches of at most
 * PUBLISH_MAX_EVENTS events and about PUBLISH_MAX_BYTES bytes each (a single
 * event larger than that still goes alone), each carrying prev: the first
 * message gets the prev broker_append returned, each next one the last seq
 * of the message before it.  Sends use NNG_FLAG_NONBLOCK: pub0 never blocks,
 * it drops the oldest message for a subscriber whose queue (NNG_OPT_SENDBUF
 * 8192) is full, and the edges fill such gaps from PostgreSQL.
 *
 * Thread: the loop thread (nng_sendmsg with NONBLOCK never waits).
 */
#ifndef BW_PUBLISH_H
#define BW_PUBLISH_H

#include <stddef.h>
#include <stdint.h>

#include "st_err.h"
#include "wire.h"

/* Small messages: an edge reads one per loop turn, so this is the burst
 * one subscriber's queue (1,000 frames, ADR-0197) must absorb at a time. */
#define PUBLISH_MAX_EVENTS 256u
#define PUBLISH_MAX_BYTES (256u * 1024)
#define PUBLISH_SENDBUF 8192

typedef struct publish publish;

/* Listens on url.  writer is the instance id carried by every message (copied).
 * ST_EINVAL for a bad URL, ST_ESYS when it cannot listen (logged). */
st_err publish_new(const char *url, const char *writer, publish **out);
void publish_free(publish *p); /* NULL-safe; closes the socket */

/* How many of ev[0..n) go into the next message (>= 1 when n >= 1). */
size_t publish_split(const proto_pub_event *ev, size_t n);

/* Publishes ev[0..n) (ascending seqs) as one or more batches; returns the messages sent. */
size_t publish_batch(publish *p, uint64_t prev, const proto_pub_event *ev, size_t n);
/* Publishes a tick carrying head. */
void publish_tick(publish *p, uint64_t head);

#endif
