/*
 * wire_pub: the published messages (writer -> edges, proto/README.md): a
 * batch of events or a tick.  Decoded messages point into the input buffer:
 * keep it alive until proto_pub_free.
 */
#ifndef PROTO_WIRE_PUB_H
#define PROTO_WIRE_PUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "st_buf.h"
#include "st_err.h"
#include "wire.h"

enum proto_pub_kind { PROTO_PUB_BATCH = 1, PROTO_PUB_TICK = 2 };

/* One committed event as published: seq plus the event's fields. */
typedef struct proto_pub_event {
	uint64_t seq;
	proto_str topic;
	const proto_str *about;
	uint32_t n_about;
	proto_str data;
	bool has_data;
} proto_pub_event;

/*
 * A batch: the committed events ev[0..n) in ascending seq order; prev is
 * the seq of the last event committed before ev[0] (0 when none).
 * writer is the writer's instance id (for logs and metrics).
 */
void proto_pub_batch_encode(st_buf *out, const char *writer, uint64_t prev, const proto_pub_event *ev, size_t n);
/* A tick: nothing to flush this interval; head is the newest committed seq. */
void proto_pub_tick_encode(st_buf *out, const char *writer, uint64_t head);

typedef struct proto_pub proto_pub;
/* Decodes a published message (version checked: ST_EPROTO for an unknown v). */
st_err proto_pub_decode(const void *buf, size_t len, proto_pub **out);
enum proto_pub_kind proto_pub_kind(const proto_pub *m);
proto_str proto_pub_writer(const proto_pub *m);
uint64_t proto_pub_prev(const proto_pub *m); /* batch */
uint64_t proto_pub_head(const proto_pub *m); /* tick: head; batch: seq of the last event */
size_t proto_pub_count(const proto_pub *m);  /* batch */
const proto_pub_event *proto_pub_event_at(const proto_pub *m, size_t i);
void proto_pub_free(proto_pub *m); /* NULL-safe */

#endif
