/*
 * sub_test: the edge's sub0 side (sub.h) through its public interface, on
 * a real libevent loop (st_test_loop.h) against real pub0 sockets standing
 * in for writers (tcp:// on 127.0.0.1, a port the kernel picks, and
 * inproc://).  sub does not decode what it receives, so the messages are
 * plain numbered bytes.
 *
 * Covered: messages reach the callback in publish order; a writer that
 * goes away and comes back on the same address is dialed again; several
 * URLs with their pipes counted per URL; a DNS name (localhost, resolved
 * off the loop) dialed by its addresses; a paused intake delivers nothing
 * while sub_msg_waiting reports the queued message, and resuming delivers
 * it all in order; bad URLs and counts refused.
 *
 * Deadlines (WAIT_MS) are wide limits to fail by, never a measurement.
 */
#include "sub.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/thread.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>

#include "st_log.h"
#include "st_test.h"
#include "st_test_loop.h"
#include "st_util.h"

#define WAIT_MS 20000u
#define MAX_GOT 512u

/* What the callback saw. */
typedef struct seen {
	unsigned n;
	char msg[MAX_GOT][16];
	sub *s;
	unsigned pause_after; /* pause the intake from inside the callback at this count (0: never) */
	unsigned in_hand;     /* callbacks during which sub_msg_waiting was true (s set) */
} seen;

/* A stand-in writer: a pub0 socket that counts its subscribers. */
typedef struct writer {
	nng_socket sock;
	atomic_int pipes;
	char url[64];
	bool open;
} writer;

static void
on_msg(void *arg, const void *data, size_t len)
{
	seen *sn = arg;

	if (sn->n < MAX_GOT)
		snprintf(sn->msg[sn->n], sizeof(sn->msg[0]), "%.*s", (int)len, (const char *)data);
	sn->n++;
	if (sn->s != NULL && sub_msg_waiting(sn->s))
		sn->in_hand++;
	if (sn->pause_after != 0 && sn->n == sn->pause_after)
		sub_pause(sn->s, true);
}

static void
writer_pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	writer *w = arg;

	(void)p;
	if (ev == NNG_PIPE_EV_ADD_POST)
		atomic_fetch_add(&w->pipes, 1);
	else if (ev == NNG_PIPE_EV_REM_POST)
		atomic_fetch_sub(&w->pipes, 1);
}

/*
 * Listens on url; "tcp://127.0.0.1:0" picks a port and w->url gets the real
 * one (so the writer can come back on it).  A send buffer wide enough that
 * a test's burst is never dropped by PUB.
 */
static bool
writer_open(writer *w, const char *url)
{
	nng_listener l;
	int rv, port = 0;

	memset(w, 0, sizeof(*w));
	atomic_init(&w->pipes, 0);
	if ((rv = nng_pub0_open(&w->sock)) != 0 || (rv = nng_socket_set_int(w->sock, NNG_OPT_SENDBUF, 1024)) != 0 ||
	    (rv = nng_pipe_notify(w->sock, NNG_PIPE_EV_ADD_POST, writer_pipe_cb, w)) != 0 ||
	    (rv = nng_pipe_notify(w->sock, NNG_PIPE_EV_REM_POST, writer_pipe_cb, w)) != 0 ||
	    (rv = nng_listen(w->sock, url, &l, 0)) != 0) {
		fprintf(stderr, "writer %s: %s\n", url, nng_strerror(rv));
		return false;
	}
	w->open = true;
	if (strncmp(url, "tcp://", 6) == 0 && nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port) == 0)
		snprintf(w->url, sizeof(w->url), "tcp://127.0.0.1:%d", port);
	else
		snprintf(w->url, sizeof(w->url), "%s", url);
	return true;
}

static void
writer_close(writer *w)
{
	if (w->open)
		nng_close(w->sock);
	w->open = false;
}

