/*
 * wire: encoding and bounded decoding of the msgpack formats (proto/README.md).
 *
 * DESIGN.  Encoding goes through msgpack-c's packer, writing into an st_buf.
 * Decoding never uses msgpack-c's unpacker, which allocates 24 bytes per
 * element of any array or map header before it has seen a single element.
 * Instead a cursor (struct rd) walks the input: every header's count or
 * length is checked against the bytes left before anything is read or
 * allocated (an array of n elements needs at least n bytes, a map of n pairs
 * 2n, a str of n bytes n), and then against the schema's own bounds.  So a
 * 5-byte "array of 4 billion" is refused as truncated and costs nothing.
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
 * SIZE.  Over 800 lines on purpose: the five formats of proto/README.md,
 * each encoder beside its decoder, over one bounded reader (struct rd).
 */
#include "wire.h"
#include "st_json.h"
#include "st_util.h"

#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the bounded reader ---------------------------------------------- */

typedef struct rd {
	const unsigned char *p;
	size_t n; /* bytes left */
} rd;

enum { RD_OK = 0, RD_TYPE, RD_SHORT, RD_RANGE };

#define SKIP_MAX_DEPTH 32

static uint64_t
be(const unsigned char *p, size_t k)
{
	uint64_t v = 0;

	for (size_t i = 0; i < k; i++)
		v = (v << 8) | p[i];
	return v;
}

/* Consumes a 1-byte tag plus a k-byte big-endian argument. */
static int
rd_head(rd *r, size_t k, uint64_t *v)
{
	if (r->n < 1 + k)
		return RD_SHORT;
	*v = be(r->p + 1, k);
	r->p += 1 + k;
	r->n -= 1 + k;
	return RD_OK;
}

static bool
rd_is_nil(const rd *r)
{
	return r->n > 0 && r->p[0] == 0xc0;
}

static int
rd_nil(rd *r)
{
	if (r->n == 0)
		return RD_SHORT;
	if (r->p[0] != 0xc0)
		return RD_TYPE;
	r->p++;
	r->n--;
	return RD_OK;
}

static int
rd_str(rd *r, proto_str *s)
{
	uint64_t len;
	int rv;

	if (r->n == 0)
		return RD_SHORT;
	unsigned char c = r->p[0];
	if (c >= 0xa0 && c <= 0xbf) {
		len = c & 0x1f;
		r->p++;
		r->n--;
	} else if (c == 0xd9 || c == 0xda || c == 0xdb) {
		if ((rv = rd_head(r, (size_t)1 << (c - 0xd9), &len)) != RD_OK)
			return rv;
	} else
		return RD_TYPE;
	if (len > r->n)
		return RD_SHORT;
	s->p = (const char *)r->p;
	s->len = (size_t)len;
	r->p += len;
	r->n -= (size_t)len;
	return RD_OK;
}

/* An array header; n <= bytes left (every element takes at least one). */
static int
rd_arr(rd *r, uint32_t *n)
{
	uint64_t v;
	int rv;

	if (r->n == 0)
		return RD_SHORT;
	unsigned char c = r->p[0];
	if (c >= 0x90 && c <= 0x9f) {
		v = c & 0x0f;
		r->p++;
		r->n--;
	} else if (c == 0xdc || c == 0xdd) {
		if ((rv = rd_head(r, c == 0xdc ? 2 : 4, &v)) != RD_OK)
			return rv;
	} else
		return RD_TYPE;
	if (v > r->n)
		return RD_SHORT;
	*n = (uint32_t)v;
	return RD_OK;
}

/* A map header; 2n <= bytes left. */
static int
rd_map(rd *r, uint32_t *n)
{
	uint64_t v;
	int rv;

	if (r->n == 0)
		return RD_SHORT;
	unsigned char c = r->p[0];
	if (c >= 0x80 && c <= 0x8f) {
		v = c & 0x0f;
		r->p++;
		r->n--;
	} else if (c == 0xde || c == 0xdf) {
		if ((rv = rd_head(r, c == 0xde ? 2 : 4, &v)) != RD_OK)
			return rv;
	} else
		return RD_TYPE;
	if (v > r->n / 2)
		return RD_SHORT;
	*n = (uint32_t)v;
	return RD_OK;
}

