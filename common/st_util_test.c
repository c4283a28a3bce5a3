/* Unit tests for st_util and st_buf. */
#include "st_buf.h"
#include "st_clock.h"
#include "st_dlist.h"
#include "st_test.h"
#include "st_util.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void
t_parse_u64(void)
{
	uint64_t v = 0;

	ST_CHECK(st_parse_u64("0", 1, &v) == ST_OK && v == 0);
	ST_CHECK(st_parse_u64("18446744073709551615", 20, &v) == ST_OK && v == UINT64_MAX);
	ST_CHECK(st_parse_u64("18446744073709551616", 20, &v) == ST_ERANGE);
	ST_CHECK(st_parse_u64("123456789012345678901", 21, &v) == ST_ERANGE);
	ST_CHECK(st_parse_u64("", 0, &v) == ST_EINVAL);
	ST_CHECK(st_parse_u64("-1", 2, &v) == ST_EINVAL);
	ST_CHECK(st_parse_u64("+1", 2, &v) == ST_EINVAL);
	ST_CHECK(st_parse_u64("1 ", 2, &v) == ST_EINVAL);
	ST_CHECK(st_parse_u64("0x10", 4, &v) == ST_EINVAL);
	/* found by fuzz/fuzz_parse_u64.c: long non-numbers are EINVAL, not ERANGE */
	ST_CHECK(st_parse_u64("aaaaaaaaaaaaaaaaaaaaa", 21, &v) == ST_EINVAL);
}

static void
t_fmt_u64(void)
{
	char b[21];

	ST_CHECK_MEM(b, st_fmt_u64(b, 0), "0");
	ST_CHECK_MEM(b, st_fmt_u64(b, 42), "42");
	ST_CHECK_MEM(b, st_fmt_u64(b, UINT64_MAX), "18446744073709551615");
}

static void
t_buf(void)
{
	st_buf b;
	char *p;
	size_t n;

	st_buf_init(&b);
	for (int i = 0; i < 1000; i++)
		st_buf_putc(&b, 'x');
	ST_CHECK_EQ_U64(b.len, 1000);
	ST_CHECK(b.p[1000] == '\0');
	st_buf_reset(&b);
	st_buf_printf(&b, "%s-%d", "a", 7);
	st_buf_put_u64(&b, 99);
	ST_CHECK_STR(b.p, "a-799");
	p = st_buf_steal(&b, &n);
	ST_CHECK_EQ_U64(n, 5);
	ST_CHECK(b.p == NULL && b.len == 0);
	free(p);
	st_buf_fini(&b);
}

static void
t_one_line(void)
{
	char a[] = "connection refused\n\tIs the server running?\r\n \n";
	char b[] = "";

	st_one_line(a);
	ST_CHECK_STR(a, "connection refused  Is the server running?");
	st_one_line(b);
	ST_CHECK_STR(b, "");
}

static void
t_fake_clock(void)
{
	st_clock_fake f;

	st_clock_fake_init(&f, 1000);
	ST_CHECK_EQ_U64(st_clock_now(&f.clock), 1000);
	f.now += 30100;
	ST_CHECK_EQ_U64(st_clock_now(&f.clock), 31100);
	ST_CHECK(st_clock_now(st_clock_system()) > 0);
}

/* Delays double from min to max and stay there; a reset starts again; ms become a timeval exactly. */
static void
t_backoff(void)
{
	static const uint32_t want[] = { 100, 200, 400, 800, 1600, 3200, 5000, 5000 };
	st_backoff b;
	struct timeval tv = st_timeval_ms(5999);

	st_backoff_init(&b, 100, 5000);
	for (size_t i = 0; i < ST_ARRAY_LEN(want); i++)
		ST_CHECK_EQ_U64(st_backoff_next(&b), want[i]);
	st_backoff_reset(&b);
	ST_CHECK_EQ_U64(st_backoff_next(&b), 100);
	/* no overflow near the top of the range */
	st_backoff_init(&b, 3000000000u, UINT32_MAX);
	ST_CHECK_EQ_U64(st_backoff_next(&b), 3000000000u);
	ST_CHECK_EQ_U64(st_backoff_next(&b), UINT32_MAX);
	ST_CHECK_EQ_U64((uint64_t)tv.tv_sec, 5);
	ST_CHECK_EQ_U64((uint64_t)tv.tv_usec, 999000);
}

/* Push, unlink (twice is harmless), order of both ends, and the element found back from its link. */
typedef struct dl_item {
	int v;
	st_dlink link;
} dl_item;

