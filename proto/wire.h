/*
 * wire: the msgpack formats shared by broker-writer, edge-gateway and
 * studioctl.  The layouts are documented in proto/README.md (version 1).
 *
 * Decoding never trusts a count: every array/map/str/bin length is checked
 * against the bytes left (and the schema's bounds) before anything is
 * allocated, so a 5-byte "array of 4 billion" costs nothing.  Decoding uses
 * a bounded reader of our own; encoding uses msgpack-c's packer.
 *
 * Decoded objects point into the input buffer: the caller keeps the input
 * alive (for an nng message: do not free it) until the object is freed.
 *
 * Out of memory: the *_try_* functions return ST_ENOMEM (nothing leaked,
 * nothing half-built left to the caller); they are what libstudio-producer
 * calls, as a library must never abort its host.  The others are the same
 * code followed by st_oom() on ST_ENOMEM, for the daemons and studioctl,
 * whose policy is to abort and be restarted (common/st_util.h).
 */
#ifndef PROTO_WIRE_H
#define PROTO_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "st_buf.h"
#include "st_err.h"

#define PROTO_VERSION 1

/* Bounds of the interface (docs/api.md).  Constants, not settings. */
#define PROTO_MAX_REQUEST (16u * 1024 * 1024) /* bytes of one ingest request */
#define PROTO_MAX_BATCH 10000u                /* events in one request */
#define PROTO_MAX_TOPIC 200u                  /* bytes, [A-Za-z0-9._:/-] */
#define PROTO_MAX_ABOUT 64u                   /* entries */
#define PROTO_MAX_ABOUT_LEN 200u              /* bytes per entry */
#define PROTO_MAX_DATA (256u * 1024)          /* bytes of the JSON text */
#define PROTO_MAX_KEY 200u                    /* bytes */
#define PROTO_MAX_TOKEN 8192u                 /* bytes of a request map's token (st_auth's bound) */
/*
 * Bytes of one published message.  The writer's messages are far smaller
 * (broker-writer/publish.h: at most ~256 KiB of events, or one event of at
 * most ~276 KiB, plus a header; checked there at compile time), and this
 * limit is what an edge's receive queue is sized by, so it stays tight.
 */
#define PROTO_MAX_PUB (512u * 1024)
/* An upper bound of one event's encoded size in a published message. */
#define PROTO_MAX_PUB_EVENT (64u + PROTO_MAX_TOPIC + PROTO_MAX_DATA + PROTO_MAX_ABOUT * (5u + PROTO_MAX_ABOUT_LEN))

typedef struct proto_str {
	const char *p; /* not NUL-terminated */
	size_t len;
} proto_str;

/*
 * The contract's topic rule, for every place that takes a topic (requests,
 * published messages, the edge's topic= parameters): NULL when s is 1..200
 * bytes of [A-Za-z0-9._:/-], else a short static reason ("empty",
 * "too long", "bad character").
 */
const char *proto_topic_check(proto_str s);

/* One event.  topic, about and key point into the request's input; data
 * points into the request's own arena (its compact form, see st_json_compact). */
typedef struct proto_event {
	proto_str topic;
	const proto_str *about; /* n_about entries */
	uint32_t n_about;
	proto_str data; /* valid when has_data */
	bool has_data;  /* false: a change signal */
	proto_str key;  /* valid when has_key */
	bool has_key;
} proto_event;

/*
 * ---- ingest request: one map (one event), an array of maps (a batch), or
 * the request map {"token": T, "events": [map, ...]} (token optional here:
 * the writer decides whether it is required) ----
 */

typedef struct proto_request proto_request;

/*
 * Decodes and validates a whole request (every rule of the contract: types,
 * lengths, topic charset, UTF-8 and no NUL in about/key, data a valid JSON
 * text <= 256 KiB, unknown keys refused, batch 1..10000, nothing after the
 * value, total <= PROTO_MAX_REQUEST).  On ST_EINVAL, detail (if not NULL)
 * gets a one-line reason such as "event 3: topic: bad character" (NUL-
 * terminated, truncated to detail_len).  On ST_OK *out owns its arena; the
 * caller keeps buf alive until proto_request_free.
 */
