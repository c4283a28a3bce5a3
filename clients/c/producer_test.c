/*
 * producer_test: the producer and its requests (producer.c, op.c): the
 * names, what studio_producer_new refuses, and what the library does with
 * no writer at all (the deadline, the slot, free while a caller waits,
 * where callbacks run).  Key bases and the writer's checks are
 * request_test's, options by name options_test's.  No writer process:
 * tests/integration/test_producer_lib.py has those.
 *
 * Out of memory: this binary is built with ST_ALLOC_FAILPOINTS (see
 * clients/c/CMakeLists.txt), so each allocation of the library's (its own,
 * st_buf's, proto/wire.c's) can be made to fail in turn: every one must
 * give STUDIO_NOMEM, and nothing may leak (LeakSanitizer checks it under
 * ASan, at each test's end and at exit).  The answering writer there is a
 * REP socket of the test's own (real nng), which sends a real ingest reply.
 *
 * The wall clock: this binary defines clock_gettime (the library's sources
 * are compiled into it, so their calls bind here), adding a shift to
 * CLOCK_REALTIME readings; see t_waits_ignore_wall_clock.
 */
#include "studio_producer.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "options.h"
#include "producer_int.h"
#include "request.h"
#include "st_buf.h"
#include "st_test.h"
#include "st_util.h"
#include "wire.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
/* Unreachable blocks now (not only at exit): 0 when none. */
#define LEAKS_NOW() __lsan_do_recoverable_leak_check()
#else
#define LEAKS_NOW() 0
#endif

/* Seconds added to every CLOCK_REALTIME reading of this process (0: the true time). */
static atomic_llong realtime_shift_s;

/*
 * Interposed for the whole binary (the library's sources are compiled into
 * it): the real clock, read by the system call (not through libc, whose
 * symbol this one hides), with CLOCK_REALTIME shifted by realtime_shift_s.
 */
int
clock_gettime(clockid_t clk, struct timespec *ts)
{
	int rv = (int)syscall(SYS_clock_gettime, clk, ts);

	if (rv == 0 && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE))
		ts->tv_sec += (time_t)atomic_load(&realtime_shift_s);
	return rv;
}

static void
t_version(void)
{
	fprintf(stderr, "  studio_version() = \"%s\", header \"%s\"\n", studio_version(), STUDIO_PRODUCER_VERSION);
	ST_CHECK_STR(studio_version(), STUDIO_PRODUCER_VERSION);
	ST_CHECK_STR(studio_status_str(STUDIO_FULL), "full");
	ST_CHECK_STR(studio_status_str(STUDIO_NOMEM), "nomem");
	ST_CHECK_STR(studio_status_str((studio_status)99), "unknown");
}

static void
t_new_refuses(void)
{
	studio_producer *p = (studio_producer *)1;
	studio_options *o = studio_options_new();
	char err[256];

	ST_CHECK(studio_producer_new(NULL, NULL, &p, err, sizeof(err)) == STUDIO_USAGE && p == NULL);
	/* out NULL is a usage error, not a crash */
	ST_CHECK(studio_producer_new("tcp://127.0.0.1:1", NULL, NULL, err, sizeof(err)) == STUDIO_USAGE);
	fprintf(stderr, "  out NULL: %s\n", err);
	ST_CHECK(studio_producer_new(",,", NULL, &p, err, sizeof(err)) == STUDIO_USAGE);
	ST_CHECK_STR(err, "no writer URL in \",,\"");
	studio_options_set(o, "backoff_base_ms", "500", NULL, 0);
	studio_options_set(o, "backoff_cap_ms", "100", NULL, 0);
	ST_CHECK(studio_producer_new("tcp://127.0.0.1:1", o, &p, err, sizeof(err)) == STUDIO_USAGE);
	ST_CHECK_STR(err, "option backoff_cap_ms 100 is below backoff_base_ms 500");
	ST_CHECK(studio_producer_new("nope://x", NULL, &p, err, sizeof(err)) == STUDIO_USAGE);
	fprintf(stderr, "  bad scheme: %s\n", err);
	ST_CHECK_STR(err, "writer URL \"nope://x\": the scheme must be tcp://, tls+tcp:// or ipc://");
	/* nng dials ws:// too, but a writer never listens on it */
	ST_CHECK(studio_producer_new("ws://127.0.0.1:1/x", NULL, &p, err, sizeof(err)) == STUDIO_USAGE);
	ST_CHECK(strstr(err, "the scheme must be") != NULL);
	/* the library's words name its options, never a program's flags */
	ST_CHECK(studio_producer_new("tls+tcp://127.0.0.1:1", NULL, &p, err, sizeof(err)) == STUDIO_USAGE);
	fprintf(stderr, "  tls without files: %s\n", err);
	ST_CHECK(strstr(err, "tls_ca") != NULL && strstr(err, "--") == NULL);
	studio_options_free(o);
	o = studio_options_new();
	studio_options_set(o, "tls_ca", "/nonexistent/ca.pem", NULL, 0);
	ST_CHECK(studio_producer_new("tls+tcp://127.0.0.1:1", o, &p, err, sizeof(err)) == STUDIO_USAGE);
	fprintf(stderr, "  tls_ca missing: %s\n", err);
	ST_CHECK(strncmp(err, "option tls_ca: /nonexistent/ca.pem: ", 36) == 0 && strstr(err, "--") == NULL);
	studio_options_free(o);
}