/* Any integer encoding holding a value >= 0. */
static int
rd_uint(rd *r, uint64_t *out)
{
	uint64_t v;
	int rv;

	if (r->n == 0)
		return RD_SHORT;
	unsigned char c = r->p[0];
	if (c <= 0x7f) {
		*out = c;
		r->p++;
		r->n--;
		return RD_OK;
	}
	if (c >= 0xe0)
		return RD_RANGE; /* negative fixint */
	if (c >= 0xcc && c <= 0xcf) {
		if ((rv = rd_head(r, (size_t)1 << (c - 0xcc), &v)) != RD_OK)
			return rv;
		*out = v;
		return RD_OK;
	}
	if (c >= 0xd0 && c <= 0xd3) {
		size_t k = (size_t)1 << (c - 0xd0);
		if (r->n < 1 + k)
			return RD_SHORT;
		if (r->p[1] & 0x80)
			return RD_RANGE;
		(void)rd_head(r, k, &v);
		*out = v;
		return RD_OK;
	}
	return RD_TYPE;
}

static int
rd_bool(rd *r, bool *b)
{
	if (r->n == 0)
		return RD_SHORT;
	if (r->p[0] != 0xc2 && r->p[0] != 0xc3)
		return RD_TYPE;
	*b = r->p[0] == 0xc3;
	r->p++;
	r->n--;
	return RD_OK;
}

/* Skips one value of any type (nesting bounded, every length checked). */
static int
rd_skip(rd *r, int depth)
{
	uint64_t len = 0;
	uint32_t n;
	int rv;
	proto_str s;

	if (r->n == 0)
		return RD_SHORT;
	if (depth > SKIP_MAX_DEPTH)
		return RD_RANGE;
	unsigned char c = r->p[0];
	if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) {
		r->p++;
		r->n--;
		return RD_OK;
	}
	if ((c >= 0xa0 && c <= 0xbf) || (c >= 0xd9 && c <= 0xdb))
		return rd_str(r, &s);
	if ((c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd) {
		if ((rv = rd_arr(r, &n)) != RD_OK)
			return rv;
		for (uint32_t i = 0; i < n; i++)
			if ((rv = rd_skip(r, depth + 1)) != RD_OK)
				return rv;
		return RD_OK;
	}
	if ((c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf) {
		if ((rv = rd_map(r, &n)) != RD_OK)
			return rv;
		for (uint64_t i = 0; i < 2 * (uint64_t)n; i++)
			if ((rv = rd_skip(r, depth + 1)) != RD_OK)
				return rv;
		return RD_OK;
	}
	switch (c) {
	case 0xc4: case 0xc5: case 0xc6: /* bin 8/16/32 */
		if ((rv = rd_head(r, (size_t)1 << (c - 0xc4), &len)) != RD_OK)
			return rv;
		break;
	case 0xc7: case 0xc8: case 0xc9: /* ext 8/16/32: length, then a type byte */
		if ((rv = rd_head(r, (size_t)1 << (c - 0xc7), &len)) != RD_OK)
			return rv;
		len += 1;
		break;
	case 0xca: case 0xcb: /* float32/64 */
		len = c == 0xca ? 4 : 8;
		r->p++;
		r->n--;
		break;
	case 0xcc: case 0xcd: case 0xce: case 0xcf:
		len = (uint64_t)1 << (c - 0xcc);
		r->p++;
		r->n--;
		break;
	case 0xd0: case 0xd1: case 0xd2: case 0xd3:
		len = (uint64_t)1 << (c - 0xd0);
		r->p++;
		r->n--;
		break;
	case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8: /* fixext 1..16 */
		len = 1 + ((uint64_t)1 << (c - 0xd4));
		r->p++;
		r->n--;
		break;
	default: /* 0xc1: never used */
		return RD_TYPE;
	}
	if (len > r->n)
		return RD_SHORT;
	r->p += len;
	r->n -= (size_t)len;
	return RD_OK;
}

static bool
str_is(proto_str s, const char *lit)
{
	size_t n = strlen(lit);

	return s.len == n && memcmp(s.p, lit, n) == 0;
}

/* ---- validation shared by requests and published messages ---------------- */

const char *
proto_topic_check(proto_str s)
{
	if (s.len == 0)
		return "empty";
	if (s.len > PROTO_MAX_TOPIC)
		return "too long";
	for (size_t i = 0; i < s.len; i++) {
		unsigned char c = (unsigned char)s.p[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == ':' || c == '/' || c == '-'))
			return "bad character";
	}
	return NULL;
}