static void
publish(writer *w, const char *text)
{
	int rv = nng_send(w->sock, (void *)text, strlen(text), 0);

	if (rv != 0)
		fprintf(stderr, "publish %s: %s\n", text, nng_strerror(rv));
	ST_CHECK_EQ_U64(rv, 0);
}

static bool
writer_has_sub(void *arg)
{
	return atomic_load(&((writer *)arg)->pipes) > 0;
}

/* Runs the loop until w sees its subscriber (so a publish reaches it); false after WAIT_MS. */
static bool
wait_writer(struct event_base *base, writer *w)
{
	if (!st_test_loop_until(base, writer_has_sub, w, WAIT_MS)) {
		fprintf(stderr, "%s: no subscriber connected within %u ms\n", w->url, WAIT_MS);
		return false;
	}
	return true;
}

typedef struct until_n {
	const unsigned *v;
	unsigned n;
} until_n;

static bool
reached(void *arg)
{
	until_n *u = arg;

	return *u->v >= u->n;
}

static bool
wait_seen(struct event_base *base, seen *sn, unsigned n)
{
	until_n u = { &sn->n, n };

	if (!st_test_loop_until(base, reached, &u, WAIT_MS)) {
		fprintf(stderr, "received %u messages, waited for %u\n", sn->n, n);
		return false;
	}
	return true;
}

static bool
no_pipes(void *arg)
{
	return sub_pipes(arg) == 0;
}

static bool
has_pipe(void *arg)
{
	return sub_pipes(arg) > 0;
}

static bool
three_pipes(void *arg)
{
	return sub_pipes(arg) >= 3;
}

typedef struct url_of {
	sub *s;
	size_t i;
} url_of;

static bool
url_down(void *arg)
{
	url_of *u = arg;

	return sub_url_pipes(u->s, u->i) == 0;
}

static bool
msg_waiting(void *arg)
{
	return sub_msg_waiting(arg);
}

/* Checks sn->msg[from..from+n) are prefix0, prefix1, ... */
static void
check_sequence(const seen *sn, unsigned from, unsigned n, const char *prefix)
{
	for (unsigned i = 0; i < n && from + i < MAX_GOT; i++) {
		char want[16];

		snprintf(want, sizeof(want), "%s%u", prefix, i);
		if (strcmp(sn->msg[from + i], want) != 0) {
			fprintf(stderr, "message %u: got \"%s\", want \"%s\"\n", from + i, sn->msg[from + i], want);
			ST_CHECK_STR(sn->msg[from + i], want);
			return;
		}
	}
}

/* ---- cases ---- */

/* 200 messages published on a real tcp:// pub0 reach the callback in publish order. */
static void
t_messages_in_order(void)
{
	struct event_base *base = event_base_new();
	struct event *tick = st_test_loop_tick(base);
	seen sn;
	writer w;
	sub *s = NULL;
	const char *url;

	memset(&sn, 0, sizeof(sn));
	if (!writer_open(&w, "tcp://127.0.0.1:0")) {
		ST_CHECK(false);
		goto out;
	}
	url = w.url;
	ST_CHECK(sub_new(base, &url, 1, on_msg, &sn, &s) == ST_OK);
	if (s == NULL)
		goto out;
	ST_CHECK(!sub_paused(s));
	ST_CHECK(wait_writer(base, &w));
	ST_CHECK(st_test_loop_until(base, has_pipe, s, WAIT_MS));
	ST_CHECK_EQ_U64(sub_pipes(s), 1);
	ST_CHECK_EQ_U64(sub_url_pipes(s, 0), 1);
	for (unsigned i = 0; i < 200; i++) {
		char m[16];
		snprintf(m, sizeof(m), "m%u", i);
		publish(&w, m);
	}
	ST_CHECK(wait_seen(base, &sn, 200));
	ST_CHECK_EQ_U64(sn.n, 200);
	check_sequence(&sn, 0, 200, "m");
	ST_CHECK_EQ_U64(sub_received(s), 200);
	ST_CHECK(!sub_msg_waiting(s));
out:
	sub_free(s);
	writer_close(&w);
	event_free(tick);
	event_base_free(base);
}