/*
 * A producer with nothing to talk to: no try ever leaves (the sends fail),
 * so the deadline ends the call UNAVAILABLE, "nothing was sent"; the key
 * base is handed back all the same.
 */
static void
t_no_writer_nothing_sent(void)
{
	studio_producer *p = NULL;
	studio_event ev = { STUDIO_EVENT_INIT, .topic = "t" };
	char err[256], detail[512], base[STUDIO_KEY_BASE_MAX] = "", base2[STUDIO_KEY_BASE_MAX] = "mine-1";
	uint64_t seq = 0;
	studio_status st;

	ST_CHECK(studio_producer_new("tcp://127.0.0.1:1", NULL, &p, err, sizeof(err)) == STUDIO_OK);
	st = studio_publish(p, &ev, 1, base, &seq, 200, detail, sizeof(detail));
	fprintf(stderr, "  no writer: %s: %s (base \"%s\")\n", studio_status_str(st), detail, base);
	ST_CHECK(st == STUDIO_UNAVAILABLE);
	ST_CHECK(strstr(detail, "nothing was sent") != NULL);
	ST_CHECK(strncmp(base, "sp2-", 4) == 0 && strlen(base) == REQUEST_KEY_BASE_LEN);
	/* a caller's base is used and left as it was */
	ST_CHECK(studio_publish(p, &ev, 1, base2, &seq, 100, detail, sizeof(detail)) == STUDIO_UNAVAILABLE);
	ST_CHECK_STR(base2, "mine-1");
	strcpy(base2, "bad base");
	ST_CHECK(studio_publish(p, &ev, 1, base2, &seq, 100, detail, sizeof(detail)) == STUDIO_USAGE);
	studio_producer_free(p);
}

/* A clock that jumps 1 s at every reading: every deadline has passed by the next look. */
static atomic_uint_fast64_t jumpy_now;

static uint64_t
jumpy_clock(void *arg)
{
	(void)arg;
	return atomic_fetch_add(&jumpy_now, 1000);
}

typedef struct cb_seen {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int calls;
	pthread_t thread;
	studio_status st;
	uint64_t seq0; /* seqs[0] of the last OK */
	char detail[512];
} cb_seen;

