/*
 * st_test: the unit-test harness, header only.
 *
 *   static void t_overflow(void) { ST_CHECK(x == 1); ST_CHECK_EQ_U64(a, b); }
 *   int main(void) { ST_RUN(t_overflow); return st_test_done(); }
 *
 * A failed check prints file:line and the expression and marks the test
 * failed; the run goes on so one run shows every failure.  st_test_done()
 * prints "N passed, N failed" (read by CI) and returns the exit status.
 */
#ifndef ST_TEST_H
#define ST_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int st_test_failed_checks;
static int st_test_passed, st_test_failed;

#define ST_CHECK(x)                                                                           \
	do {                                                                                  \
		if (!(x)) {                                                                   \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #x); \
			st_test_failed_checks++;                                              \
		}                                                                             \
	} while (0)

#define ST_CHECK_EQ_U64(a, b)                                                                                       \
	do {                                                                                                        \
		uint64_t st_a_ = (uint64_t)(a), st_b_ = (uint64_t)(b);                                              \
		if (st_a_ != st_b_) {                                                                               \
			fprintf(stderr, "%s:%d: %s == %s failed: %" PRIu64 " != %" PRIu64 "\n", __FILE__, __LINE__, \
				#a, #b, st_a_, st_b_);                                                              \
			st_test_failed_checks++;                                                                    \
		}                                                                                                   \
	} while (0)

#define ST_CHECK_STR(a, b)                                                                                        \
	do {                                                                                                      \
		const char *st_a_ = (a), *st_b_ = (b);                                                            \
		if (st_a_ == NULL || st_b_ == NULL || strcmp(st_a_, st_b_)) {                                     \
			fprintf(stderr, "%s:%d: %s == %s failed: \"%s\" != \"%s\"\n", __FILE__, __LINE__, #a, #b, \
				st_a_ ? st_a_ : "(null)", st_b_ ? st_b_ : "(null)");                              \
			st_test_failed_checks++;                                                                  \
		}                                                                                                 \
	} while (0)

/* Compares len bytes at a with the NUL-terminated string b. */
#define ST_CHECK_MEM(a, alen, b)                                                                                   \
	do {                                                                                                       \
		size_t st_l_ = (alen);                                                                             \
		if (st_l_ != strlen(b) || memcmp((a), (b), st_l_)) {                                               \
			fprintf(stderr, "%s:%d: %s == \"%s\" failed: got \"%.*s\"\n", __FILE__, __LINE__, #a, (b), \
				(int)st_l_, (const char *)(a));                                                    \
			st_test_failed_checks++;                                                                   \
		}                                                                                                  \
	} while (0)

#define ST_RUN(fn)                                         \
	do {                                               \
		int st_before_ = st_test_failed_checks;    \
		fn();                                      \
		if (st_test_failed_checks == st_before_) { \
			st_test_passed++;                  \
			fprintf(stderr, "ok   %s\n", #fn); \
		} else {                                   \
			st_test_failed++;                  \
			fprintf(stderr, "FAIL %s\n", #fn); \
		}                                          \
	} while (0)

static inline int
st_test_done(void)
{
	printf("%d passed, %d failed\n", st_test_passed, st_test_failed);
	return st_test_failed ? 1 : 0;
}

#endif