/* The writer closes (sub sees its pipe go) and listens again on the same port: sub dials it again by itself. */
static void
t_writer_back_redialed(void)
{
	struct event_base *base = event_base_new();
	struct event *tick = st_test_loop_tick(base);
	seen sn;
	writer w;
	sub *s = NULL;
	char url_buf[64];
	const char *url = url_buf;

	memset(&sn, 0, sizeof(sn));
	if (!writer_open(&w, "tcp://127.0.0.1:0")) {
		ST_CHECK(false);
		goto out;
	}
	snprintf(url_buf, sizeof(url_buf), "%s", w.url);
	ST_CHECK(sub_new(base, &url, 1, on_msg, &sn, &s) == ST_OK);
	if (s == NULL)
		goto out;
	ST_CHECK(wait_writer(base, &w));
	publish(&w, "a0");
	ST_CHECK(wait_seen(base, &sn, 1));

	writer_close(&w);
	ST_CHECK(st_test_loop_until(base, no_pipes, s, WAIT_MS));
	ST_CHECK_EQ_U64(sub_pipes(s), 0);
	if (!writer_open(&w, url_buf)) {
		ST_CHECK(false);
		goto out;
	}
	ST_CHECK_STR(w.url, url_buf);
	ST_CHECK(st_test_loop_until(base, has_pipe, s, WAIT_MS));
	ST_CHECK_EQ_U64(sub_url_pipes(s, 0), 1);
	ST_CHECK(wait_writer(base, &w));
	publish(&w, "a1");
	publish(&w, "a2");
	ST_CHECK(wait_seen(base, &sn, 3));
	check_sequence(&sn, 0, 3, "a");
out:
	sub_free(s);
	writer_close(&w);
	event_free(tick);
	event_base_free(base);
}

/* Three URLs (two tcp://, one inproc://): each dialed and counted on its own; every writer's messages arrive. */
static void
t_several_urls(void)
{
	struct event_base *base = event_base_new();
	struct event *tick = st_test_loop_tick(base);
	seen sn;
	writer w[3];
	sub *s = NULL;
	const char *urls[3];
	unsigned per[3] = { 0, 0, 0 };

	memset(&sn, 0, sizeof(sn));
	memset(w, 0, sizeof(w));
	if (!writer_open(&w[0], "tcp://127.0.0.1:0") || !writer_open(&w[1], "tcp://127.0.0.1:0") ||
	    !writer_open(&w[2], "inproc://sub_test_three")) {
		ST_CHECK(false);
		goto out;
	}
	for (int i = 0; i < 3; i++)
		urls[i] = w[i].url;
	ST_CHECK(sub_new(base, urls, 3, on_msg, &sn, &s) == ST_OK);
	if (s == NULL)
		goto out;
	for (int i = 0; i < 3; i++)
		ST_CHECK(wait_writer(base, &w[i]));
	/* each writer's side of a connection can come up before sub's own notification */
	ST_CHECK(st_test_loop_until(base, three_pipes, s, WAIT_MS));
	for (size_t i = 0; i < 3; i++)
		ST_CHECK_EQ_U64(sub_url_pipes(s, i), 1);
	ST_CHECK_EQ_U64(sub_pipes(s), 3);
	ST_CHECK_EQ_U64(sub_url_pipes(s, 3), 0); /* no such URL */
	for (unsigned k = 0; k < 10; k++)
		for (int i = 0; i < 3; i++) {
			char m[16];
			snprintf(m, sizeof(m), "%c%u", 'x' + i, k);
			publish(&w[i], m);
		}
	ST_CHECK(wait_seen(base, &sn, 30));
	ST_CHECK_EQ_U64(sn.n, 30);
	/* per writer, in its own order (writers interleave freely) */
	for (unsigned j = 0; j < sn.n && j < MAX_GOT; j++) {
		int i = sn.msg[j][0] - 'x';
		char want[16];

		if (i < 0 || i > 2) {
			fprintf(stderr, "unexpected message \"%s\"\n", sn.msg[j]);
			ST_CHECK(false);
			continue;
		}
		snprintf(want, sizeof(want), "%c%u", 'x' + i, per[i]++);
		ST_CHECK_STR(sn.msg[j], want);
	}
	/* one writer gone: only its URL loses its pipe */
	writer_close(&w[1]);
	{
		url_of u = { s, 1 };
		ST_CHECK(st_test_loop_until(base, url_down, &u, WAIT_MS));
	}
	ST_CHECK_EQ_U64(sub_url_pipes(s, 1), 0);
	ST_CHECK_EQ_U64(sub_url_pipes(s, 0), 1);
	ST_CHECK_EQ_U64(sub_url_pipes(s, 2), 1);
out:
	sub_free(s);
	for (int i = 0; i < 3; i++)
		writer_close(&w[i]);
	event_free(tick);
	event_base_free(base);
}

