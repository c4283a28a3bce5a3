/*
 * fuzz_json_compact: the validator that decides which event data reaches
 * PostgreSQL (one text it lets through that the server refuses fails a
 * whole batch insert).
 *
 * Checks on every input: a refusal gives a reason; an acceptance writes at
 * most len bytes, and compacting the output again gives the same bytes
 * (idempotence: the compact form is a fixed point, so what is stored is
 * what is published and replayed); in-place compaction gives the same
 * output as a separate buffer; and the DOM agrees: st_json_parse accepts
 * exactly what compact accepts, except texts holding a \u0000 escape, which
 * the DOM refuses by design (st_json.h: a decoded C string cannot hold it).
 * The output buffer is exactly len bytes (len + 0 slack) so ASan sees any
 * write past the documented bound.
 */
#include <string.h>

#include "fuzz_check.h"
#include "st_json.h"

/* Does the text hold the escape \u0000 (inside a string, the only place a
 * valid text can have a backslash)?  An escaped backslash before "u0000"
 * ("\\u0000") is not one: count the run of backslashes. */
static bool
has_u0000(const char *s, size_t n)
{
	for (size_t i = 0; i + 6 <= n; i++) {
		size_t k = 0;

		if (s[i] != '\\' || memcmp(s + i + 1, "u0000", 5) != 0)
			continue;
		while (k < i && s[i - 1 - k] == '\\')
			k++;
		if (k % 2 == 0)
			return true;
	}
	return false;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *in = (const char *)data, *err = NULL;
	char *out = malloc(size ? size : 1), *out2 = malloc(size ? size : 1), *inplace = malloc(size ? size : 1);
	size_t n = (size_t)-1, n2 = (size_t)-1, n3 = (size_t)-1;
	st_json *j = NULL;
	st_err rv, prv;

	FUZZ_CHECK(out && out2 && inplace, "malloc");
	rv = st_json_compact(in, size, out, &n, &err);
	prv = st_json_parse(in, size, size + 1, &j);
	if (rv != ST_OK) {
		FUZZ_CHECK(rv == ST_EINVAL, "refusal is %d", (int)rv);
		FUZZ_CHECK(err != NULL && err[0] != '\0', "refusal without a reason");
		FUZZ_CHECK(prv != ST_OK, "st_json_parse accepts a text st_json_compact refuses (%s)", err);
		goto done;
	}
	FUZZ_CHECK(n <= size, "compact wrote %zu > %zu bytes", n, size);
	FUZZ_CHECK(n > 0, "an accepted text compacts to nothing");

	/* Idempotence. */
	err = NULL;
	FUZZ_CHECK(st_json_compact(out, n, out2, &n2, &err) == ST_OK, "compact output refused: %s", err ? err : "?");
	FUZZ_CHECK(n2 == n && memcmp(out, out2, n) == 0, "compact is not idempotent (%zu -> %zu bytes)", n, n2);

	/* In place. */
	memcpy(inplace, in, size);
	FUZZ_CHECK(st_json_compact(inplace, size, inplace, &n3, NULL) == ST_OK, "in-place compaction refused");
	FUZZ_CHECK(n3 == n && memcmp(inplace, out, n) == 0, "in-place compaction differs");

	/* The DOM accepts the same language, modulo \u0000. */
	if (has_u0000(in, size))
		FUZZ_CHECK(prv != ST_OK, "st_json_parse accepted a \\u0000 string");
	else
		FUZZ_CHECK(prv == ST_OK, "st_json_parse refuses (%d) a text st_json_compact accepts", (int)prv);
done:
	st_json_free(j);
	free(out);
	free(out2);
	free(inplace);
	return 0;
}
