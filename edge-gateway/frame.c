/*
 * frame: immutable, reference-counted envelopes shared by every subscriber.
 *
 * DESIGN.  A frame is ONE allocation: the small struct, then one byte
 * buffer laid out as
 *
 *     [SSE prefix][ENVELOPE]["\n\n"][NUL]([raw topic][NUL])
 *
 * The SSE prefix ("id: 42\n", "event: TYPE\n", "retry: N\n", "data: ") is
 * rendered in front of the envelope when the frame is made, so two of the
 * three wire formats cost nothing more: SSE is the whole buffer and NDJSON is
 * the envelope plus the first "\n".  Only json-seq needs the record separator
 * *before* the envelope; its bytes are allocated on first use and cached.
 * SSE is the default format (browsers' EventSource), so most frames never
 * allocate again.  A heartbeat's SSE form is the comment ": heartbeat\n\n",
 * a static string.  A stream position is a heartbeat with an id: its SSE
 * prefix is the whole SSE form ("id: P\n\n", a field with no data, so an
 * EventSource records P and dispatches nothing), and the envelope after it
 * serves the two other formats.
 *
 * The whole envelope is sized exactly before anything is written (escaped
 * lengths are counted first), so building it never reallocates; the buffer
 * is built in an st_buf (st_json_escape appends there) whose first bytes are
 * the struct, then handed over and trimmed to its exact size.
 *
 * The coalescing key of an item is the envelope's own slice
 * "topic":"..","about":[..]: JSON string escaping is injective and the
 * literals delimit themselves, so two items have the same topic and the same
 * about list exactly when those slices are equal byte for byte.  Its hash is
 * computed once.  The raw topic is kept only when escaping changed it (never
 * for a topic of the contract's charset); otherwise frame_topic points into
 * the envelope.
 *
 * Threads.  The reference count is a C11 atomic (an edge with several loop
 * threads shares one frame among them, and each releases its references on
 * its own loop); everything else is written once before the first share,
 * except the lazily rendered json-seq bytes.  Those are published without
 * a lock: a loop that finds no cached copy renders one into a fresh buffer
 * and installs it with a compare-and-swap on the cached pointer; the loser
 * of a race frees its own copy and uses the winner's (both are the same
 * bytes, so nothing ever sees a half-written buffer and nothing leaks).
 */
#include "frame.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "st_buf.h"
#include "st_json.h"
#include "st_util.h"

struct frame {
	atomic_uint refs;
	uint8_t type;     /* enum frame_type */
	uint8_t env_off;  /* length of the SSE prefix: buf + env_off is the envelope */
	bool position;    /* a stream position: its SSE form is the prefix alone ("id: P\n\n") */
	uint32_t env_len; /* envelope bytes, without newline */
	uint32_t res_off; /* coalescing slice, relative to the envelope (items) */
	uint32_t res_len;
	uint32_t topic_off; /* raw topic, relative to buf (items) */
	uint32_t topic_len;
	uint64_t seq;
	uint64_t hash;           /* of the coalescing slice (items) */
	uint64_t origin_ns;      /* when the message it came in arrived (st_clock_mono_ns), 0: not timed */
	_Atomic(char *) jsonseq; /* "\x1e" ENVELOPE "\n", rendered on first use (CAS-published) */
	char buf[];
};

static const char sse_heartbeat[] = ": heartbeat\n\n";
static const char type_names[][10] = { "item", "resync", "heartbeat", "reconnect", "complete", "failure" };

/*
 * Starts a frame: reserves the struct plus `extra` bytes in b (one
 * allocation when the caller's count is right) and writes the SSE prefix.
 * Returns the offset of the envelope inside b.
 */