/* A str of 1..max bytes of valid UTF-8 without NUL (about entries, keys). */
static const char *
check_text(proto_str s, size_t max)
{
	if (s.len == 0)
		return "empty";
	if (s.len > max)
		return "too long";
	if (!st_utf8_valid(s.p, s.len))
		return "invalid UTF-8 or NUL";
	return NULL;
}

/* ---- msgpack-c packer into an st_buf --------------------------------- */

/*
 * The packer's sink: appends to an st_buf without aborting.  After the
 * first failed append every later write is refused too (msgpack-c's pack
 * calls return the sink's value but the encoders do not stop between
 * them), and the encoder ends with packer_end: ST_ENOMEM, with the buffer
 * cut back to where the encoding began.
 */
typedef struct packer {
	msgpack_packer pk;
	st_buf *out;
	size_t start; /* out->len before the encoding */
	bool nomem;
} packer;

static int
buf_write(void *data, const char *b, size_t n)
{
	packer *w = data;

	if (w->nomem)
		return -1;
	if (st_buf_try_append(w->out, b, n) != ST_OK) {
		w->nomem = true;
		return -1;
	}
	return 0;
}

static msgpack_packer *
packer_begin(packer *w, st_buf *out)
{
	w->out = out;
	w->start = out->len;
	w->nomem = false;
	msgpack_packer_init(&w->pk, w, buf_write);
	return &w->pk;
}

static st_err
packer_end(packer *w)
{
	if (!w->nomem)
		return ST_OK;
	w->out->len = w->start;
	if (w->out->p != NULL)
		w->out->p[w->start] = '\0';
	return ST_ENOMEM;
}

/* The end of an encoder of the daemons' (published messages, replies): out of memory aborts (st_util.h). */
static void
packer_end_or_abort(packer *w, const char *what)
{
	if (packer_end(w) != ST_OK)
		st_oom(what, 0);
}

static void
pack_cstr(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);

	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

static void
pack_pstr(msgpack_packer *pk, proto_str s)
{
	msgpack_pack_str(pk, s.len);
	msgpack_pack_str_body(pk, s.p, s.len);
}

/* ---- ingest request ---------------------------------------------------- */

struct proto_request {
	proto_event *ev;
	size_t n;
	proto_str *abouts; /* pool shared by all events */
	size_t n_abouts;
	size_t abouts_cap; /* allocated entries of the pool (it grew by doubling) */
	char *arena; /* compact data of all events, in order */
	size_t arena_len;
	size_t in_len;
};

/* A growable array of proto_str; moves until the decode ends. */
typedef struct str_pool {
	proto_str *v;
	size_t n, cap;
} str_pool;

/* ST_ENOMEM leaves the pool as it was (still the caller's to free). */
static st_err
pool_push(str_pool *pl, proto_str s)
{
	if (pl->n == pl->cap) {
		size_t cap = pl->cap ? pl->cap * 2 : 16;
		proto_str *v = st_try_realloc(pl->v, cap * sizeof(*pl->v));

		if (v == NULL)
			return ST_ENOMEM;
		pl->v = v;
		pl->cap = cap;
	}
	pl->v[pl->n++] = s;
	return ST_OK;
}

