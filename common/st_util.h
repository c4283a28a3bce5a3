/*
 * st_util: allocation, assertions, small helpers.
 *
 * Two kinds of allocation, one implementation:
 *  - st_try_* return NULL when out of memory.  Code that a library runs
 *    (libstudio-producer, and the shared parts of proto/ and common/ it
 *    calls) uses only these: a library must never abort its host program,
 *    so out of memory becomes an error (STUDIO_NOMEM) the caller handles.
 *  - st_x* abort instead (the redis/h2o rule), for the daemons and
 *    studioctl: a server's policy for out of memory is to die and be
 *    restarted by its supervisor (its clients retry), because a process
 *    that half-failed allocations across its event loop is harder to trust
 *    than a fresh one; and allocations sized by input are bounded before
 *    they happen, so what is left is small and not recoverable usefully.
 * st_x* are st_try_* plus st_oom().
 */
#ifndef ST_UTIL_H
#define ST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

void *st_try_malloc(size_t n);
void *st_try_calloc(size_t nmemb, size_t size); /* NULL too when nmemb * size overflows */
void *st_try_realloc(void *p, size_t n);        /* NULL: p is left as it was */
char *st_try_strndup(const char *s, size_t n);

void *st_xmalloc(size_t n);
void *st_xcalloc(size_t nmemb, size_t size);
void *st_xrealloc(void *p, size_t n);
char *st_xstrdup(const char *s);
char *st_xstrndup(const char *s, size_t n);

/* Out of memory in a program that aborts on it: one line naming what, then abort(). */
void st_oom(const char *what, size_t n) __attribute__((noreturn));

#ifdef ST_ALLOC_FAILPOINTS
/*
 * Allocation-failure injection, compiled only into test binaries built
 * with -DST_ALLOC_FAILPOINTS (the producer library's *_test), never into a library or a
 * program: after st_alloc_fail_arm(n) the n-th next st_try_* call (any
 * thread) fails once; 0 disarms.  st_alloc_fail_fired() says whether it
 * did since the last arm.
 */
void st_alloc_fail_arm(unsigned long n);
bool st_alloc_fail_fired(void);
#endif

/*
 * Makes s (a library's message: libpq's, a resolver's) fit one log line:
 * trailing white space removed, inner newlines, CRs and tabs turned
 * into spaces.  In place.
 */
void st_one_line(char *s);

/*
 * Bounds a program's teardown: if the process has not exited `seconds`
 * after this call, a SIGALRM handler writes one line naming prog and exits
 * with code (_exit: nothing more runs).  For what follows the end of the
 * event loop, when the work that matters (drain, flush, replies) is done
 * and only closing remains: nng 1.5.2's nng_close can wait for ever on a
 * close race inside the library (a stalled rolling restart otherwise).
 * Call once, from the main thread.
 */
void st_exit_watchdog(const char *prog, unsigned seconds, int code);

/* Aborts with file:line.  Only for programmer errors, never for input. */
void st_panic(const char *file, int line, const char *what) __attribute__((noreturn));
#define ST_ASSERT(x)                                      \
	do {                                              \
		if (!(x))                                 \
			st_panic(__FILE__, __LINE__, #x); \
	} while (0)

#define ST_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define ST_MIN(a, b) ((a) < (b) ? (a) : (b))
#define ST_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Frees *pp and NULLs it (haproxy's ha_free). */
#define ST_FREE(pp)           \
	do {                  \
		free(*(pp));  \
		*(pp) = NULL; \
	} while (0)

/*
 * Parses a whole decimal uint64 (no sign, no spaces, no leading '+',
 * at most 20 digits).  ST_EINVAL on anything else, ST_ERANGE on overflow.
 */
#include "st_err.h"
st_err st_parse_u64(const char *s, size_t len, uint64_t *out);

/* The value of one hex digit (either case), or -1. */
int st_hex_digit(unsigned char c);

/* 64-bit FNV-1a of p[0..len): the hash of every table in the project (keys, topics, resources). */
uint64_t st_hash_bytes(const void *p, size_t len);

/* Writes the decimal form of v into buf (at least 21 bytes); returns length. */
size_t st_fmt_u64(char *buf, uint64_t v);

/*
 * The next item of a comma-separated list (an HTTP header list such as
 * Connection, a flag such as --cors-origins or --trusted-proxies): skips
 * commas and white space, sets *item and *len to the item without the
 * white space around it, and moves *p past it.  Empty items are skipped;
 * false when none is left.  *p must not be NULL (point it at "" instead).
 */
#include <stdbool.h>
bool st_list_next(const char **p, const char **item, size_t *len);

#endif