static size_t
build_begin(st_buf *b, enum frame_type type, uint64_t id, bool has_id, int64_t retry, size_t extra)
{
	static const char zeros[sizeof(struct frame)];
	size_t hdr = offsetof(struct frame, buf);

	/* 80 bytes cover the longest prefix: id (25) + event (17) + retry (18) + data (6). */
	st_buf_reserve(b, hdr + 80 + extra + 3);
	st_buf_append(b, zeros, hdr);
	if (type == FRAME_HEARTBEAT)
		return hdr;
	if (has_id) {
		st_buf_puts(b, "id: ");
		st_buf_put_u64(b, id);
		st_buf_putc(b, '\n');
	}
	if (type != FRAME_ITEM) {
		st_buf_puts(b, "event: ");
		st_buf_puts(b, type_names[type]);
		st_buf_putc(b, '\n');
	}
	if (retry >= 0) {
		st_buf_puts(b, "retry: ");
		st_buf_put_u64(b, (uint64_t)retry);
		st_buf_putc(b, '\n');
	}
	st_buf_puts(b, "data: ");
	return b->len;
}

/*
 * Finishes the envelope started at env (offset in b) and turns b into a
 * frame.  tail (raw bytes, may be NULL) is stored after the NUL that ends the
 * SSE bytes; *tail_at gets its offset relative to buf.
 */
static frame *
build_end(st_buf *b, enum frame_type type, uint64_t seq, size_t env, const char *tail, size_t tail_len, size_t *tail_at)
{
	size_t hdr = offsetof(struct frame, buf), env_len = b->len - env, total;
	frame *f;

	/* Contract bounds (256 KiB data, 64 x 200 about) keep envelopes far below this. */
	ST_ASSERT(env_len < UINT32_MAX / 2 && env - hdr <= UINT8_MAX);
	st_buf_append(b, "\n\n", 2);
	if (tail) {
		st_buf_append(b, "", 1); /* the NUL ending the SSE bytes, then the tail */
		*tail_at = b->len - hdr;
		st_buf_append(b, tail, tail_len);
	}
	total = b->len + 1;
	f = (frame *)st_buf_steal(b, NULL);
	f = st_xrealloc(f, total); /* trims st_buf's power-of-two slack */
	atomic_init(&f->refs, 1);
	f->type = (uint8_t)type;
	f->env_off = (uint8_t)(env - hdr);
	f->env_len = (uint32_t)env_len;
	f->seq = seq;
	f->position = false;
	atomic_init(&f->jsonseq, NULL);
	f->res_off = f->res_len = 0;
	f->topic_off = f->topic_len = 0;
	f->hash = 0;
	return f;
}

frame *
frame_item_new(uint64_t seq, const char *topic, size_t topic_len, const proto_str *about, uint32_t n_about,
	       const char *data, size_t data_len)
{
	size_t topic_esc = st_json_escaped_len(topic, topic_len), extra, env, res, res_end, topic_at;
	bool raw_topic = topic_esc != topic_len + 2;
	st_buf b;
	frame *f;

	extra = sizeof("{\"type\":\"item\",\"id\":\"\",\"topic\":,\"about\":[],\"data\":}") + 20 + topic_esc + n_about +
		(data ? data_len : 0) + (raw_topic ? topic_len + 1 : 0);
	for (uint32_t i = 0; i < n_about; i++)
		extra += st_json_escaped_len(about[i].p, about[i].len);
	st_buf_init(&b);
	env = build_begin(&b, FRAME_ITEM, seq, true, -1, extra);
	st_buf_puts(&b, "{\"type\":\"item\",\"id\":\"");
	st_buf_put_u64(&b, seq);
	st_buf_puts(&b, "\",");
	res = b.len;
	st_buf_puts(&b, "\"topic\":");
	topic_at = b.len + 1;
	st_json_escape(&b, topic, topic_len);
	st_buf_puts(&b, ",\"about\":[");
	for (uint32_t i = 0; i < n_about; i++) {
		if (i)
			st_buf_putc(&b, ',');
		st_json_escape(&b, about[i].p, about[i].len);
	}
	st_buf_putc(&b, ']');
	res_end = b.len;
	if (data) {
		st_buf_puts(&b, ",\"data\":");
		st_buf_append(&b, data, data_len);
	}
	st_buf_putc(&b, '}');
	/* Kept raw only when escaping changed it; otherwise it is inside the envelope. */
	f = build_end(&b, FRAME_ITEM, seq, env, raw_topic ? topic : NULL, topic_len, &topic_at);
	if (!raw_topic)
		topic_at -= offsetof(struct frame, buf);
	f->res_off = (uint32_t)(res - env);
	f->res_len = (uint32_t)(res_end - res);
	f->topic_off = (uint32_t)topic_at;
	f->topic_len = (uint32_t)topic_len;
	f->hash = st_hash_bytes(f->buf + f->env_off + f->res_off, f->res_len);
	return f;
}

