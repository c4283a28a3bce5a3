/*
 * mpk: the bounded msgpack reader and the packer into an st_buf that the
 * codecs of proto/ share (wire.c: ingest requests and replies; wire_pub.c:
 * published messages).  Internal to proto/ (wire.h is the interface).
 *
 * The reader never uses msgpack-c's unpacker, which allocates 24 bytes per
 * element of any array or map header before it has seen a single element:
 * a cursor (mpk_rd) walks the input and every header's count or length is
 * checked against the bytes left before anything is read or allocated (an
 * array of n elements needs at least n bytes, a map of n pairs 2n, a str of
 * n bytes n).  So a 5-byte "array of 4 billion" is refused as truncated and
 * costs nothing.
 */
#include "mpk.h"

#include <stdlib.h>
#include <string.h>

#include "st_json.h"
#include "st_util.h"

/* ---- the bounded reader ---------------------------------------------- */

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
int
mpk_rd_head(mpk_rd *r, size_t k, uint64_t *v)
{
	if (r->n < 1 + k)
		return MPK_SHORT;
	*v = be(r->p + 1, k);
	r->p += 1 + k;
	r->n -= 1 + k;
	return MPK_OK;
}

bool
mpk_rd_is_nil(const mpk_rd *r)
{
	return r->n > 0 && r->p[0] == 0xc0;
}

int
mpk_rd_nil(mpk_rd *r)
{
	if (r->n == 0)
		return MPK_SHORT;
	if (r->p[0] != 0xc0)
		return MPK_TYPE;
	r->p++;
	r->n--;
	return MPK_OK;
}

int
mpk_rd_str(mpk_rd *r, proto_str *s)
{
	uint64_t len;
	int rv;

	if (r->n == 0)
		return MPK_SHORT;
	unsigned char c = r->p[0];
	if (c >= 0xa0 && c <= 0xbf) {
		len = c & 0x1f;
		r->p++;
		r->n--;
	} else if (c == 0xd9 || c == 0xda || c == 0xdb) {
		if ((rv = mpk_rd_head(r, (size_t)1 << (c - 0xd9), &len)) != MPK_OK)
			return rv;
	} else
		return MPK_TYPE;
	if (len > r->n)
		return MPK_SHORT;
	s->p = (const char *)r->p;
	s->len = (size_t)len;
	r->p += len;
	r->n -= (size_t)len;
	return MPK_OK;
}

/* An array header; n <= bytes left (every element takes at least one). */
int
mpk_rd_arr(mpk_rd *r, uint32_t *n)
{
	uint64_t v;
	int rv;

	if (r->n == 0)
		return MPK_SHORT;
	unsigned char c = r->p[0];
	if (c >= 0x90 && c <= 0x9f) {
		v = c & 0x0f;
		r->p++;
		r->n--;
	} else if (c == 0xdc || c == 0xdd) {
		if ((rv = mpk_rd_head(r, c == 0xdc ? 2 : 4, &v)) != MPK_OK)
			return rv;
	} else
		return MPK_TYPE;
	if (v > r->n)
		return MPK_SHORT;
	*n = (uint32_t)v;
	return MPK_OK;
}

/* A map header; 2n <= bytes left. */
int
mpk_rd_map(mpk_rd *r, uint32_t *n)
{
	uint64_t v;
	int rv;

	if (r->n == 0)
		return MPK_SHORT;
	unsigned char c = r->p[0];
	if (c >= 0x80 && c <= 0x8f) {
		v = c & 0x0f;
		r->p++;
		r->n--;
	} else if (c == 0xde || c == 0xdf) {
		if ((rv = mpk_rd_head(r, c == 0xde ? 2 : 4, &v)) != MPK_OK)
			return rv;
	} else
		return MPK_TYPE;
	if (v > r->n / 2)
		return MPK_SHORT;
	*n = (uint32_t)v;
	return MPK_OK;
}

/* Any integer encoding holding a value >= 0. */
int
mpk_rd_uint(mpk_rd *r, uint64_t *out)
{
	uint64_t v;
	int rv;

	if (r->n == 0)
		return MPK_SHORT;
	unsigned char c = r->p[0];
	if (c <= 0x7f) {
		*out = c;
		r->p++;
		r->n--;
		return MPK_OK;
	}
	if (c >= 0xe0)
		return MPK_RANGE; /* negative fixint */
	if (c >= 0xcc && c <= 0xcf) {
		if ((rv = mpk_rd_head(r, (size_t)1 << (c - 0xcc), &v)) != MPK_OK)
			return rv;
		*out = v;
		return MPK_OK;
	}
	if (c >= 0xd0 && c <= 0xd3) {
		size_t k = (size_t)1 << (c - 0xd0);
		if (r->n < 1 + k)
			return MPK_SHORT;
		if (r->p[1] & 0x80)
			return MPK_RANGE;
		(void)mpk_rd_head(r, k, &v);
		*out = v;
		return MPK_OK;
	}
	return MPK_TYPE;
}

int
mpk_rd_bool(mpk_rd *r, bool *b)
{
	if (r->n == 0)
		return MPK_SHORT;
	if (r->p[0] != 0xc2 && r->p[0] != 0xc3)
		return MPK_TYPE;
	*b = r->p[0] == 0xc3;
	r->p++;
	r->n--;
	return MPK_OK;
}

