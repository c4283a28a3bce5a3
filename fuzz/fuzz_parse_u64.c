/*
 * fuzz_parse_u64: Last-Event-ID, Content-Length, ?until= and config
 * numbers all go through st_parse_u64, so its exact language matters (a
 * Last-Event-ID accepted with a different value replays the wrong range).
 *
 * Differential against a reference built on strtoull, restating the header
 * ("a whole decimal uint64, no sign, no spaces, no leading '+', at most 20
 * digits; ST_EINVAL on anything else, ST_ERANGE on overflow"): empty or any
 * non-digit byte -> ST_EINVAL; only digits but more than 20 of them or a
 * value above UINT64_MAX -> ST_ERANGE; otherwise ST_OK with strtoull's
 * value.  The input buffer is exactly len bytes and not NUL-terminated, so
 * ASan sees any read past len.  Also checks st_fmt_u64 round trips through
 * st_parse_u64 for the first 8 input bytes read as a number.
 */
#include <errno.h>
#include <string.h>

#include "fuzz_check.h"
#include "st_util.h"

static st_err
ref_parse(const char *s, size_t len, uint64_t *out)
{
	char buf[32];
	unsigned long long v;
	char *end;

	if (len == 0)
		return ST_EINVAL;
	for (size_t i = 0; i < len; i++)
		if (s[i] < '0' || s[i] > '9')
			return ST_EINVAL;
	if (len > 20)
		return ST_ERANGE;
	memcpy(buf, s, len);
	buf[len] = '\0';
	errno = 0;
	v = strtoull(buf, &end, 10);
	if (errno == ERANGE)
		return ST_ERANGE;
	FUZZ_CHECK(*end == '\0', "reference: strtoull stopped early");
	*out = (uint64_t)v;
	return ST_OK;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *s = (const char *)data;
	uint64_t a = 0xdeadbeef, b = 0xdeadbeef;
	st_err ra = st_parse_u64(s, size, &a), rb = ref_parse(s, size, &b);

	FUZZ_CHECK(ra == rb, "st_parse_u64 returns %d, reference %d (len %zu)", (int)ra, (int)rb, size);
	FUZZ_CHECK(ra != ST_OK || a == b, "st_parse_u64 value %llu, reference %llu", (unsigned long long)a,
		   (unsigned long long)b);
	if (size >= 8) {
		uint64_t v, back = 0;
		char buf[21];
		size_t n;

		memcpy(&v, data, 8);
		n = st_fmt_u64(buf, v);
		FUZZ_CHECK(n >= 1 && n <= 20, "st_fmt_u64 length %zu", n);
		FUZZ_CHECK(st_parse_u64(buf, n, &back) == ST_OK && back == v, "fmt/parse round trip of %llu",
			   (unsigned long long)v);
	}
	return 0;
}