static void
seen_cb(void *arg, studio_status st, const uint64_t *seqs, size_t n, const char *detail)
{
	cb_seen *s = arg;

	pthread_mutex_lock(&s->mu);
	s->calls++;
	s->thread = pthread_self();
	s->st = st;
	s->seq0 = n > 0 ? seqs[0] : 0;
	snprintf(s->detail, sizeof(s->detail), "%s", detail ? detail : "");
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

static void
seen_wait(cb_seen *s, int calls)
{
	pthread_mutex_lock(&s->mu);
	while (s->calls < calls)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
}

/* The deadline has passed before the first try: the callback still runs on a library thread. */
static void
t_callback_not_on_caller(void)
{
	studio_options *o = studio_options_new();
	studio_producer *p = NULL;
	studio_event ev = { STUDIO_EVENT_INIT, .topic = "t" };
	cb_seen s = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	char err[256];
	bool same;

	options_hooks_set(o, jumpy_clock, NULL, NULL);
	ST_CHECK(studio_producer_new("tcp://127.0.0.1:1", o, &p, err, sizeof(err)) == STUDIO_OK);
	ST_CHECK(studio_publish_async(p, &ev, 1, NULL, 10, 0, seen_cb, &s, err, sizeof(err)) == STUDIO_OK);
	seen_wait(&s, 1);
	same = pthread_equal(s.thread, pthread_self());
	fprintf(stderr, "  callback status %s, on the caller's thread: %s\n", studio_status_str(s.st),
		same ? "yes" : "no");
	ST_CHECK(!same);
	ST_CHECK(s.st == STUDIO_UNAVAILABLE);
	studio_producer_free(p);
	studio_options_free(o);
}

static double
since_s(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

/* max_inflight 1, the one slot taken: STUDIO_NONBLOCK answers FULL at once, not after timeout_ms. */
static void
t_nonblock_full(void)
{
	studio_options *o = studio_options_new();
	studio_producer *p = NULL;
	studio_event ev = { STUDIO_EVENT_INIT, .topic = "t" };
	cb_seen s = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	char err[256];
	struct timespec t0;
	studio_status st;
	double took;

	studio_options_set(o, "max_inflight", "1", NULL, 0);
	ST_CHECK(studio_producer_new("tcp://127.0.0.1:1", o, &p, err, sizeof(err)) == STUDIO_OK);
	ST_CHECK(studio_publish_async(p, &ev, 1, NULL, 600000, 0, seen_cb, &s, err, sizeof(err)) == STUDIO_OK);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	st = studio_publish_async(p, &ev, 1, NULL, 600000, STUDIO_NONBLOCK, seen_cb, &s, err, sizeof(err));
	took = since_s(&t0);
	fprintf(stderr, "  nonblock: %s \"%s\" after %.3f s (timeout 600 s)\n", studio_status_str(st), err, took);
	ST_CHECK(st == STUDIO_FULL);
	ST_CHECK(took < 60.0);
	studio_producer_free(p);
	seen_wait(&s, 1);
	ST_CHECK_EQ_U64(s.calls, 1);
	studio_options_free(o);
}

static void
t_flush_times_out(void)
{
	studio_producer *p = NULL;
	studio_event ev = { STUDIO_EVENT_INIT, .topic = "t" };
	cb_seen s = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	char err[256];

	ST_CHECK(studio_producer_new("tcp://127.0.0.1:1", NULL, &p, err, sizeof(err)) == STUDIO_OK);
	ST_CHECK(studio_producer_flush(p, 0) == STUDIO_OK);
	ST_CHECK(studio_publish_async(p, &ev, 1, NULL, 600000, 0, seen_cb, &s, err, sizeof(err)) == STUDIO_OK);
	ST_CHECK(studio_producer_flush(p, 100) == STUDIO_TIMEOUT);
	studio_producer_free(p);
	seen_wait(&s, 1);
	fprintf(stderr, "  freed with one request out: %s\n", studio_status_str(s.st));
	ST_CHECK(s.st == STUDIO_CLOSED); /* nothing ever left: no writer */
}

typedef struct waiting_caller {
	studio_producer *p;
	studio_status st;
	char detail[512];
} waiting_caller;

static void *
waiting_caller_main(void *arg)
{
	waiting_caller *w = arg;
	studio_event ev = { STUDIO_EVENT_INIT, .topic = "t" };

	/* blocks for a slot: the only one is taken */
	w->st = studio_publish(w->p, &ev, 1, NULL, NULL, 600000, w->detail, sizeof(w->detail));
	return NULL;
}

/*
 * studio_producer_free while another thread waits for a slot: that thread
 * wakes to a live producer and returns CLOSED (ASan and TSan run this: the
 * waiter used to wake on a freed mutex).
 */
static void
t_free_while_waiting_for_slot(void)
{
	studio_options *o = studio_options_new();
	studio_event ev = { STUDIO_EVENT_INIT, .topic = "t" };
	cb_seen s = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	waiting_caller w = { 0 };
	struct timespec t0;
	pthread_t th;
	char err[256];

	studio_options_set(o, "max_inflight", "1", NULL, 0);
	ST_CHECK(studio_producer_new("tcp://127.0.0.1:1", o, &w.p, err, sizeof(err)) == STUDIO_OK);
	ST_CHECK(studio_publish_async(w.p, &ev, 1, NULL, 600000, 0, seen_cb, &s, err, sizeof(err)) == STUDIO_OK);
	pthread_create(&th, NULL, waiting_caller_main, &w);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (producer_slot_waiters(w.p) == 0 && since_s(&t0) < 60) {
		struct timespec ms = { 0, 1000000 };

		nanosleep(&ms, NULL); /* polling a condition, not timing */
	}
	ST_CHECK_EQ_U64(producer_slot_waiters(w.p), 1);
	studio_producer_free(w.p);
	pthread_join(th, NULL);
	fprintf(stderr, "  the waiter got %s \"%s\"\n", studio_status_str(w.st), w.detail);
	ST_CHECK(w.st == STUDIO_CLOSED);
	seen_wait(&s, 1);
	studio_options_free(o);
}

/*
 * Every allocation of a publish (the request, its encoding into a growing
 * st_buf, the writer's decoder run over it, the seqs) fails in turn:
 * each gives STUDIO_NOMEM with nothing started and nothing leaked, until
 * the sweep passes the last allocation and the publish starts.  Before
 * issue 22 the encoder's and decoder's failures aborted the process.
 */
static void
t_nomem_publish(void)
{
	static const char *const about[2] = { "order:1", "customer:7" };
	static char big[6000]; /* a JSON string: the st_buf grows several times */
	studio_event ev[3] = {
		{ STUDIO_EVENT_INIT, .topic = "orders", .about = about, .n_about = 2, .data = "{\"a\": [1, 2]}" },
		{ STUDIO_EVENT_INIT, .topic = "orders", .key = "k1" },
		{ STUDIO_EVENT_INIT, .topic = "orders", .data = big },
	};
	cb_seen s = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	studio_producer *p = NULL;
	char err[256], detail[512], last[512] = "";
	studio_status st = STUDIO_USAGE;
	unsigned long n, failed = 0;

	memset(big, 'x', sizeof(big) - 1);
	big[0] = '"';
	big[sizeof(big) - 2] = '"';
	ST_CHECK(studio_producer_new("tcp://127.0.0.1:1", NULL, &p, err, sizeof(err)) == STUDIO_OK);
	for (n = 1; n < 10000; n++) {
		bool fired;

		detail[0] = '\0';
		st_alloc_fail_arm(n);
		st = studio_publish_async(p, ev, 3, NULL, 600000, 0, seen_cb, &s, detail, sizeof(detail));
		fired = st_alloc_fail_fired();
		st_alloc_fail_arm(0);
		if (!fired)
			break;
		failed++;
		if (st != STUDIO_NOMEM) {
			fprintf(stderr, "  allocation %lu failed: got %s \"%s\", want nomem\n", n,
				studio_status_str(st), detail);
			ST_CHECK(st == STUDIO_NOMEM);
		}
		snprintf(last, sizeof(last), "%s", detail);
		/* the same sweep through the check alone (no request, no seqs) */
		st_alloc_fail_arm(n);
		(void)studio_events_check(ev, 3, detail, sizeof(detail));
		st_alloc_fail_arm(0);
	}
	fprintf(stderr, "  %lu allocations failed in turn (the last: \"%s\"); allocation %lu not reached: %s\n", failed,
		last, n, studio_status_str(st));
	ST_CHECK(failed >= 6); /* op, events, about pool, keys, the buffer's growths, the decoder's, seqs */
	ST_CHECK(st == STUDIO_OK);
	ST_CHECK_EQ_U64(s.calls, 0); /* no callback for a refused call */
	ST_CHECK_EQ_U64(LEAKS_NOW(), 0);
	studio_producer_free(p);
	seen_wait(&s, 1);
	ST_CHECK(s.st == STUDIO_CLOSED);

	/* studio_producer_new and studio_options_set: the same rule */
	{
		studio_options *o = NULL;

		for (n = 1; n < 100; n++) {
			bool fired;

			p = NULL;
			st_alloc_fail_arm(n);
			st = studio_producer_new("tcp://127.0.0.1:1,ipc:///nonexistent/x", NULL, &p, err, sizeof(err));
			fired = st_alloc_fail_fired();
			st_alloc_fail_arm(0);
			if (!fired)
				break;
			if (st != STUDIO_NOMEM || p != NULL) {
				fprintf(stderr, "  studio_producer_new, allocation %lu failed: %s \"%s\"\n", n,
					studio_status_str(st), err);
				ST_CHECK(st == STUDIO_NOMEM && p == NULL);
			}
		}
		fprintf(stderr, "  studio_producer_new: %lu allocations failed in turn, then %s\n", n - 1,
			studio_status_str(st));
		ST_CHECK(n > 3 && st == STUDIO_OK);
		studio_producer_free(p);
		st_alloc_fail_arm(1);
		o = studio_options_new();
		st_alloc_fail_arm(0);
		ST_CHECK(o == NULL);
		o = studio_options_new();
		st_alloc_fail_arm(1);
		ST_CHECK(studio_options_set(o, "tls_ca", "/some/ca.pem", err, sizeof(err)) == STUDIO_NOMEM);
		st_alloc_fail_arm(0);
		studio_options_free(o);
	}
	ST_CHECK_EQ_U64(LEAKS_NOW(), 0);
}

/*
 * A writer answers and the reply's decoding cannot allocate (the seqs):
 * STUDIO_NOMEM, and the detail says the events may be stored and with
 * which key base to publish again (the reply may have said stored).  Then
 * the same exchange with memory: OK with the writer's seq.
 */
static void
t_nomem_reply(void)
{
	studio_event ev = { STUDIO_EVENT_INIT, .topic = "t", .data = "{}" };
	studio_producer *p = NULL;
	nng_socket rep = NNG_SOCKET_INITIALIZER;
	char url[96], err[256], base[STUDIO_KEY_BASE_MAX];
	const uint64_t seq = 42;
	unsigned long n;
	int rv;

	snprintf(url, sizeof(url), "ipc:///tmp/studio-producer-test-%ld.ipc", (long)getpid());
	ST_CHECK((rv = nng_rep0_open(&rep)) == 0);
	ST_CHECK((rv = nng_listen(rep, url, NULL, 0)) == 0);
	if (rv != 0) {
		fprintf(stderr, "  cannot listen on %s: %s\n", url, nng_strerror(rv));
		nng_close(rep);
		return;
	}
	nng_socket_set_ms(rep, NNG_OPT_RECVTIMEO, 60000); /* a deadline to fail by, not a timing */
	ST_CHECK(studio_producer_new(url, NULL, &p, err, sizeof(err)) == STUDIO_OK);
	for (n = 1; n < 10; n++) {
		cb_seen s = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
		nng_msg *m = NULL;
		st_buf b;
		bool fired;

		base[0] = '\0';
		ST_CHECK(studio_publish_async(p, &ev, 1, base, 600000, 0, seen_cb, &s, err, sizeof(err)) == STUDIO_OK);
		if ((rv = nng_recvmsg(rep, &m, 0)) != 0) {
			fprintf(stderr, "  the request never came: %s\n", nng_strerror(rv));
			ST_CHECK(rv == 0);
			break;
		}
		st_buf_init(&b);
		proto_reply_ok_encode(&b, &seq, 1);
		nng_msg_clear(m);
		ST_CHECK(nng_msg_append(m, b.p, b.len) == 0);
		st_buf_fini(&b);
		/* the producer's thread decodes the reply; nothing else of ours allocates meanwhile */
		st_alloc_fail_arm(n);
		ST_CHECK(nng_sendmsg(rep, m, 0) == 0);
		seen_wait(&s, 1);
		fired = st_alloc_fail_fired();
		st_alloc_fail_arm(0);
		fprintf(stderr, "  allocation %lu of the reply %s: %s \"%s\"\n", n, fired ? "failed" : "not reached",
			studio_status_str(s.st), s.detail);
		if (!fired) {
			ST_CHECK(s.st == STUDIO_OK);
			ST_CHECK_EQ_U64(s.seq0, seq);
			break;
		}
		ST_CHECK(s.st == STUDIO_NOMEM);
		ST_CHECK(strncmp(s.detail, "out of memory reading the reply of ", 35) == 0);
		ST_CHECK(strstr(s.detail, "it may be stored: publish again with key base ") != NULL);
		ST_CHECK(strlen(base) > 0 && strstr(s.detail, base) != NULL);
	}
	ST_CHECK(n == 2); /* the reply's one allocation (its seqs), then none */
	ST_CHECK(studio_producer_flush(p, 60000) == STUDIO_OK);
	studio_producer_free(p);
	nng_close(rep);
	unlink(url + strlen("ipc://"));
	ST_CHECK_EQ_U64(LEAKS_NOW(), 0);
}

typedef struct timed_call {
	studio_producer *p;
	bool publish; /* else flush */
	studio_status st;
	atomic_bool done;
} timed_call;

static void *
timed_call_main(void *arg)
{
	timed_call *c = arg;
	studio_event ev = { STUDIO_EVENT_INIT, .topic = "t" };
	char detail[256];

	if (c->publish) /* waits for a slot: the only one is taken */
		c->st = studio_publish(c->p, &ev, 1, NULL, NULL, 300, detail, sizeof(detail));
	else
		c->st = studio_producer_flush(c->p, 300);
	atomic_store(&c->done, true);
	return NULL;
}

/*
 * The library's waits (a slot, a flush) end by their timeout whatever the
 * wall clock does.  This binary's clock_gettime shows CLOCK_REALTIME one
 * hour ahead of the kernel's: a deadline computed from a REALTIME reading
 * is then an hour later, on the clock the kernel measures a REALTIME
 * condition variable's wait by, than meant; exactly what the wall clock
 * stepping back an hour between the reading and the wait does (NTP, an
 * operator; a test cannot step the real clock).  With waits on
 * CLOCK_MONOTONIC (pthread_condattr_setclock and a MONOTONIC deadline) the
 * 300 ms calls return in about 300 ms; with the old REALTIME ones each
 * slept an hour, and this test fails after its 30 s deadline (free then
 * wakes the waiter, so the failure ends cleanly).
 */
static void
t_waits_ignore_wall_clock(void)
{
	studio_options *o = studio_options_new();
	studio_event ev = { STUDIO_EVENT_INIT, .topic = "t" };
	cb_seen s = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	studio_producer *p = NULL;
	char err[256];

	studio_options_set(o, "max_inflight", "1", NULL, 0);
	ST_CHECK(studio_producer_new("tcp://127.0.0.1:1", o, &p, err, sizeof(err)) == STUDIO_OK);
	/* the one slot, taken for 10 minutes: no writer, so nothing ends it or wakes a waiter */
	ST_CHECK(studio_publish_async(p, &ev, 1, NULL, 600000, 0, seen_cb, &s, err, sizeof(err)) == STUDIO_OK);
	atomic_store(&realtime_shift_s, 3600);
	for (int publish = 0; publish <= 1; publish++) {
		timed_call c = { .p = p, .publish = publish, .st = STUDIO_OK };
		struct timespec t0;
		pthread_t th;
		double took;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		pthread_create(&th, NULL, timed_call_main, &c);
		while (!atomic_load(&c.done) && since_s(&t0) < 30) {
			struct timespec ms = { 0, 1000000 };

			nanosleep(&ms, NULL); /* polling a condition, not timing */
		}
		took = since_s(&t0);
		fprintf(stderr, "  %s with the wall clock an hour off: %s after %.3f s\n",
			publish ? "studio_publish(300 ms) waiting for a slot" : "studio_producer_flush(300 ms)",
			atomic_load(&c.done) ? studio_status_str(c.st) : "still waiting", took);
		ST_CHECK(atomic_load(&c.done));
		if (!atomic_load(&c.done)) {
			/* free wakes the waiter (broadcast), which returns CLOSED */
			atomic_store(&realtime_shift_s, 0);
			studio_producer_free(p);
			pthread_join(th, NULL);
			seen_wait(&s, 1);
			studio_options_free(o);
			return;
		}
		pthread_join(th, NULL);
		ST_CHECK(c.st == (publish ? STUDIO_FULL : STUDIO_TIMEOUT));
	}
	atomic_store(&realtime_shift_s, 0);
	studio_producer_free(p);
	seen_wait(&s, 1);
	studio_options_free(o);
}

int
main(void)
{
	ST_RUN(t_version);
	ST_RUN(t_new_refuses);
	ST_RUN(t_no_writer_nothing_sent);
	ST_RUN(t_callback_not_on_caller);
	ST_RUN(t_nonblock_full);
	ST_RUN(t_flush_times_out);
	ST_RUN(t_free_while_waiting_for_slot);
	ST_RUN(t_nomem_publish);
	ST_RUN(t_nomem_reply);
	ST_RUN(t_waits_ignore_wall_clock);
	return st_test_done();
}