/* Control envelopes carry no resource. */
static frame *
control_end(st_buf *b, enum frame_type type, uint64_t seq, size_t env)
{
	return build_end(b, type, seq, env, NULL, 0, NULL);
}

frame *
frame_resync_new(uint64_t id, const char *reason)
{
	size_t rl = strlen(reason), env;
	st_buf b;

	st_buf_init(&b);
	env = build_begin(&b, FRAME_RESYNC, id, true, -1, 64 + st_json_escaped_len(reason, rl));
	st_buf_puts(&b, "{\"type\":\"resync\",\"id\":\"");
	st_buf_put_u64(&b, id);
	st_buf_puts(&b, "\",\"reason\":");
	st_json_escape(&b, reason, rl);
	st_buf_putc(&b, '}');
	return control_end(&b, FRAME_RESYNC, id, env);
}

frame *
frame_heartbeat_new(void)
{
	size_t env;
	st_buf b;

	st_buf_init(&b);
	env = build_begin(&b, FRAME_HEARTBEAT, 0, false, -1, 24);
	st_buf_puts(&b, "{\"type\":\"heartbeat\"}");
	return control_end(&b, FRAME_HEARTBEAT, 0, env);
}

frame *
frame_position_new(uint64_t pos)
{
	size_t hdr = offsetof(struct frame, buf), env;
	st_buf b;
	frame *f;

	st_buf_init(&b);
	env = build_begin(&b, FRAME_HEARTBEAT, 0, false, -1, 2 * 25 + 40);
	st_buf_puts(&b, "id: ");
	st_buf_put_u64(&b, pos);
	st_buf_puts(&b, "\n\n");
	env = b.len;
	st_buf_puts(&b, "{\"type\":\"heartbeat\",\"id\":\"");
	st_buf_put_u64(&b, pos);
	st_buf_puts(&b, "\"}");
	f = control_end(&b, FRAME_HEARTBEAT, pos, env);
	ST_ASSERT(f->env_off == env - hdr);
	f->position = true;
	return f;
}

frame *
frame_reconnect_new(uint32_t retry_ms, const char *reason)
{
	size_t rl = strlen(reason), env;
	st_buf b;

	st_buf_init(&b);
	env = build_begin(&b, FRAME_RECONNECT, 0, false, (int64_t)retry_ms, 64 + st_json_escaped_len(reason, rl));
	st_buf_puts(&b, "{\"type\":\"reconnect\",\"retry_ms\":");
	st_buf_put_u64(&b, retry_ms);
	st_buf_puts(&b, ",\"reason\":");
	st_json_escape(&b, reason, rl);
	st_buf_putc(&b, '}');
	return control_end(&b, FRAME_RECONNECT, 0, env);
}

frame *
frame_complete_new(void)
{
	size_t env;
	st_buf b;

	st_buf_init(&b);
	env = build_begin(&b, FRAME_COMPLETE, 0, false, -1, 24);
	st_buf_puts(&b, "{\"type\":\"complete\"}");
	return control_end(&b, FRAME_COMPLETE, 0, env);
}

frame *
frame_failure_new(int status, const char *title, const char *detail)
{
	size_t env, extra = 96 + (title ? st_json_escaped_len(title, strlen(title)) : 0) +
			    (detail ? st_json_escaped_len(detail, strlen(detail)) : 0);
	st_buf b;

	st_buf_init(&b);
	env = build_begin(&b, FRAME_FAILURE, 0, false, -1, 32 + extra);
	st_buf_puts(&b, "{\"type\":\"failure\",\"problem\":");
	st_json_problem(&b, NULL, title, status, detail);
	st_buf_putc(&b, '}');
	return control_end(&b, FRAME_FAILURE, 0, env);
}

