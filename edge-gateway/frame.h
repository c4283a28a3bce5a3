/*
 * frame: one immutable, reference-counted unit of a stream - an event
 * (item) or a control envelope (resync, heartbeat, reconnect, complete,
 * failure).
 *
 * The envelope JSON is rendered once when the frame is made; the bytes of
 * each wire format (SSE, NDJSON, json-seq) are rendered at most once, on
 * first use, and shared by every subscriber (handed to the socket layer with
 * evbuffer_add_reference, never copied per subscriber).
 *
 * Envelopes (docs/api.md):
 *   item      {"type":"item","id":"42","topic":"t","about":["a"],"data":DATA}   (no "data" for a signal)
 *   resync    {"type":"resync","id":"57","reason":"overflow"}
 *   heartbeat {"type":"heartbeat"}   (a stream position: {"type":"heartbeat","id":"P"})
 *   reconnect {"type":"reconnect","retry_ms":N,"reason":"draining"}
 *   complete  {"type":"complete"}
 *   failure   {"type":"failure","problem":{"type":"about:blank","title":T,"status":S,"detail":D}}
 * Formats:
 *   SSE:      item/resync "id: SEQ\n"; every type but item "event: TYPE\n";
 *             reconnect "retry: N\n"; then "data: ENVELOPE\n\n".
 *             heartbeat is the comment ": heartbeat\n\n".
 *   NDJSON:   "ENVELOPE\n"
 *   json-seq: "\x1eENVELOPE\n" (RFC 7464)
 *
 * Threads: the reference count is atomic; frame_bytes() may be called from
 * any thread (the one lazily rendered form is published with a compare-and-
 * swap), so one frame is shared by every worker loop of --threads N.
 */
#ifndef EDGE_FRAME_H
#define EDGE_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h" /* proto_str */

typedef struct frame frame;

enum frame_type { FRAME_ITEM, FRAME_RESYNC, FRAME_HEARTBEAT, FRAME_RECONNECT, FRAME_COMPLETE, FRAME_FAILURE };
enum frame_format { FRAME_SSE = 0, FRAME_NDJSON = 1, FRAME_JSONSEQ = 2, FRAME_NFORMATS = 3 };

/* Bytes counted per queued frame on top of its envelope text (ADR-0197's
 * "fixed overhead": the frame struct, queue slot and chain reference). */
#define FRAME_OVERHEAD 128u

/*
 * An item.  Copies everything it is given.  about[i] are raw (unescaped)
 * strings; data is the compact JSON text (embedded verbatim) or NULL for a
 * change signal.  Returns a frame with one reference.
 */
frame *frame_item_new(uint64_t seq, const char *topic, size_t topic_len, const proto_str *about, uint32_t n_about,
		      const char *data, size_t data_len);
frame *frame_resync_new(uint64_t id, const char *reason); /* overflow|replay_cap|cursor_expired|gap */
frame *frame_heartbeat_new(void);
/*
 * A stream's position P (docs/api.md "Stream position"), the first frame of
 * a stream opened without a last event id: a heartbeat with an id.  SSE
 * "id: P\n\n" (no data: nothing dispatched, EventSource keeps P as its last
 * event id); NDJSON/json-seq {"type":"heartbeat","id":"P"}.  frame_seq is P;
 * never queued, so no id guard or coalescing ever sees it.
 */
frame *frame_position_new(uint64_t pos);
frame *frame_reconnect_new(uint32_t retry_ms, const char *reason); /* slow_consumer|blocked|draining */
frame *frame_complete_new(void);
frame *frame_failure_new(int status, const char *title, const char *detail);

/*
 * Delivery timing travels with the frame: the arrival of the nng message
 * an item came in (st_clock_mono_ns), given to the socket layer with its
 * bytes (http_ref.origin_ns).  0 (the default): not timed (fills, replays,
 * events that waited for a gap, control frames).  Set before the frame is
 * shared with another thread.
 */
void frame_set_origin(frame *f, uint64_t origin_ns);
uint64_t frame_origin_ns(const frame *f);
frame *frame_ref(frame *f); /* returns f */
void frame_unref(frame *f); /* NULL-safe; frees at zero */
/* The cleanup of bytes lent to a connection (evbuffer_add_reference, http_ref): arg is the frame, unreferenced. */
void frame_release_cb(const void *data, size_t len, void *arg);

enum frame_type frame_type(const frame *f);
bool frame_is_terminal(const frame *f); /* reconnect, complete, failure */
uint64_t frame_seq(const frame *f);     /* the id of an item, resync or position; 0 otherwise */
bool frame_is_signal(const frame *f);   /* an item without data */
/* Items; NULL otherwise.  Not NUL-terminated; valid while a reference is held. */
const char *frame_topic(const frame *f, size_t *len);
/* Coalescing key: equal topic and equal about list (same entries, same order). */
uint64_t frame_resource_hash(const frame *f);
bool frame_same_resource(const frame *a, const frame *b);
/* What the frame counts against a queue's byte bound: envelope length + FRAME_OVERHEAD. */
size_t frame_cost(const frame *f);
/* The JSON envelope; not NUL-terminated (followed by '\n'): use *len. */
const char *frame_envelope(const frame *f, size_t *len);
/* The frame in one wire format; rendered on first call, cached, valid while a reference is held. */
const char *frame_bytes(frame *f, enum frame_format fmt, size_t *len);

#endif