static void
t_dlist(void)
{
	st_dlink l, *n, *next;
	dl_item it[4] = { { 0, { 0 } }, { 1, { 0 } }, { 2, { 0 } }, { 3, { 0 } } };
	int got[4], k = 0;

	st_dlist_init(&l);
	ST_CHECK(st_dlist_empty(&l) && st_dlist_first(&l) == NULL);
	st_dlist_push_back(&l, &it[1].link);
	st_dlist_push_back(&l, &it[2].link);
	st_dlist_push_front(&l, &it[0].link);
	st_dlist_push_back(&l, &it[3].link);
	ST_CHECK(!st_dlink_linked(&(st_dlink){ 0 }));
	/* unlinking while walking: read the next one first */
	for (n = st_dlist_first(&l); n != NULL; n = next) {
		dl_item *i = ST_CONTAINER_OF(n, dl_item, link);

		next = st_dlist_after(&l, n);
		got[k++] = i->v;
		if (i->v % 2 == 1)
			st_dlink_unlink(n);
	}
	ST_CHECK(k == 4 && got[0] == 0 && got[1] == 1 && got[2] == 2 && got[3] == 3);
	st_dlink_unlink(&it[1].link);
	ST_CHECK(!st_dlink_linked(&it[1].link) && st_dlink_linked(&it[2].link));
	ST_CHECK(ST_CONTAINER_OF(st_dlist_first(&l), dl_item, link) == &it[0]);
	ST_CHECK(ST_CONTAINER_OF(st_dlist_after(&l, &it[0].link), dl_item, link) == &it[2]);
	ST_CHECK(st_dlist_after(&l, &it[2].link) == NULL);
	st_dlink_unlink(&it[0].link);
	st_dlink_unlink(&it[2].link);
	ST_CHECK(st_dlist_empty(&l));
}

/* A teardown that hangs (here: pause() for ever) ends at the watchdog with the given code and one line. */
static void
t_exit_watchdog(void)
{
	int fds[2], status = 0;
	char buf[256] = { 0 };
	pid_t pid, got = 0;
	ssize_t n;

	ST_CHECK(pipe(fds) == 0);
	pid = fork();
	ST_CHECK(pid != -1);
	if (pid == 0) {
		dup2(fds[1], STDERR_FILENO);
		st_exit_watchdog("hangs", 1, 3);
		for (;;)
			pause();
	}
	close(fds[1]);
	/* bounded: 20 s for a 1 s alarm; the test fails (and kills the child) rather than hang */
	for (int i = 0; i < 200 && got == 0; i++) {
		got = waitpid(pid, &status, WNOHANG);
		if (got == 0)
			usleep(100000);
	}
	if (got == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	ST_CHECK(got == pid);
	ST_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 3);
	n = read(fds[0], buf, sizeof(buf) - 1);
	ST_CHECK(n > 0 && strstr(buf, "hangs: teardown did not finish within 1 s") != NULL);
	close(fds[0]);
}

/* Each call yields the next non-empty item, trimmed; the pointer ends at the terminator. */
static void
t_list_next(void)
{
	static const struct {
		const char *in;
		const char *want; /* the items joined with '|' */
	} cases[] = {
		{ "", "" },
		{ " , ,, ", "" },
		{ "a", "a" },
		{ "keep-alive, Close", "keep-alive|Close" },
		{ " 10.0.0.0/8 ,\t::1/128,", "10.0.0.0/8|::1/128" },
		{ "a b , c", "a b|c" },
		{ ",x,,y ,", "x|y" },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		const char *p = cases[i].in, *item;
		char got[64] = "";
		size_t len, n = 0;

		while (st_list_next(&p, &item, &len))
			n += (size_t)snprintf(got + n, sizeof(got) - n, "%s%.*s", n ? "|" : "", (int)len, item);
		ST_CHECK_STR(got, cases[i].want);
		ST_CHECK(*p == '\0');
	}
}

static void
t_backoff_jitter(void)
{
	/* half the step always, the other half random; the step doubles to the cap */
	static const struct {
		uint32_t attempt;
		uint64_t rnd;
		uint32_t want;
	} cases[] = {
		{ 1, 0, 50 },    { 1, 50, 100 }, { 1, 51, 50 },     { 2, 0, 100 },   { 3, 0, 200 },
		{ 3, 100, 300 }, { 7, 0, 2500 }, { 7, 2500, 5000 }, { 30, 0, 2500 }, { 4000000000u, 0, 2500 },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		uint32_t got = st_backoff_jitter_ms(cases[i].attempt, 100, 5000, cases[i].rnd);

		fprintf(stderr, "  attempt %u rnd %llu -> %u (want %u)\n", cases[i].attempt,
			(unsigned long long)cases[i].rnd, got, cases[i].want);
		ST_CHECK_EQ_U64(got, cases[i].want);
	}
	for (uint64_t r = 0; r < 1000; r += 7)
		ST_CHECK(st_backoff_jitter_ms(1, 100, 5000, r * 0x9e3779b97f4a7c15ull) >= 50);
}

int
main(void)
{
	ST_RUN(t_parse_u64);
	ST_RUN(t_fmt_u64);
	ST_RUN(t_one_line);
	ST_RUN(t_list_next);
	ST_RUN(t_exit_watchdog);
	ST_RUN(t_buf);
	ST_RUN(t_fake_clock);
	ST_RUN(t_backoff);
	ST_RUN(t_backoff_jitter);
	ST_RUN(t_dlist);
	return st_test_done();
}
