/* st_util: fallible and aborting allocators (one implementation; failpoints for tests), panic, decimal parsing and formatting, the teardown watchdog. */
#include "st_util.h"

#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef ST_ALLOC_FAILPOINTS
#include <stdatomic.h>

static atomic_ulong fail_countdown; /* 0: disarmed; k: the k-th next st_try_* call fails */
static atomic_bool fail_fired;

void
st_alloc_fail_arm(unsigned long n)
{
	atomic_store(&fail_fired, false);
	atomic_store(&fail_countdown, n);
}

bool
st_alloc_fail_fired(void)
{
	return atomic_load(&fail_fired);
}

static bool
alloc_should_fail(void)
{
	unsigned long v = atomic_load(&fail_countdown);

	while (v > 0)
		if (atomic_compare_exchange_weak(&fail_countdown, &v, v - 1)) {
			if (v == 1)
				atomic_store(&fail_fired, true);
			return v == 1;
		}
	return false;
}
#define ALLOC_FAILPOINT()                \
	do {                             \
		if (alloc_should_fail()) \
			return NULL;     \
	} while (0)
#else
#define ALLOC_FAILPOINT() \
	do {              \
	} while (0)
#endif

void
st_oom(const char *what, size_t n)
{
	fprintf(stderr, "fatal: out of memory allocating %zu bytes (%s)\n", n, what);
	abort();
}

void *
st_try_malloc(size_t n)
{
	ALLOC_FAILPOINT();
	return malloc(n ? n : 1);
}

void *
st_try_calloc(size_t nmemb, size_t size)
{
	ALLOC_FAILPOINT();
	return calloc(nmemb ? nmemb : 1, size ? size : 1); /* calloc refuses an overflowing product */
}

void *
st_try_realloc(void *p, size_t n)
{
	ALLOC_FAILPOINT();
	return realloc(p, n ? n : 1);
}

char *
st_try_strndup(const char *s, size_t n)
{
	char *p;

	if (n == SIZE_MAX || (p = st_try_malloc(n + 1)) == NULL)
		return NULL;
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

void *
st_xmalloc(size_t n)
{
	void *p = st_try_malloc(n);

	if (p == NULL)
		st_oom("st_xmalloc", n);
	return p;
}

void *
st_xcalloc(size_t nmemb, size_t size)
{
	void *p = st_try_calloc(nmemb, size);

	if (p == NULL)
		st_oom("st_xcalloc", nmemb * size);
	return p;
}

void *
st_xrealloc(void *p, size_t n)
{
	void *q = st_try_realloc(p, n);

	if (q == NULL)
		st_oom("st_xrealloc", n);
	return q;
}

char *
st_xstrdup(const char *s)
{
	return st_xstrndup(s, strlen(s));
}

char *
st_xstrndup(const char *s, size_t n)
{
	char *p = st_try_strndup(s, n);

	if (p == NULL)
		st_oom("st_xstrndup", n + 1);
	return p;
}

void
st_one_line(char *s)
{
	size_t n = strlen(s);

	while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == '\t' || s[n - 1] == ' '))
		s[--n] = '\0';
	for (; *s; s++)
		if (*s == '\n' || *s == '\r' || *s == '\t')
			*s = ' ';
}

static char watchdog_line[160];
static size_t watchdog_len;
static volatile sig_atomic_t watchdog_code;

static void
watchdog_fire(int sig)
{
	(void)sig;
	/* Only async-signal-safe calls here. */
	(void)!write(STDERR_FILENO, watchdog_line, watchdog_len);
	_exit(watchdog_code);
}

void
st_exit_watchdog(const char *prog, unsigned seconds, int code)
{
	struct sigaction sa;
	int n = snprintf(watchdog_line, sizeof(watchdog_line),
			 "%s: teardown did not finish within %u s (a close inside nng hangs); exiting %d\n", prog,
			 seconds, code);

	watchdog_len = n > 0 ? ST_MIN((size_t)n, sizeof(watchdog_line) - 1) : 0;
	watchdog_code = code;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = watchdog_fire;
	sigemptyset(&sa.sa_mask);
	(void)sigaction(SIGALRM, &sa, NULL);
	alarm(seconds);
}

void
st_panic(const char *file, int line, const char *what)
{
	fprintf(stderr, "fatal: %s:%d: assertion failed: %s\n", file, line, what);
	abort();
}

st_err
st_parse_u64(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0;

	if (len == 0)
		return ST_EINVAL;
	/* Anything but digits is EINVAL, however long; only a long number is ERANGE. */
	for (size_t i = 0; i < len; i++)
		if (s[i] < '0' || s[i] > '9')
			return ST_EINVAL;
	if (len > 20)
		return ST_ERANGE;
	for (size_t i = 0; i < len; i++) {
		unsigned d;

		if (s[i] < '0' || s[i] > '9')
			return ST_EINVAL;
		d = (unsigned)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return ST_ERANGE;
		v = v * 10 + d;
	}
	*out = v;
	return ST_OK;
}

int
st_hex_digit(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

uint64_t
st_hash_bytes(const void *p, size_t len)
{
	const unsigned char *b = p;
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < len; i++) {
		h ^= b[i];
		h *= 1099511628211ull;
	}
	return h;
}

size_t
st_fmt_u64(char *buf, uint64_t v)
{
	char tmp[21];
	size_t n = 0, i;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	for (i = 0; i < n; i++)
		buf[i] = tmp[n - 1 - i];
	buf[n] = '\0';
	return n;
}

bool
st_list_next(const char **p, const char **item, size_t *len)
{
	const char *b = *p, *e;

	while (*b == ',' || isspace((unsigned char)*b))
		b++;
	if (*b == '\0') {
		*p = b;
		return false;
	}
	for (e = b; *e && *e != ','; e++)
		;
	*p = e;
	while (e > b && isspace((unsigned char)e[-1]))
		e--;
	*item = b;
	*len = (size_t)(e - b);
	return true;
}