void
frame_set_origin(frame *f, uint64_t origin_ns)
{
	f->origin_ns = origin_ns;
}

uint64_t
frame_origin_ns(const frame *f)
{
	return f->origin_ns;
}

frame *
frame_ref(frame *f)
{
	atomic_fetch_add_explicit(&f->refs, 1, memory_order_relaxed);
	return f;
}

void
frame_unref(frame *f)
{
	if (f == NULL)
		return;
	/* Release orders our last reads before the free; acquire on the last owner
	 * makes every other owner's reads happen before it. */
	if (atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) != 1)
		return;
	free(atomic_load_explicit(&f->jsonseq, memory_order_acquire));
	free(f);
}

void
frame_release_cb(const void *data, size_t len, void *arg)
{
	(void)data;
	(void)len;
	frame_unref(arg);
}

enum frame_type
frame_type(const frame *f)
{
	return (enum frame_type)f->type;
}

bool
frame_is_terminal(const frame *f)
{
	return f->type == FRAME_RECONNECT || f->type == FRAME_COMPLETE || f->type == FRAME_FAILURE;
}

uint64_t
frame_seq(const frame *f)
{
	return f->seq;
}

bool
frame_is_signal(const frame *f)
{
	/* An item without data ends with the about list's ']' right before its '}'. */
	return f->type == FRAME_ITEM && f->res_off + f->res_len + 1 == f->env_len;
}

const char *
frame_topic(const frame *f, size_t *len)
{
	if (f->type != FRAME_ITEM) {
		if (len)
			*len = 0;
		return NULL;
	}
	if (len)
		*len = f->topic_len;
	return f->buf + f->topic_off;
}

uint64_t
frame_resource_hash(const frame *f)
{
	return f->hash;
}

bool
frame_same_resource(const frame *a, const frame *b)
{
	return a->type == FRAME_ITEM && b->type == FRAME_ITEM && a->hash == b->hash && a->res_len == b->res_len &&
	       memcmp(a->buf + a->env_off + a->res_off, b->buf + b->env_off + b->res_off, a->res_len) == 0;
}

size_t
frame_cost(const frame *f)
{
	return (size_t)f->env_len + FRAME_OVERHEAD;
}

const char *
frame_envelope(const frame *f, size_t *len)
{
	*len = f->env_len;
	return f->buf + f->env_off;
}

const char *
frame_bytes(frame *f, enum frame_format fmt, size_t *len)
{
	const char *env = f->buf + f->env_off;

	switch (fmt) {
	case FRAME_SSE:
		if (f->position) {
			*len = f->env_off;
			return f->buf;
		}
		if (f->type == FRAME_HEARTBEAT) {
			*len = sizeof(sse_heartbeat) - 1;
			return sse_heartbeat;
		}
		*len = (size_t)f->env_off + f->env_len + 2;
		return f->buf;
	case FRAME_NDJSON: *len = (size_t)f->env_len + 1; return env;
	case FRAME_JSONSEQ: {
		/* Acquire pairs with the winner's release: its bytes are visible before its pointer. */
		char *cached = atomic_load_explicit(&f->jsonseq, memory_order_acquire);

		if (cached == NULL) {
			char *p = st_xmalloc((size_t)f->env_len + 2);

			p[0] = '\x1e';
			memcpy(p + 1, env, (size_t)f->env_len + 1); /* envelope and its "\n" */
			if (atomic_compare_exchange_strong_explicit(&f->jsonseq, &cached, p, memory_order_acq_rel,
								    memory_order_acquire))
				cached = p;
			else
				free(p); /* another loop published the same bytes first; cached is theirs */
		}
		*len = (size_t)f->env_len + 2;
		return cached;
	}
	default:
		ST_ASSERT(!"unknown frame format");
		*len = 0;
		return NULL;
	}
}
