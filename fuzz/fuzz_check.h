/*
 * fuzz_check: what every fuzz target shares.
 *
 * A broken invariant must end the run the same way a sanitizer report
 * does, so FUZZ_CHECK prints what broke and abort()s: libFuzzer sees the
 * deadly signal, prints the stack and writes the input as crash-<sha1>.
 * The helpers restate the contract's bounds (docs/api.md,
 * proto/README.md) independently of the code under test, so that a decoder
 * bug cannot also hide in the check.
 */
#ifndef FUZZ_CHECK_H
#define FUZZ_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(cond, ...)                                                                               \
	do {                                                                                                \
		if (!(cond)) {                                                                              \
			fprintf(stderr, "\nFUZZ_CHECK failed at %s:%d: %s\n  ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                                                       \
			fputc('\n', stderr);                                                                \
			abort();                                                                            \
		}                                                                                           \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* The topic rule of the contract: 1..200 bytes of [A-Za-z0-9._:/-]. */
static inline bool
fuzz_topic_ok(const char *p, size_t len)
{
	if (len < 1 || len > 200)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)p[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
		      c == '_' || c == ':' || c == '/' || c == '-'))
			return false;
	}
	return true;
}

/* p[0..len) lies inside [base, base + size). */
static inline bool
fuzz_within(const void *p, size_t len, const void *base, size_t size)
{
	uintptr_t c = (uintptr_t)p, b = (uintptr_t)base;

	return len == 0 || (c >= b && c - b <= size && len <= size - (c - b));
}

#endif