static void
set_detail(char *detail, size_t dlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

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
	rd r;
	str_pool abouts;
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

	if ((rv = rd_map(&c->r, &n)) != RD_OK) {
		set_detail(c->detail, c->dlen, "event %zu: %s", idx, rv == RD_TYPE ? "not a map" : "truncated");
		return ST_EINVAL;
	}
	for (uint32_t f = 0; f < n; f++) {
		unsigned bit;
		char kp[48];

		if ((rv = rd_str(&c->r, &k)) != RD_OK) {
			set_detail(c->detail, c->dlen, "event %zu: %s", idx,
			           rv == RD_TYPE ? "a key is not a str" : "truncated");
			return ST_EINVAL;
		}
		if (str_is(k, "topic"))
			bit = F_TOPIC;
		else if (str_is(k, "about"))
			bit = F_ABOUT;
		else if (str_is(k, "data"))
			bit = F_DATA;
		else if (str_is(k, "key"))
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
			if ((rv = rd_str(&c->r, &ev->topic)) != RD_OK) {
				set_detail(c->detail, c->dlen, "event %zu: topic: %s", idx,
				           rv == RD_TYPE ? "not a str" : "truncated");
				return ST_EINVAL;
			}
			if ((why = proto_topic_check(ev->topic)) != NULL) {
				set_detail(c->detail, c->dlen, "event %zu: topic: %s", idx, why);
				return ST_EINVAL;
			}
			break;
		case F_ABOUT: {
			uint32_t na;
			if (rd_is_nil(&c->r)) {
				(void)rd_nil(&c->r);
				break;
			}
			if ((rv = rd_arr(&c->r, &na)) != RD_OK) {
				set_detail(c->detail, c->dlen, "event %zu: about: %s", idx,
				           rv == RD_TYPE ? "not an array" : "truncated");
				return ST_EINVAL;
			}
			if (na > PROTO_MAX_ABOUT) {
				set_detail(c->detail, c->dlen, "event %zu: about: too many entries (%u, max %u)",
				           idx, na, PROTO_MAX_ABOUT);
				return ST_EINVAL;
			}
			for (uint32_t a = 0; a < na; a++) {
				if ((rv = rd_str(&c->r, &s)) != RD_OK) {
					set_detail(c->detail, c->dlen, "event %zu: about[%u]: %s", idx, a,
					           rv == RD_TYPE ? "not a str" : "truncated");
					return ST_EINVAL;
				}
				if ((why = check_text(s, PROTO_MAX_ABOUT_LEN)) != NULL) {
					set_detail(c->detail, c->dlen, "event %zu: about[%u]: %s", idx, a, why);
					return ST_EINVAL;
				}
				if (pool_push(&c->abouts, s) != ST_OK) {
					set_detail(c->detail, c->dlen, "out of memory");
					return ST_ENOMEM;
				}
			}
			ev->n_about = na;
			break;
		}
		case F_DATA: {
			size_t clen;
			if (rd_is_nil(&c->r)) {
				(void)rd_nil(&c->r);
				break;
			}
			if ((rv = rd_str(&c->r, &s)) != RD_OK) {
				set_detail(c->detail, c->dlen, "event %zu: data: %s", idx,
				           rv == RD_TYPE ? "not a str or nil" : "truncated");
				return ST_EINVAL;
			}
			if (s.len > PROTO_MAX_DATA) {
				set_detail(c->detail, c->dlen, "event %zu: data: too long (%zu bytes, max %u)",
				           idx, s.len, PROTO_MAX_DATA);
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
			if (rd_is_nil(&c->r)) {
				(void)rd_nil(&c->r);
				break;
			}
			if ((rv = rd_str(&c->r, &ev->key)) != RD_OK) {
				set_detail(c->detail, c->dlen, "event %zu: key: %s", idx,
				           rv == RD_TYPE ? "not a str or nil" : "truncated");
				return ST_EINVAL;
			}
			if ((why = check_text(ev->key, PROTO_MAX_KEY)) != NULL) {
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
is_envelope(rd r)
{
	uint32_t n;
	proto_str k;

	if (rd_map(&r, &n) != RD_OK || n == 0 || rd_str(&r, &k) != RD_OK)
		return false;
	return str_is(k, "token") || str_is(k, "events");
}

/*
 * Reads the whole request map r: *token (when present; 1..PROTO_MAX_TOKEN
 * bytes), *events the bytes of the "events" value alone (so that the event
 * decoder's trailing-bytes check stays exact).  Nothing allocated.
 */
static st_err
envelope_read(rd r, proto_str *token, bool *has_token, rd *events, char *detail, size_t dlen)
{
	uint32_t n = 0;
	proto_str k;
	bool has_events = false;
	char kp[48];

	*has_token = false;
	if (rd_map(&r, &n) != RD_OK || n > 2) {
		set_detail(detail, dlen, "request map: %s", n > 2 ? "too many keys" : "truncated");
		return ST_EINVAL;
	}
	for (uint32_t f = 0; f < n; f++) {
		if (rd_str(&r, &k) != RD_OK) {
			set_detail(detail, dlen, "request map: a key is not a str");
			return ST_EINVAL;
		}
		if (str_is(k, "token")) {
			if (*has_token) {
				set_detail(detail, dlen, "request map: duplicate key \"token\"");
				return ST_EINVAL;
			}
			if (rd_str(&r, token) != RD_OK || token->len == 0 || token->len > PROTO_MAX_TOKEN) {
				set_detail(detail, dlen, "token: not a str of 1..%u bytes", PROTO_MAX_TOKEN);
				return ST_EINVAL;
			}
			*has_token = true;
		} else if (str_is(k, "events")) {
			const unsigned char *start = r.p;

			if (has_events) {
				set_detail(detail, dlen, "request map: duplicate key \"events\"");
				return ST_EINVAL;
			}
			if (r.n == 0 || !((r.p[0] >= 0x90 && r.p[0] <= 0x9f) || r.p[0] == 0xdc || r.p[0] == 0xdd)) {
				set_detail(detail, dlen, "events: %s", r.n == 0 ? "truncated" : "not an array");
				return ST_EINVAL;
			}
			if (rd_skip(&r, 0) != RD_OK) {
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
	rd r = {.p = buf, .n = len}, events;
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
		if ((rv = rd_arr(&c.r, &n)) != RD_OK) {
			set_detail(detail, detail_len, "%s",
			           rv == RD_TYPE ? "request is not a map or an array" : "truncated");
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
	return sizeof(*r) + r->in_len + r->arena_len + r->n * sizeof(*r->ev) +
	       r->abouts_cap * sizeof(*r->abouts);
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
	pack_cstr(pk, "topic");
	pack_pstr(pk, ev->topic);
	if (ev->n_about > 0) {
		pack_cstr(pk, "about");
		msgpack_pack_array(pk, ev->n_about);
		for (uint32_t a = 0; a < ev->n_about; a++)
			pack_pstr(pk, ev->about[a]);
	}
	if (ev->has_data) {
		pack_cstr(pk, "data");
		pack_pstr(pk, ev->data);
	}
	if (ev->has_key) {
		pack_cstr(pk, "key");
		pack_pstr(pk, ev->key);
	}
}

st_err
proto_request_try_encode(st_buf *out, const proto_event *ev, size_t n, bool as_batch)
{
	packer w;
	msgpack_packer *pk = packer_begin(&w, out);

	ST_ASSERT(as_batch || n == 1);
	if (as_batch)
		msgpack_pack_array(pk, n);
	for (size_t i = 0; i < n && !w.nomem; i++)
		pack_event(pk, &ev[i]);
	return packer_end(&w);
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
	packer w;
	msgpack_packer *pk;

	pk = packer_begin(&w, out);
	msgpack_pack_map(pk, 2);
	pack_cstr(pk, "ok");
	msgpack_pack_true(pk);
	pack_cstr(pk, "seqs");
	msgpack_pack_array(pk, n);
	for (size_t i = 0; i < n; i++)
		msgpack_pack_uint64(pk, seqs[i]);
	packer_end_or_abort(&w, "a reply");
}

void
proto_reply_err_encode(st_buf *out, const char *code, const char *detail)
{
	packer w;
	msgpack_packer *pk;

	pk = packer_begin(&w, out);
	msgpack_pack_map(pk, 3);
	pack_cstr(pk, "ok");
	msgpack_pack_false(pk);
	pack_cstr(pk, "error");
	pack_cstr(pk, code);
	pack_cstr(pk, "detail");
	pack_cstr(pk, detail ? detail : "");
	packer_end_or_abort(&w, "a reply");
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
	rd r = {buf, len};
	uint32_t n, ns = 0;
	bool have_ok = false, have_seqs = false, have_error = false, have_detail = false;
	st_err err = ST_EPROTO;
	proto_str k, s;

	memset(out, 0, sizeof(*out));
	if (rd_map(&r, &n) != RD_OK)
		goto fail;
	for (uint32_t f = 0; f < n; f++) {
		if (rd_str(&r, &k) != RD_OK)
			goto fail;
		if (str_is(k, "ok")) {
			if (have_ok || rd_bool(&r, &out->ok) != RD_OK)
				goto fail;
			have_ok = true;
		} else if (str_is(k, "seqs")) {
			if (have_seqs || rd_arr(&r, &ns) != RD_OK)
				goto fail;
			have_seqs = true;
			/* ns <= bytes left, checked by rd_arr */
			if ((out->seqs = st_try_malloc((ns ? ns : 1) * sizeof(*out->seqs))) == NULL) {
				err = ST_ENOMEM;
				goto fail;
			}
			out->n_seqs = ns;
			for (uint32_t i = 0; i < ns; i++)
				if (rd_uint(&r, &out->seqs[i]) != RD_OK)
					goto fail;
		} else if (str_is(k, "error")) {
			if (have_error || rd_str(&r, &s) != RD_OK)
				goto fail;
			have_error = true;
			copy_trunc(out->error, sizeof(out->error), s);
		} else if (str_is(k, "detail")) {
			if (have_detail || rd_str(&r, &s) != RD_OK)
				goto fail;
			have_detail = true;
			copy_trunc(out->detail, sizeof(out->detail), s);
		} else if (rd_skip(&r, 0) != RD_OK)
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

/* ---- published messages -------------------------------------------------- */

#define PROTO_MAX_WRITER 255u

struct proto_pub {
	enum proto_pub_kind kind;
	proto_str writer;
	uint64_t prev, head;
	proto_pub_event *ev;
	size_t n, cap;
	proto_str *abouts;
};

void
proto_pub_batch_encode(st_buf *out, const char *writer, uint64_t prev, const proto_pub_event *ev, size_t n)
{
	packer w;
	msgpack_packer *pk;

	pk = packer_begin(&w, out);
	msgpack_pack_map(pk, 5);
	pack_cstr(pk, "v");
	msgpack_pack_uint64(pk, PROTO_VERSION);
	pack_cstr(pk, "k");
	pack_cstr(pk, "batch");
	pack_cstr(pk, "w");
	pack_cstr(pk, writer);
	pack_cstr(pk, "prev");
	msgpack_pack_uint64(pk, prev);
	pack_cstr(pk, "ev");
	msgpack_pack_array(pk, n);
	for (size_t i = 0; i < n; i++) {
		msgpack_pack_array(pk, 4);
		msgpack_pack_uint64(pk, ev[i].seq);
		pack_pstr(pk, ev[i].topic);
		msgpack_pack_array(pk, ev[i].n_about);
		for (uint32_t a = 0; a < ev[i].n_about; a++)
			pack_pstr(pk, ev[i].about[a]);
		if (ev[i].has_data)
			pack_pstr(pk, ev[i].data);
		else
			msgpack_pack_nil(pk);
	}
	packer_end_or_abort(&w, "a published message");
}

void
proto_pub_tick_encode(st_buf *out, const char *writer, uint64_t head)
{
	packer w;
	msgpack_packer *pk;

	pk = packer_begin(&w, out);
	msgpack_pack_map(pk, 4);
	pack_cstr(pk, "v");
	msgpack_pack_uint64(pk, PROTO_VERSION);
	pack_cstr(pk, "k");
	pack_cstr(pk, "tick");
	pack_cstr(pk, "w");
	pack_cstr(pk, writer);
	pack_cstr(pk, "head");
	msgpack_pack_uint64(pk, head);
	packer_end_or_abort(&w, "a published message");
}

/* One [seq, topic, [about...], data-or-nil]. */
static bool
pub_event_decode(rd *r, proto_pub_event *e, str_pool *abouts)
{
	uint32_t n, na;
	proto_str s;

	if (rd_arr(r, &n) != RD_OK || n != 4)
		return false;
	if (rd_uint(r, &e->seq) != RD_OK)
		return false;
	if (rd_str(r, &e->topic) != RD_OK || proto_topic_check(e->topic) != NULL)
		return false;
	if (rd_arr(r, &na) != RD_OK || na > PROTO_MAX_ABOUT)
		return false;
	for (uint32_t a = 0; a < na; a++) {
		if (rd_str(r, &s) != RD_OK || check_text(s, PROTO_MAX_ABOUT_LEN) != NULL)
			return false;
		if (pool_push(abouts, s) != ST_OK)
			st_oom("a published message", 0); /* the edge's decoder: a daemon's policy */
	}
	e->n_about = na;
	if (rd_is_nil(r)) {
		(void)rd_nil(r);
		e->has_data = false;
		return true;
	}
	if (rd_str(r, &e->data) != RD_OK || e->data.len > PROTO_MAX_DATA || e->data.len == 0 ||
	    !st_utf8_valid(e->data.p, e->data.len))
		return false;
	e->has_data = true;
	return true;
}

st_err
proto_pub_decode(const void *buf, size_t len, proto_pub **out)
{
	rd r = {buf, len};
	proto_pub *m = NULL;
	str_pool abouts = {NULL, 0, 0};
	uint32_t n;
	uint64_t v = 0;
	bool have_v = false, have_k = false, have_w = false, have_prev = false, have_head = false,
	     have_ev = false;
	proto_str k, s;

	*out = NULL;
	if (len > PROTO_MAX_PUB || rd_map(&r, &n) != RD_OK)
		goto fail;
	m = st_xcalloc(1, sizeof(*m));
	for (uint32_t f = 0; f < n; f++) {
		if (rd_str(&r, &k) != RD_OK)
			goto fail;
		if (str_is(k, "v")) {
			if (have_v || rd_uint(&r, &v) != RD_OK)
				goto fail;
			have_v = true;
		} else if (str_is(k, "k")) {
			if (have_k || rd_str(&r, &s) != RD_OK)
				goto fail;
			have_k = true;
			if (str_is(s, "batch"))
				m->kind = PROTO_PUB_BATCH;
			else if (str_is(s, "tick"))
				m->kind = PROTO_PUB_TICK;
			else
				goto fail;
		} else if (str_is(k, "w")) {
			if (have_w || rd_str(&r, &m->writer) != RD_OK || m->writer.len > PROTO_MAX_WRITER ||
			    !st_utf8_valid(m->writer.p, m->writer.len))
				goto fail;
			have_w = true;
		} else if (str_is(k, "prev")) {
			if (have_prev || rd_uint(&r, &m->prev) != RD_OK)
				goto fail;
			have_prev = true;
		} else if (str_is(k, "head")) {
			if (have_head || rd_uint(&r, &m->head) != RD_OK)
				goto fail;
			have_head = true;
		} else if (str_is(k, "ev")) {
			uint32_t ne;
			if (have_ev || rd_arr(&r, &ne) != RD_OK)
				goto fail;
			have_ev = true;
			/* grown as events decode, so a hostile count costs only what is really sent */
			for (uint32_t i = 0; i < ne; i++) {
				if (m->n == m->cap) {
					m->cap = m->cap ? m->cap * 2 : 16;
					m->ev = st_xrealloc(m->ev, m->cap * sizeof(*m->ev));
				}
				memset(&m->ev[m->n], 0, sizeof(m->ev[m->n]));
				if (!pub_event_decode(&r, &m->ev[m->n], &abouts))
					goto fail;
				m->n++;
			}
		} else if (rd_skip(&r, 0) != RD_OK)
			goto fail;
	}
	if (r.n != 0 || !have_v || v != PROTO_VERSION || !have_k || !have_w)
		goto fail;
	if (m->kind == PROTO_PUB_TICK) {
		/* a tick carries no events: proto_pub_count() is 0 for every tick */
		if (!have_head || have_ev)
			goto fail;
	} else {
		if (!have_prev || !have_ev || m->n == 0)
			goto fail;
		uint64_t last = m->prev;
		for (size_t i = 0; i < m->n; i++) {
			if (m->ev[i].seq <= last)
				goto fail;
			last = m->ev[i].seq;
		}
		m->head = last;
	}
	m->abouts = abouts.v;
	size_t ao = 0;
	for (size_t i = 0; i < m->n; i++) {
		m->ev[i].about = m->ev[i].n_about ? m->abouts + ao : NULL;
		ao += m->ev[i].n_about;
	}
	*out = m;
	return ST_OK;
fail:
	free(abouts.v);
	proto_pub_free(m);
	return ST_EPROTO;
}

enum proto_pub_kind
proto_pub_kind(const proto_pub *m)
{
	return m->kind;
}

proto_str
proto_pub_writer(const proto_pub *m)
{
	return m->writer;
}

uint64_t
proto_pub_prev(const proto_pub *m)
{
	return m->prev;
}

uint64_t
proto_pub_head(const proto_pub *m)
{
	return m->head;
}

size_t
proto_pub_count(const proto_pub *m)
{
	return m->n;
}

const proto_pub_event *
proto_pub_event_at(const proto_pub *m, size_t i)
{
	ST_ASSERT(i < m->n);
	return &m->ev[i];
}

void
proto_pub_free(proto_pub *m)
{
	if (m == NULL)
		return;
	free(m->ev);
	free(m->abouts);
	free(m);
}