/* tcp://localhost:PORT: the name is resolved off the loop and its address dialed. */
static void
t_dns_name(void)
{
	struct event_base *base = event_base_new();
	struct event *tick = st_test_loop_tick(base);
	seen sn;
	writer w;
	sub *s = NULL;
	char url_buf[64];
	const char *url = url_buf;

	memset(&sn, 0, sizeof(sn));
	if (!writer_open(&w, "tcp://127.0.0.1:0")) {
		ST_CHECK(false);
		goto out;
	}
	snprintf(url_buf, sizeof(url_buf), "tcp://localhost:%s", strrchr(w.url, ':') + 1);
	ST_CHECK(sub_new(base, &url, 1, on_msg, &sn, &s) == ST_OK);
	if (s == NULL)
		goto out;
	ST_CHECK(wait_writer(base, &w));
	ST_CHECK(st_test_loop_until(base, has_pipe, s, WAIT_MS));
	ST_CHECK_EQ_U64(sub_url_pipes(s, 0), 1);
	publish(&w, "d0");
	ST_CHECK(wait_seen(base, &sn, 1));
	check_sequence(&sn, 0, 1, "d");
out:
	sub_free(s);
	writer_close(&w);
	event_free(tick);
	event_base_free(base);
}

/*
 * Paused (by the test, then from inside the callback): nothing delivered,
 * sub_msg_waiting true while a message is queued in nng; resumed: the rest
 * arrives in order and nothing is left waiting.  Inside the callback the
 * message in hand counts as waiting, the last one too (the edge's
 * readiness polls from another thread between the take and its record).
 */
static void
t_pause_resume(void)
{
	struct event_base *base = event_base_new();
	struct event *tick = st_test_loop_tick(base);
	seen sn;
	writer w;
	sub *s = NULL;
	const char *url = "inproc://sub_test_pause";

	memset(&sn, 0, sizeof(sn));
	if (!writer_open(&w, url)) {
		ST_CHECK(false);
		goto out;
	}
	ST_CHECK(sub_new(base, &url, 1, on_msg, &sn, &s) == ST_OK);
	if (s == NULL)
		goto out;
	sn.s = s;
	ST_CHECK(wait_writer(base, &w));
	ST_CHECK(!sub_msg_waiting(s));
	sub_pause(s, true);
	sub_pause(s, true); /* idempotent */
	ST_CHECK(sub_paused(s));
	for (unsigned i = 0; i < 5; i++) {
		char m[16];
		snprintf(m, sizeof(m), "p%u", i);
		publish(&w, m);
	}
	ST_CHECK(st_test_loop_until(base, msg_waiting, s, WAIT_MS));
	st_test_loop_for(base, 100); /* loop turns with a message queued: still nothing delivered */
	ST_CHECK_EQ_U64(sn.n, 0);
	ST_CHECK(sub_msg_waiting(s));

	/* resumed, the callback pauses again after the second message */
	sn.pause_after = 2;
	sub_pause(s, false);
	ST_CHECK(!sub_paused(s));
	ST_CHECK(wait_seen(base, &sn, 2));
	ST_CHECK(sub_paused(s));
	st_test_loop_for(base, 100);
	ST_CHECK_EQ_U64(sn.n, 2);
	ST_CHECK(sub_msg_waiting(s));

	sn.pause_after = 0;
	sub_pause(s, false);
	sub_pause(s, false);
	ST_CHECK(wait_seen(base, &sn, 5));
	ST_CHECK_EQ_U64(sn.n, 5);
	check_sequence(&sn, 0, 5, "p");
	ST_CHECK_EQ_U64(sn.in_hand, 5);
	ST_CHECK(!sub_msg_waiting(s));
	ST_CHECK_EQ_U64(sub_received(s), 5);
out:
	sub_free(s);
	writer_close(&w);
	event_free(tick);
	event_base_free(base);
}