st_err proto_request_decode(const void *buf, size_t len, proto_request **out, char *detail, size_t detail_len);
/* The same, with ST_ENOMEM (detail "out of memory") instead of aborting when an allocation fails. */
st_err proto_request_try_decode(const void *buf, size_t len, proto_request **out, char *detail, size_t detail_len);
/*
 * The token of a request map, read without decoding its events (so the
 * writer refuses an unauthenticated request before reserving memory for
 * its decode): true with *token pointing into buf when buf is a request
 * map, well-formed as far as its keys go, holding a token; false (and
 * *token empty) for anything else.  Pure, bounded, no allocation.
 */
bool proto_request_token_peek(const void *buf, size_t len, proto_str *token);
size_t proto_request_count(const proto_request *r);
const proto_event *proto_request_event(const proto_request *r, size_t i);
/* Bytes this request holds in memory (input + events + about pool + arena), for the writer's buffer bound. */
size_t proto_request_bytes(const proto_request *r);
/*
 * The most memory proto_request_decode holds at any moment for an input of
 * len bytes, the input included (its peak, allocator overhead aside), so
 * the writer reserves it before decoding; proto_request_bytes of the
 * result is never more: 4 * len (the arena grows by doubling) plus up to
 * ~31 MB for 640,000 about entries; 94 MiB for a 16 MiB request.
 */
size_t proto_request_bytes_max(size_t len);
void proto_request_free(proto_request *r); /* NULL-safe */

/*
 * Appends one event map / a batch array to out.  The try form returns
 * ST_ENOMEM with out cut back to its length before the call.
 */
st_err proto_request_try_encode(st_buf *out, const proto_event *ev, size_t n, bool as_batch);
void proto_request_encode(st_buf *out, const proto_event *ev, size_t n, bool as_batch);

/*
 * Writes the request map {"token": token, "events": <batch>} where
 * batch[0..len) is an array already encoded by proto_request_encode
 * (as_batch): a producer encodes a batch once and wraps it with the token
 * current at each send (tokens rotate).  token: 1..PROTO_MAX_TOKEN bytes
 * (asserted: the caller checks).
 */
void proto_request_wrap(st_buf *out, proto_str token, const void *batch, size_t len);
/* The bytes before the batch, into out (cap >= PROTO_WRAP_HEAD_MAX); returns their count.  No allocation. */
#define PROTO_WRAP_HEAD_MAX (1u + 6u + 3u + PROTO_MAX_TOKEN + 7u)
size_t proto_request_wrap_head(unsigned char *out, size_t cap, proto_str token);

/* ---- ingest reply ---- */

/* {"ok":true,"seqs":[...]} */
void proto_reply_ok_encode(st_buf *out, const uint64_t *seqs, size_t n);
/* {"ok":false,"error":code,"detail":detail}; code is "invalid", "busy" or "unavailable". */
void proto_reply_err_encode(st_buf *out, const char *code, const char *detail);

typedef struct proto_reply {
	bool ok;
	uint64_t *seqs; /* malloc'd, n_seqs entries (ok only) */
	size_t n_seqs;
	char error[32];   /* NUL-terminated code (not ok) */
	char detail[512]; /* NUL-terminated, truncated */
} proto_reply;
/* ST_OK, or ST_EPROTO (out left empty: nothing to fini). */
st_err proto_reply_decode(const void *buf, size_t len, proto_reply *out);
/* The same, with ST_ENOMEM (out left empty) instead of aborting when the seqs cannot be allocated. */
st_err proto_reply_try_decode(const void *buf, size_t len, proto_reply *out);
void proto_reply_fini(proto_reply *r);

/* Published messages (writer pub0 -> edges' sub0): wire_pub.h. */

#endif
