/*
 * publish: the writer's pub0 socket, listened on --publish.
 *
 * Committed events go out in seq order as proto batches of at most
 * PUBLISH_MAX_EVENTS events and about PUBLISH_MAX_BYTES bytes each (a single
 * event larger than that still goes alone), each carrying prev: the first
 * message gets the prev broker_append returned, each next one the last seq
 * of the message before it.  Sends use NNG_FLAG_NONBLOCK: pub0 never blocks,
 * it drops the oldest message for a subscriber whose queue (NNG_OPT_SENDBUF
 * PUBLISH_SENDBUF messages) is full, and the edges fill such gaps from
 * PostgreSQL.
 *
 * Memory, in bytes: pub0 shares one message among all its subscribers'
 * queues (a reference each), and every queue holds the newest messages, so
 * the queued messages are at most the last PUBLISH_SENDBUF published, plus
 * the one each subscriber connection is writing; connections are capped at
 * PUBLISH_MAX_SUBSCRIBERS (more are closed as they arrive) and every
 * message is at most PUBLISH_MSG_MAX bytes.  docs/writer.md "Memory bound".
 *
 * Thread: the loop thread (nng_sendmsg with NONBLOCK never waits).
 */
#ifndef BW_PUBLISH_H
#define BW_PUBLISH_H

#include <stddef.h>
#include <stdint.h>

#include "st_err.h"
#include "wire.h"
#include "wire_pub.h"

/* Small messages: an edge reads one per loop turn, so this is the burst
 * one subscriber's queue (1,000 frames, ADR-0197) must absorb at a time. */
#define PUBLISH_MAX_EVENTS 256u
#define PUBLISH_MAX_BYTES (256u * 1024)
/* The largest single event as publish_split estimates it (an event that is
 * larger than PUBLISH_MAX_BYTES goes alone), and the message around it. */
#define PUBLISH_EVENT_MAX (48u + PROTO_MAX_TOPIC + PROTO_MAX_ABOUT * (5u + PROTO_MAX_ABOUT_LEN) + PROTO_MAX_DATA)
#define PUBLISH_ENVELOPE_MAX 512u
#define PUBLISH_MSG_MAX (PUBLISH_EVENT_MAX + PUBLISH_ENVELOPE_MAX)
/* Messages queued for one subscriber: 256 x 256 KiB = 64 MiB for all (shared). */
#define PUBLISH_SENDBUF 256
#define PUBLISH_MAX_SUBSCRIBERS 64u

typedef struct publish publish;

/* Listens on url.  writer is the instance id carried by every message
 * (copied; at most 255 bytes, so a message stays within PUBLISH_MSG_MAX).
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
