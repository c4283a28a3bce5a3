/*
 * wire: encoding and bounded decoding of the msgpack formats (proto/README.md).
 *
 * DESIGN.  Encoding goes through msgpack-c's packer, writing into an st_buf
 * (mpk_packer).  Decoding walks the input with the bounded cursor of mpk.h:
 * every count or length is checked against the bytes left before anything
 * is read or allocated, and then against the schema's own bounds.
 *
 * Decoded strings point into the caller's input.  Arrays of pointers (events,
 * abouts) are allocated only after their counts passed those checks; abouts
 * of all events share one pool, and the compacted JSON of all events' data
 * shares one arena.  Both grow while decoding and are handed to the events
 * at the end (their contents are consumed in order, so each event's slice
 * is found by walking the events again): nothing points into them while
 * they may still move.
 *
 * Errors: a bad ingest request is ST_EINVAL with a one-line detail for the
 * producer; a bad reply or published message is ST_EPROTO (a peer of ours
 * broke the protocol).  Reply and published-message decoders skip map keys
 * they do not know (so version 1 can gain fields); the ingest decoder
 * refuses them, as the contract says.  Out of memory is ST_ENOMEM from
 * the *_try_* functions (the producer library's: it must not abort its
 * host); their aborting forms (the daemons') are the same code plus
 * st_oom(): the request and reply paths allocate only with st_try_*, so
 * one implementation serves both.  The published-message decoder is the
 * edge's alone and aborts (st_x*).
 *
 * Here: the ingest request and its reply, each encoder beside its
 * decoder; published messages are wire_pub.c's, and the bounded reader and
 * the packer both use are mpk.c's.
 */
#include "wire.h"

#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpk.h"
#include "st_json.h"
#include "st_util.h"

/* ---- ingest request ---------------------------------------------------- */

struct proto_request {
	proto_event *ev;
	size_t n;
	proto_str *abouts; /* pool shared by all events */
	size_t n_abouts;
	size_t abouts_cap; /* allocated entries of the pool (it grew by doubling) */
	char *arena;       /* compact data of all events, in order */
	size_t arena_len;
	size_t in_len;
};

