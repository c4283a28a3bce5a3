/*
 * fuzz_pgarray_binary_parse: the about column of every replayed row arrives
 * as PostgreSQL's binary text[], read by st_pgarray_binary_parse (the server is trusted less than
 * it seems: a proxy, a wrong column or a future format change are all
 * bytes the edge must survive).
 *
 * Differential against a reference decoder written here from the format
 * (int32 ndim, int32 flags, oid; ndim x (int32 dim, int32 lower bound);
 * then per element int32 length, -1 = NULL, and the bytes), restricted as
 * the header says: ndim 0 (exactly 12 bytes, no entries) or 1, oid text,
 * flags 0 or 1, no NULL element, nothing left over, at most max entries.
 * Both must agree on the verdict and on every entry's offset and length.
 * The out array holds exactly max entries (heap) so ASan sees a write past
 * it; max is taken from the first input byte's low bits so small bounds
 * are exercised too.  On success every entry must lie inside the input.
 */
#include <string.h>

#include "fuzz_check.h"
#include "st_pgarray.h"

#define MAX_ENTRIES 1024u /* REPLAY_MAX_ABOUT, the edge's bound */

static st_pgarray_elem ref_out[MAX_ENTRIES];

static uint32_t
be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static bool
ref_parse(const uint8_t *b, size_t len, uint32_t max, uint32_t *n)
{
	uint32_t ndim, flags, oid, count;
	size_t off;

	if (len < 12)
		return false;
	ndim = be32(b);
	flags = be32(b + 4);
	oid = be32(b + 8);
	if (oid != 25 || flags > 1)
		return false;
	if (ndim == 0) {
		*n = 0;
		return len == 12;
	}
	if (ndim != 1 || len < 20)
		return false;
	count = be32(b + 12);
	if (count > max)
		return false;
	off = 20;
	for (uint32_t i = 0; i < count; i++) {
		uint32_t el;

		if (len - off < 4)
			return false;
		el = be32(b + off);
		off += 4;
		if (el == 0xffffffffu || el > len - off)
			return false;
		ref_out[i].p = (const char *)b + off;
		ref_out[i].len = el;
		off += el;
	}
	if (off != len)
		return false;
	*n = count;
	return true;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint32_t max = MAX_ENTRIES, n = 0xdead, rn = 0;
	st_pgarray_elem *out;
	bool ok;
	st_err rv;

	/* Most inputs use the edge's real bound; one in four a small one. */
	if (size > 0 && (data[size - 1] & 3) == 0)
		max = data[size - 1] >> 2; /* 0..63 */
	out = malloc((max ? max : 1) * sizeof(*out));
	FUZZ_CHECK(out != NULL, "malloc");
	ok = ref_parse(data, size, max, &rn);
	rv = st_pgarray_binary_parse((const char *)data, size, out, max, &n);
	if (!ok) {
		FUZZ_CHECK(rv == ST_EPROTO, "reference refuses, parser returns %d", (int)rv);
		FUZZ_CHECK(n == 0, "refused with *n = %u", n);
		goto done;
	}
	FUZZ_CHECK(rv == ST_OK, "reference accepts (%u entries, max %u), parser returns %d", rn, max, (int)rv);
	FUZZ_CHECK(n == rn && n <= max, "%u entries, reference %u", n, rn);
	for (uint32_t i = 0; i < n; i++) {
		FUZZ_CHECK(out[i].p == ref_out[i].p && out[i].len == ref_out[i].len, "entry %u differs", i);
		FUZZ_CHECK(fuzz_within(out[i].p, out[i].len, data, size), "entry %u outside the input", i);
	}
done:
	free(out);
	return 0;
}