/* Counts out of 1..SUB_MAX_URLS and URLs sub cannot dial: ST_EINVAL, nothing returned. */
static void
t_bad_urls(void)
{
	struct event_base *base = event_base_new();
	seen sn;
	sub *s = NULL;
	const char *one[1];
	const char *many[SUB_MAX_URLS + 1];
	char long_url[SUB_URL_MAX + 16];
	static const char *const bad[] = {
		"",                /* empty */
		"127.0.0.1:7000",  /* no scheme */
		"tcp://127.0.0.1", /* no port */
		"tcp://:7000",     /* no host */
		"tcp://[::1]7000", /* bracket not followed by a port */
		"nosuch://x:1",    /* a scheme nng does not know */
	};

	memset(&sn, 0, sizeof(sn));
	one[0] = "tcp://127.0.0.1:1";
	ST_CHECK(sub_new(base, one, 0, on_msg, &sn, &s) == ST_EINVAL);
	for (size_t i = 0; i < ST_ARRAY_LEN(many); i++)
		many[i] = "tcp://127.0.0.1:1";
	ST_CHECK(sub_new(base, many, SUB_MAX_URLS + 1, on_msg, &sn, &s) == ST_EINVAL);
	for (size_t i = 0; i < ST_ARRAY_LEN(bad); i++) {
		st_err e;

		one[0] = bad[i];
		e = sub_new(base, one, 1, on_msg, &sn, &s);
		if (e != ST_EINVAL)
			fprintf(stderr, "\"%s\": got %s, want EINVAL\n", bad[i], st_err_str(e));
		ST_CHECK(e == ST_EINVAL);
	}
	memset(long_url, 'a', sizeof(long_url) - 1);
	memcpy(long_url, "tcp://", 6);
	long_url[sizeof(long_url) - 1] = '\0';
	one[0] = long_url;
	ST_CHECK(sub_new(base, one, 1, on_msg, &sn, &s) == ST_EINVAL);
	ST_CHECK(s == NULL);
	/* a writer that is down at start is fine: it is retried (NNG_FLAG_NONBLOCK) */
	one[0] = "tcp://127.0.0.1:1";
	ST_CHECK(sub_new(base, one, 1, on_msg, &sn, &s) == ST_OK);
	ST_CHECK_EQ_U64(s != NULL ? sub_pipes(s) : 1, 0);
	sub_free(s);
	sub_free(NULL);
	event_base_free(base);
}

int
main(void)
{
	st_log_init("sub_test");
	evthread_use_pthreads();
	ST_RUN(t_messages_in_order);
	ST_RUN(t_writer_back_redialed);
	ST_RUN(t_several_urls);
	ST_RUN(t_dns_name);
	ST_RUN(t_pause_resume);
	ST_RUN(t_bad_urls);
	nng_fini();
	return st_test_done();
}