static void set_detail(char *detail, size_t dlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void
set_detail(char *detail, size_t dlen, const char *fmt, ...)
{
	va_list ap;

	if (detail == NULL || dlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(detail, dlen, fmt, ap);
	va_end(ap);
}

/* A printable, bounded copy of an untrusted key for the detail line. */
static void
key_printable(proto_str k, char *out, size_t cap)
{
	size_t n = 0;

	for (size_t i = 0; i < k.len && n + 4 < cap; i++) {
		unsigned char c = (unsigned char)k.p[i];
		out[n++] = c >= 0x20 && c < 0x7f && c != '"' && c != '\\' ? (char)c : '?';
	}
	if (k.len > n && n + 4 <= cap) {
		memcpy(out + n, "...", 3);
		n += 3;
	}
	out[n] = '\0';
}

typedef struct req_ctx {
	mpk_rd r;
	mpk_str_pool abouts;
	st_buf arena;
	char *detail;
	size_t dlen;
} req_ctx;

enum { F_TOPIC = 1, F_ABOUT = 2, F_DATA = 4, F_KEY = 8 };

static st_err
event_decode(req_ctx *c, size_t idx, proto_event *ev)
{
	uint32_t n;
	unsigned seen = 0;
	int rv;
	proto_str k, s;
	const char *why, *jerr = NULL;

	if ((rv = mpk_rd_map(&c->r, &n)) != MPK_OK) {
		set_detail(c->detail, c->dlen, "event %zu: %s", idx, rv == MPK_TYPE ? "not a map" : "truncated");
		return ST_EINVAL;
	}
	for (uint32_t f = 0; f < n; f++) {
		unsigned bit;
		char kp[48];

		if ((rv = mpk_rd_str(&c->r, &k)) != MPK_OK) {
			set_detail(c->detail, c->dlen, "event %zu: %s", idx,
				   rv == MPK_TYPE ? "a key is not a str" : "truncated");
			return ST_EINVAL;
		}
		if (mpk_str_is(k, "topic"))
			bit = F_TOPIC;
		else if (mpk_str_is(k, "about"))
			bit = F_ABOUT;
		else if (mpk_str_is(k, "data"))
			bit = F_DATA;
		else if (mpk_str_is(k, "key"))
			bit = F_KEY;
		else {
			key_printable(k, kp, sizeof(kp));
			set_detail(c->detail, c->dlen, "event %zu: unknown key \"%s\"", idx, kp);
			return ST_EINVAL;
		}
		if (seen & bit) {
			key_printable(k, kp, sizeof(kp));
			set_detail(c->detail, c->dlen, "event %zu: duplicate key \"%s\"", idx, kp);
			return ST_EINVAL;
		}
		seen |= bit;

		switch (bit) {
		case F_TOPIC:
			if ((rv = mpk_rd_str(&c->r, &ev->topic)) != MPK_OK) {
				set_detail(c->detail, c->dlen, "event %zu: topic: %s", idx,
					   rv == MPK_TYPE ? "not a str" : "truncated");
				return ST_EINVAL;
			}
			if ((why = proto_topic_check(ev->topic)) != NULL) {
				set_detail(c->detail, c->dlen, "event %zu: topic: %s", idx, why);
				return ST_EINVAL;
			}
			break;
		case F_ABOUT: {
			uint32_t na;
			if (mpk_rd_is_nil(&c->r)) {
				(void)mpk_rd_nil(&c->r);
				break;
			}
			if ((rv = mpk_rd_arr(&c->r, &na)) != MPK_OK) {
				set_detail(c->detail, c->dlen, "event %zu: about: %s", idx,
					   rv == MPK_TYPE ? "not an array" : "truncated");
				return ST_EINVAL;
			}
			if (na > PROTO_MAX_ABOUT) {
				set_detail(c->detail, c->dlen, "event %zu: about: too many entries (%u, max %u)", idx,
					   na, PROTO_MAX_ABOUT);
				return ST_EINVAL;
			}
			for (uint32_t a = 0; a < na; a++) {
				if ((rv = mpk_rd_str(&c->r, &s)) != MPK_OK) {
					set_detail(c->detail, c->dlen, "event %zu: about[%u]: %s", idx, a,
						   rv == MPK_TYPE ? "not a str" : "truncated");
					return ST_EINVAL;
				}
				if ((why = mpk_text_check(s, PROTO_MAX_ABOUT_LEN)) != NULL) {
					set_detail(c->detail, c->dlen, "event %zu: about[%u]: %s", idx, a, why);
					return ST_EINVAL;
				}
				if (mpk_pool_push(&c->abouts, s) != ST_OK) {
					set_detail(c->detail, c->dlen, "out of memory");
					return ST_ENOMEM;
				}
			}
			ev->n_about = na;
			break;
		}
		case F_DATA: {
			size_t clen;
			if (mpk_rd_is_nil(&c->r)) {
				(void)mpk_rd_nil(&c->r);
				break;
			}
			if ((rv = mpk_rd_str(&c->r, &s)) != MPK_OK) {
				set_detail(c->detail, c->dlen, "event %zu: data: %s", idx,
					   rv == MPK_TYPE ? "not a str or nil" : "truncated");
				return ST_EINVAL;
			}
			if (s.len > PROTO_MAX_DATA) {
				set_detail(c->detail, c->dlen, "event %zu: data: too long (%zu bytes, max %u)", idx,
					   s.len, PROTO_MAX_DATA);
				return ST_EINVAL;
			}
			/* bounded by the request: the arena never exceeds the input */
			if (st_buf_try_reserve(&c->arena, s.len) != ST_OK) {
				set_detail(c->detail, c->dlen, "out of memory");
				return ST_ENOMEM;
			}
			if (st_json_compact(s.p, s.len, c->arena.p + c->arena.len, &clen, &jerr) != ST_OK) {
				set_detail(c->detail, c->dlen, "event %zu: data: invalid JSON: %s", idx, jerr);
				return ST_EINVAL;
			}
			c->arena.len += clen;
			ev->data.len = clen;
			ev->has_data = true;
			break;
		}
		case F_KEY:
			if (mpk_rd_is_nil(&c->r)) {
				(void)mpk_rd_nil(&c->r);
				break;
			}
			if ((rv = mpk_rd_str(&c->r, &ev->key)) != MPK_OK) {
				set_detail(c->detail, c->dlen, "event %zu: key: %s", idx,
					   rv == MPK_TYPE ? "not a str or nil" : "truncated");
				return ST_EINVAL;
			}
			if ((why = mpk_text_check(ev->key, PROTO_MAX_KEY)) != NULL) {
				set_detail(c->detail, c->dlen, "event %zu: key: %s", idx, why);
				return ST_EINVAL;
			}
			ev->has_key = true;
			break;
		}
	}
	if (!(seen & F_TOPIC)) {
		set_detail(c->detail, c->dlen, "event %zu: topic: missing", idx);
		return ST_EINVAL;
	}
	return ST_OK;
}

/*
 * The request map {"token": T, "events": [...]} (proto/README.md, version
 * note): an event map's keys are topic/about/data/key and nothing else, so
 * a top-level map whose first key is "token" or "events" is a request map,
 * never an event.
 */
static bool
is_envelope(mpk_rd r)
{
	uint32_t n;
	proto_str k;

	if (mpk_rd_map(&r, &n) != MPK_OK || n == 0 || mpk_rd_str(&r, &k) != MPK_OK)
		return false;
	return mpk_str_is(k, "token") || mpk_str_is(k, "events");
}

/*
 * Reads the whole request map r: *token (when present; 1..PROTO_MAX_TOKEN
 * bytes), *events the bytes of the "events" value alone (so that the event
 * decoder's trailing-bytes check stays exact).  Nothing allocated.
 */
static st_err
envelope_read(mpk_rd r, proto_str *token, bool *has_token, mpk_rd *events, char *detail, size_t dlen)
{
	uint32_t n = 0;
	proto_str k;
	bool has_events = false;
	char kp[48];

	*has_token = false;
	if (mpk_rd_map(&r, &n) != MPK_OK || n > 2) {
		set_detail(detail, dlen, "request map: %s", n > 2 ? "too many keys" : "truncated");
		return ST_EINVAL;
	}
	for (uint32_t f = 0; f < n; f++) {
		if (mpk_rd_str(&r, &k) != MPK_OK) {
			set_detail(detail, dlen, "request map: a key is not a str");
			return ST_EINVAL;
		}
		if (mpk_str_is(k, "token")) {
			if (*has_token) {
				set_detail(detail, dlen, "request map: duplicate key \"token\"");
				return ST_EINVAL;
			}
			if (mpk_rd_str(&r, token) != MPK_OK || token->len == 0 || token->len > PROTO_MAX_TOKEN) {
				set_detail(detail, dlen, "token: not a str of 1..%u bytes", PROTO_MAX_TOKEN);
				return ST_EINVAL;
			}
			*has_token = true;
		} else if (mpk_str_is(k, "events")) {
			const unsigned char *start = r.p;

			if (has_events) {
				set_detail(detail, dlen, "request map: duplicate key \"events\"");
				return ST_EINVAL;
			}
			if (r.n == 0 || !((r.p[0] >= 0x90 && r.p[0] <= 0x9f) || r.p[0] == 0xdc || r.p[0] == 0xdd)) {
				set_detail(detail, dlen, "events: %s", r.n == 0 ? "truncated" : "not an array");
				return ST_EINVAL;
			}
			if (mpk_rd_skip(&r, 0) != MPK_OK) {
				set_detail(detail, dlen, "events: truncated or nested too deep");
				return ST_EINVAL;
			}
			events->p = start;
			events->n = (size_t)(r.p - start);
			has_events = true;
		} else {
			key_printable(k, kp, sizeof(kp));
			set_detail(detail, dlen, "request map: unknown key \"%s\"", kp);
			return ST_EINVAL;
		}
	}
	if (!has_events) {
		set_detail(detail, dlen, "events: missing");
		return ST_EINVAL;
	}
	if (r.n != 0) {
		set_detail(detail, dlen, "trailing bytes after the request (%zu)", r.n);
		return ST_EINVAL;
	}
	return ST_OK;
}

bool
proto_request_token_peek(const void *buf, size_t len, proto_str *token)
{
	mpk_rd r = { .p = buf, .n = len }, events;
	bool has;

	token->p = NULL;
	token->len = 0;
	if (len == 0 || len > PROTO_MAX_REQUEST || !is_envelope(r))
		return false;
	if (envelope_read(r, token, &has, &events, NULL, 0) != ST_OK || !has) {
		token->p = NULL;
		token->len = 0;
		return false;
	}
	return true;
}

st_err
proto_request_try_decode(const void *buf, size_t len, proto_request **out, char *detail, size_t detail_len)
{
	proto_request *q = NULL;
	req_ctx c;
	uint32_t n = 1;
	st_err err = ST_EINVAL;
	int rv;

	*out = NULL;
	memset(&c, 0, sizeof(c));
	c.r.p = buf;
	c.r.n = len;
	c.detail = detail;
	c.dlen = detail_len;
	st_buf_init(&c.arena);
	set_detail(detail, detail_len, "%s", "");

	if (len > PROTO_MAX_REQUEST) {
		set_detail(detail, detail_len, "request too large (%zu bytes, max %u)", len, PROTO_MAX_REQUEST);
		goto fail;
	}
	if (len == 0) {
		set_detail(detail, detail_len, "empty request");
		goto fail;
	}
	if (is_envelope(c.r)) {
		proto_str tok;
		bool has_tok;

		if (envelope_read(c.r, &tok, &has_tok, &c.r, detail, detail_len) != ST_OK)
			goto fail;
	}
	unsigned char t = c.r.p[0];
	bool single = (t >= 0x80 && t <= 0x8f) || t == 0xde || t == 0xdf;
	if (!single) {
		if ((rv = mpk_rd_arr(&c.r, &n)) != MPK_OK) {
			set_detail(detail, detail_len, "%s",
				   rv == MPK_TYPE ? "request is not a map or an array" : "truncated");
			goto fail;
		}
		if (n == 0) {
			set_detail(detail, detail_len, "empty batch");
			goto fail;
		}
		if (n > PROTO_MAX_BATCH) {
			set_detail(detail, detail_len, "too many events (%u, max %u)", n, PROTO_MAX_BATCH);
			goto fail;
		}
	}
	if ((q = st_try_calloc(1, sizeof(*q))) == NULL || (q->ev = st_try_calloc(n, sizeof(*q->ev))) == NULL) {
		set_detail(detail, detail_len, "out of memory");
		err = ST_ENOMEM;
		goto fail;
	}
	q->n = n;
	q->in_len = len;
	for (size_t i = 0; i < n; i++)
		if ((err = event_decode(&c, i, &q->ev[i])) != ST_OK)
			goto fail;
	err = ST_EINVAL;
	if (c.r.n != 0) {
		set_detail(detail, detail_len, "trailing bytes after the request (%zu)", c.r.n);
		goto fail;
	}

	/* hand the pools over: from here on they no longer move */
	q->abouts = c.abouts.v;
	q->n_abouts = c.abouts.n;
	q->abouts_cap = c.abouts.cap;
	c.abouts.v = NULL;
	if (c.arena.len) {
		char *shrunk;

		q->arena = st_buf_steal(&c.arena, &q->arena_len);
		/* plain realloc, not a counted allocation: a shrink that fails keeps the larger block */
		if ((shrunk = realloc(q->arena, q->arena_len)) != NULL)
			q->arena = shrunk;
	}
	size_t ao = 0, doff = 0;
	for (size_t i = 0; i < n; i++) {
		proto_event *ev = &q->ev[i];
		ev->about = ev->n_about ? q->abouts + ao : NULL;
		ao += ev->n_about;
		if (ev->has_data) {
			ev->data.p = q->arena + doff;
			doff += ev->data.len;
		}
	}
	*out = q;
	return ST_OK;
fail:
	free(c.abouts.v);
	st_buf_fini(&c.arena);
	proto_request_free(q);
	return err;
}

st_err
proto_request_decode(const void *buf, size_t len, proto_request **out, char *detail, size_t detail_len)
{
	st_err rv = proto_request_try_decode(buf, len, out, detail, detail_len);

	if (rv == ST_ENOMEM)
		st_oom("an ingest request", len);
	return rv;
}

size_t
proto_request_count(const proto_request *r)
{
	return r->n;
}

const proto_event *
proto_request_event(const proto_request *r, size_t i)
{
	ST_ASSERT(i < r->n);
	return &r->ev[i];
}

size_t
proto_request_bytes(const proto_request *r)
{
	return sizeof(*r) + r->in_len + r->arena_len + r->n * sizeof(*r->ev) + r->abouts_cap * sizeof(*r->abouts);
}

/*
 * The decoder's peak, from its allocations (keep in step with them):
 * - events: one array of n, and n <= len (every event takes a byte at least)
 *   and n <= PROTO_MAX_BATCH;
 * - the about pool: a about entry takes 2 bytes of input at least, and at
 *   most PROTO_MAX_ABOUT per event; it grows by doubling from 16, so its
 *   capacity is below 2 * entries + 16, and while realloc moves it the old
 *   and the new block (1.5 * capacity) are alive: 3 * entries + 24;
 * - the arena: st_buf_reserve needs at most len + 1 bytes (compacted data
 *   never exceeds the input consumed so far), its capacity doubles from 64
 *   (so below 2 * (len + 1) + 64), 1.5 * that while it moves, and at the end
 *   the stolen buffer and its shrunk copy (<= len) are alive together:
 *   3 * (len + 1) + 128 covers both.
 */
size_t
proto_request_bytes_max(size_t len)
{
	size_t n = len < PROTO_MAX_BATCH ? len : PROTO_MAX_BATCH;
	size_t max_abouts = (size_t)PROTO_MAX_BATCH * PROTO_MAX_ABOUT;
	size_t abouts = len / 2 < max_abouts ? len / 2 : max_abouts;

	return sizeof(struct proto_request) + len + n * sizeof(proto_event) + (3 * abouts + 24) * sizeof(proto_str) +
	       3 * (len + 1) + 128;
}

void
proto_request_free(proto_request *r)
{
	if (r == NULL)
		return;
	free(r->ev);
	free(r->abouts);
	free(r->arena);
	free(r);
}

static void
pack_event(msgpack_packer *pk, const proto_event *ev)
{
	size_t fields = 1 + (ev->n_about > 0) + ev->has_data + ev->has_key;

	msgpack_pack_map(pk, fields);
	mpk_pack_cstr(pk, "topic");
	mpk_pack_pstr(pk, ev->topic);
	if (ev->n_about > 0) {
		mpk_pack_cstr(pk, "about");
		msgpack_pack_array(pk, ev->n_about);
		for (uint32_t a = 0; a < ev->n_about; a++)
			mpk_pack_pstr(pk, ev->about[a]);
	}
	if (ev->has_data) {
		mpk_pack_cstr(pk, "data");
		mpk_pack_pstr(pk, ev->data);
	}
	if (ev->has_key) {
		mpk_pack_cstr(pk, "key");
		mpk_pack_pstr(pk, ev->key);
	}
}

st_err
proto_request_try_encode(st_buf *out, const proto_event *ev, size_t n, bool as_batch)
{
	mpk_packer w;
	msgpack_packer *pk = mpk_packer_begin(&w, out);

	ST_ASSERT(as_batch || n == 1);
	if (as_batch)
		msgpack_pack_array(pk, n);
	for (size_t i = 0; i < n && !w.nomem; i++)
		pack_event(pk, &ev[i]);
	return mpk_packer_end(&w);
}

void
proto_request_encode(st_buf *out, const proto_event *ev, size_t n, bool as_batch)
{
	if (proto_request_try_encode(out, ev, n, as_batch) != ST_OK)
		st_oom("an ingest request", 0);
}

size_t
proto_request_wrap_head(unsigned char *out, size_t cap, proto_str token)
{
	size_t n = 0;

	ST_ASSERT(token.len >= 1 && token.len <= PROTO_MAX_TOKEN && cap >= PROTO_WRAP_HEAD_MAX);
	out[n++] = 0x82; /* fixmap of 2 */
	out[n++] = 0xa5; /* fixstr "token" */
	memcpy(out + n, "token", 5);
	n += 5;
	if (token.len < 32) {
		out[n++] = (unsigned char)(0xa0 | token.len);
	} else if (token.len < 256) {
		out[n++] = 0xd9;
		out[n++] = (unsigned char)token.len;
	} else {
		out[n++] = 0xda;
		out[n++] = (unsigned char)(token.len >> 8);
		out[n++] = (unsigned char)token.len;
	}
	memcpy(out + n, token.p, token.len);
	n += token.len;
	out[n++] = 0xa6; /* fixstr "events" */
	memcpy(out + n, "events", 6);
	n += 6;
	return n;
}

void
proto_request_wrap(st_buf *out, proto_str token, const void *batch, size_t len)
{
	unsigned char head[PROTO_WRAP_HEAD_MAX];

	st_buf_append(out, head, proto_request_wrap_head(head, sizeof(head), token));
	st_buf_append(out, batch, len);
}

/* ---- ingest reply -------------------------------------------------------- */

void
proto_reply_ok_encode(st_buf *out, const uint64_t *seqs, size_t n)
{
	mpk_packer w;
	msgpack_packer *pk;

	pk = mpk_packer_begin(&w, out);
	msgpack_pack_map(pk, 2);
	mpk_pack_cstr(pk, "ok");
	msgpack_pack_true(pk);
	mpk_pack_cstr(pk, "seqs");
	msgpack_pack_array(pk, n);
	for (size_t i = 0; i < n; i++)
		msgpack_pack_uint64(pk, seqs[i]);
	mpk_packer_end_or_abort(&w, "a reply");
}

void
proto_reply_err_encode(st_buf *out, const char *code, const char *detail)
{
	mpk_packer w;
	msgpack_packer *pk;

	pk = mpk_packer_begin(&w, out);
	msgpack_pack_map(pk, 3);
	mpk_pack_cstr(pk, "ok");
	msgpack_pack_false(pk);
	mpk_pack_cstr(pk, "error");
	mpk_pack_cstr(pk, code);
	mpk_pack_cstr(pk, "detail");
	mpk_pack_cstr(pk, detail ? detail : "");
	mpk_packer_end_or_abort(&w, "a reply");
}

static void
copy_trunc(char *dst, size_t cap, proto_str s)
{
	size_t n = s.len < cap - 1 ? s.len : cap - 1;

	memcpy(dst, s.p, n);
	dst[n] = '\0';
}

st_err
proto_reply_try_decode(const void *buf, size_t len, proto_reply *out)
{
	mpk_rd r = { buf, len };
	uint32_t n, ns = 0;
	bool have_ok = false, have_seqs = false, have_error = false, have_detail = false;
	st_err err = ST_EPROTO;
	proto_str k, s;

	memset(out, 0, sizeof(*out));
	if (mpk_rd_map(&r, &n) != MPK_OK)
		goto fail;
	for (uint32_t f = 0; f < n; f++) {
		if (mpk_rd_str(&r, &k) != MPK_OK)
			goto fail;
		if (mpk_str_is(k, "ok")) {
			if (have_ok || mpk_rd_bool(&r, &out->ok) != MPK_OK)
				goto fail;
			have_ok = true;
		} else if (mpk_str_is(k, "seqs")) {
			if (have_seqs || mpk_rd_arr(&r, &ns) != MPK_OK)
				goto fail;
			have_seqs = true;
			/* ns <= bytes left, checked by mpk_rd_arr */
			if ((out->seqs = st_try_malloc((ns ? ns : 1) * sizeof(*out->seqs))) == NULL) {
				err = ST_ENOMEM;
				goto fail;
			}
			out->n_seqs = ns;
			for (uint32_t i = 0; i < ns; i++)
				if (mpk_rd_uint(&r, &out->seqs[i]) != MPK_OK)
					goto fail;
		} else if (mpk_str_is(k, "error")) {
			if (have_error || mpk_rd_str(&r, &s) != MPK_OK)
				goto fail;
			have_error = true;
			copy_trunc(out->error, sizeof(out->error), s);
		} else if (mpk_str_is(k, "detail")) {
			if (have_detail || mpk_rd_str(&r, &s) != MPK_OK)
				goto fail;
			have_detail = true;
			copy_trunc(out->detail, sizeof(out->detail), s);
		} else if (mpk_rd_skip(&r, 0) != MPK_OK)
			goto fail;
	}
	if (r.n != 0 || !have_ok || (out->ok && !have_seqs) || (!out->ok && !have_error))
		goto fail;
	if (!out->ok) {
		ST_FREE(&out->seqs);
		out->n_seqs = 0;
	}
	return ST_OK;
fail:
	proto_reply_fini(out);
	return err;
}

st_err
proto_reply_decode(const void *buf, size_t len, proto_reply *out)
{
	st_err rv = proto_reply_try_decode(buf, len, out);

	if (rv == ST_ENOMEM)
		st_oom("an ingest reply", len);
	return rv;
}

void
proto_reply_fini(proto_reply *r)
{
	ST_FREE(&r->seqs);
	r->n_seqs = 0;
}