/* Skips one value of any type (nesting bounded, every length checked). */
int
mpk_rd_skip(mpk_rd *r, int depth)
{
	uint64_t len = 0;
	uint32_t n;
	int rv;
	proto_str s;

	if (r->n == 0)
		return MPK_SHORT;
	if (depth > SKIP_MAX_DEPTH)
		return MPK_RANGE;
	unsigned char c = r->p[0];
	if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) {
		r->p++;
		r->n--;
		return MPK_OK;
	}
	if ((c >= 0xa0 && c <= 0xbf) || (c >= 0xd9 && c <= 0xdb))
		return mpk_rd_str(r, &s);
	if ((c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd) {
		if ((rv = mpk_rd_arr(r, &n)) != MPK_OK)
			return rv;
		for (uint32_t i = 0; i < n; i++)
			if ((rv = mpk_rd_skip(r, depth + 1)) != MPK_OK)
				return rv;
		return MPK_OK;
	}
	if ((c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf) {
		if ((rv = mpk_rd_map(r, &n)) != MPK_OK)
			return rv;
		for (uint64_t i = 0; i < 2 * (uint64_t)n; i++)
			if ((rv = mpk_rd_skip(r, depth + 1)) != MPK_OK)
				return rv;
		return MPK_OK;
	}
	switch (c) {
	case 0xc4:
	case 0xc5:
	case 0xc6: /* bin 8/16/32 */
		if ((rv = mpk_rd_head(r, (size_t)1 << (c - 0xc4), &len)) != MPK_OK)
			return rv;
		break;
	case 0xc7:
	case 0xc8:
	case 0xc9: /* ext 8/16/32: length, then a type byte */
		if ((rv = mpk_rd_head(r, (size_t)1 << (c - 0xc7), &len)) != MPK_OK)
			return rv;
		len += 1;
		break;
	case 0xca:
	case 0xcb: /* float32/64 */
		len = c == 0xca ? 4 : 8;
		r->p++;
		r->n--;
		break;
	case 0xcc:
	case 0xcd:
	case 0xce:
	case 0xcf:
		len = (uint64_t)1 << (c - 0xcc);
		r->p++;
		r->n--;
		break;
	case 0xd0:
	case 0xd1:
	case 0xd2:
	case 0xd3:
		len = (uint64_t)1 << (c - 0xd0);
		r->p++;
		r->n--;
		break;
	case 0xd4:
	case 0xd5:
	case 0xd6:
	case 0xd7:
	case 0xd8: /* fixext 1..16 */
		len = 1 + ((uint64_t)1 << (c - 0xd4));
		r->p++;
		r->n--;
		break;
	default: /* 0xc1: never used */ return MPK_TYPE;
	}
	if (len > r->n)
		return MPK_SHORT;
	r->p += len;
	r->n -= (size_t)len;
	return MPK_OK;
}

bool
mpk_str_is(proto_str s, const char *lit)
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
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
		      c == '_' || c == ':' || c == '/' || c == '-'))
			return "bad character";
	}
	return NULL;
}

/* A str of 1..max bytes of valid UTF-8 without NUL (about entries, keys). */
const char *
mpk_text_check(proto_str s, size_t max)
{
	if (s.len == 0)
		return "empty";
	if (s.len > max)
		return "too long";
	if (!st_utf8_valid(s.p, s.len))
		return "invalid UTF-8 or NUL";
	return NULL;
}

/* ---- msgpack-c's packer into an st_buf --------------------------------- */

/* The packer's sink (mpk.h: how a failed append ends the encoding). */
static int
buf_write(void *data, const char *b, size_t n)
{
	mpk_packer *w = data;

	if (w->nomem)
		return -1;
	if (st_buf_try_append(w->out, b, n) != ST_OK) {
		w->nomem = true;
		return -1;
	}
	return 0;
}

msgpack_packer *
mpk_packer_begin(mpk_packer *w, st_buf *out)
{
	w->out = out;
	w->start = out->len;
	w->nomem = false;
	msgpack_packer_init(&w->pk, w, buf_write);
	return &w->pk;
}

st_err
mpk_packer_end(mpk_packer *w)
{
	if (!w->nomem)
		return ST_OK;
	w->out->len = w->start;
	if (w->out->p != NULL)
		w->out->p[w->start] = '\0';
	return ST_ENOMEM;
}

/* The end of an encoder of the daemons' (published messages, replies): out of memory aborts (st_util.h). */
void
mpk_packer_end_or_abort(mpk_packer *w, const char *what)
{
	if (mpk_packer_end(w) != ST_OK)
		st_oom(what, 0);
}

void
mpk_pack_cstr(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);

	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

void
mpk_pack_pstr(msgpack_packer *pk, proto_str s)
{
	msgpack_pack_str(pk, s.len);
	msgpack_pack_str_body(pk, s.p, s.len);
}

/* ST_ENOMEM leaves the pool as it was (still the caller's to free). */
st_err
mpk_pool_push(mpk_str_pool *pl, proto_str s)
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
