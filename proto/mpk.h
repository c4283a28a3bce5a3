/*
 * mpk: the bounded msgpack reader (mpk_rd) and the packer into an st_buf
 * (mpk_packer) that proto/'s codecs share; the checks of text both take.
 * Internal to proto/: programs use wire.h and wire_pub.h.
 *
 * Reader functions return MPK_OK, having moved the cursor past what they
 * read, or an MPK_* error (the decoders then give up on the input).
 * Strings read point into the input.
 */
#ifndef PROTO_MPK_H
#define PROTO_MPK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "st_buf.h"
#include "st_err.h"
#include "wire.h"

typedef struct mpk_rd {
	const unsigned char *p;
	size_t n; /* bytes left */
} mpk_rd;

enum { MPK_OK = 0, MPK_TYPE, MPK_SHORT, MPK_RANGE };

/* Consumes a 1-byte tag plus a k-byte big-endian argument. */
int mpk_rd_head(mpk_rd *r, size_t k, uint64_t *v);
bool mpk_rd_is_nil(const mpk_rd *r);
int mpk_rd_nil(mpk_rd *r);
int mpk_rd_str(mpk_rd *r, proto_str *s);
/* An array header; n <= bytes left (every element takes at least one). */
int mpk_rd_arr(mpk_rd *r, uint32_t *n);
/* A map header; 2n <= bytes left. */
int mpk_rd_map(mpk_rd *r, uint32_t *n);
/* Any integer encoding holding a value >= 0. */
int mpk_rd_uint(mpk_rd *r, uint64_t *out);
int mpk_rd_bool(mpk_rd *r, bool *b);
/* Skips one value of any type (nesting bounded, every length checked). */
int mpk_rd_skip(mpk_rd *r, int depth);
bool mpk_str_is(proto_str s, const char *lit);
/* A str of 1..max bytes of valid UTF-8 without NUL (about entries, keys). */
const char *mpk_text_check(proto_str s, size_t max);

/*
 * The packer: msgpack-c's packer writing into an st_buf without aborting.
 * After the first failed append every later write is refused too
 * (msgpack-c's pack calls return the sink's value but the encoders do not
 * stop between them), and mpk_packer_end says ST_ENOMEM, with the buffer
 * cut back to where the encoding began.
 */
typedef struct mpk_packer {
	msgpack_packer pk;
	st_buf *out;
	size_t start; /* out->len before the encoding */
	bool nomem;
} mpk_packer;

msgpack_packer *mpk_packer_begin(mpk_packer *w, st_buf *out);
st_err mpk_packer_end(mpk_packer *w);
/* The end of an encoder of the daemons' (published messages, replies): out of memory aborts (st_util.h). */
void mpk_packer_end_or_abort(mpk_packer *w, const char *what);
void mpk_pack_cstr(msgpack_packer *pk, const char *s);
void mpk_pack_pstr(msgpack_packer *pk, proto_str s);

/* A growable array of proto_str; moves until the decode ends. */
typedef struct mpk_str_pool {
	proto_str *v;
	size_t n, cap;
} mpk_str_pool;

/* ST_ENOMEM leaves the pool as it was (still the caller's to free). */
st_err mpk_pool_push(mpk_str_pool *pl, proto_str s);

#endif
