/*
 * Unit tests for st_tlsstat with real nng listeners and refusals reported
 * as st_tls_engine reports them.  The failures are
 * made on plain tcp:// listeners (nng counts a connection lost before it
 * is a pipe the same way for every transport): a bad SP header ("proto",
 * counted) and a peer that closes at once ("other", not counted: nng
 * counts every ended pipe there too).  Each failure has a listener of its
 * own: after either error nng does not wait for connections for 100 ms,
 * and a failure in that pause is not counted (st_tlsstat.h).  The TLS
 * cases are tests/integration/test_tls_roles.py's.
 */
#include "st_tlsstat.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nng/protocol/pair0/pair.h>
#include <nng/supplemental/util/platform.h>

#include "st_log.h"
#include "st_test.h"
#include "st_test_loop.h"
#include "st_test_metric.h"

typedef struct lsn {
	nng_socket sock;
	nng_listener l;
	int port;
} lsn;

static lsn
lsn_open(void)
{
	lsn x = { 0 };

	ST_CHECK(nng_pair0_open(&x.sock) == 0);
	ST_CHECK(nng_listener_create(&x.l, x.sock, "tcp://127.0.0.1:0") == 0);
	ST_CHECK(nng_listener_start(x.l, 0) == 0);
	ST_CHECK(nng_listener_get_int(x.l, NNG_OPT_TCP_BOUND_PORT, &x.port) == 0);
	return x;
}

/* A TCP connection to port that sends hdr (len bytes, 0: none) and closes. */
static void
peer(int port, const char *hdr, size_t len)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	char buf[8];

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ST_CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
	if (len > 0) {
		ST_CHECK(write(fd, hdr, len) == (ssize_t)len);
		(void)read(fd, buf, sizeof(buf)); /* nng's header, then its close */
	}
	close(fd);
}

/* The value of name{listener="label"} in m's text (-1: absent). */
static long
metric(st_metrics *m, const char *name, const char *label)
{
	char key[160];

	snprintf(key, sizeof(key), "%s{listener=\"%s\"}", name, label);
	return (long)st_test_metric(m, key);
}

typedef struct want {
	st_tlsstat *s;
	st_metrics *m;
	const char *label;
	long n;
} want;

static bool
polled_reaches(void *arg)
{
	want *w = arg;

	st_tlsstat_poll(w->s);
	if (metric(w->m, "t_failures_total", w->label) >= w->n)
		return true;
	nng_msleep(10);
	return false;
}

static const char *const labels[] = { "ingest", "control" };

/*
 * Bad headers counted under the listeners' label (two listeners, one
 * label), a peer that only closes is not, the other label stays 0, a poll
 * adds nothing twice.  The control listener is nng's first: nng 1.5.2's
 * nng_stat_find_listener would give its statistics for every listener.
 */
static void
t_counts_by_label(void)
{
	struct event_base *base = event_base_new();
	struct event *tick = st_test_loop_tick(base);
	st_metrics *m = st_metrics_new();
	lsn c = lsn_open(), a = lsn_open(), b = lsn_open();
	st_tlsstat *s;
	want w;

	st_tlsstat_track("control", c.l);
	st_tlsstat_track("ingest", a.l);
	st_tlsstat_track("ingest", b.l);
	s = st_tlsstat_new(base, m, "t_failures_total", labels, 2, 60000);
	w = (want){ .s = s, .m = m, .label = "ingest", .n = 1 };
	ST_CHECK_EQ_U64(metric(m, "t_failures_total", "ingest"), 0);
	peer(a.port, "\0XY\0\0\0\0\0", 8); /* not "\0SP\0": nng's proto error */
	ST_CHECK(st_test_loop_until(base, polled_reaches, &w, 10000));
	peer(c.port, NULL, 0); /* closed before its header: nng's "other", like a pipe's end */
	peer(b.port, "\0XY\0\0\0\0\0", 8);
	w.n = 2;
	ST_CHECK(st_test_loop_until(base, polled_reaches, &w, 10000));
	st_tlsstat_poll(s);
	ST_CHECK_EQ_U64(metric(m, "t_failures_total", "ingest"), 2);
	ST_CHECK_EQ_U64(metric(m, "t_failures_total", "control"), 0);
	st_tlsstat_free(s);
	nng_close(a.sock);
	nng_close(b.sock);
	nng_close(c.sock);
	event_free(tick);
	st_metrics_free(m);
	event_base_free(base);
}

/* Closed listeners are forgotten when polled, so their slots serve new ones. */
static void
t_closed_listeners_free_their_slot(void)
{
	struct event_base *base = event_base_new();
	struct event *tick = st_test_loop_tick(base);
	st_metrics *m = st_metrics_new();
	st_tlsstat *s = st_tlsstat_new(base, m, "t_failures_total", labels, 2, 60000);
	lsn b;
	want w = { .s = s, .m = m, .label = "control", .n = 1 };

	for (int i = 0; i < ST_TLSSTAT_MAX; i++) {
		lsn x = lsn_open();

		st_tlsstat_track("ingest", x.l);
		nng_close(x.sock);
	}
	st_tlsstat_poll(s);
	b = lsn_open();
	st_tlsstat_track("control", b.l);
	peer(b.port, "\0XY\0\0\0\0\0", 8);
	ST_CHECK(st_test_loop_until(base, polled_reaches, &w, 10000));
	ST_CHECK_EQ_U64(metric(m, "t_failures_total", "ingest"), 0);
	st_tlsstat_free(s);
	nng_close(b.sock);
	event_free(tick);
	st_metrics_free(m);
	event_base_free(base);
}

/*
 * The timer logs one line per listener whose count rose, with the kinds and the latest refusal's
 * reason, and none when nothing rose; a dialer's refusal is logged at once, once per interval.
 */
static void
t_summary_line(void)
{
	struct event_base *base = event_base_new();
	struct event *tick = st_test_loop_tick(base);
	st_metrics *m = st_metrics_new();
	lsn a = lsn_open(), b = lsn_open();
	st_tlsstat *s;
	FILE *log = tmpfile();
	int saved = dup(2);
	char text[4096] = "";
	unsigned long logged = 0;
	size_t n;

	st_tlsstat_track("control", a.l);
	st_tlsstat_track("control", b.l);
	s = st_tlsstat_new(base, m, "t_failures_total", labels, 2, 300);
	peer(a.port, "\0XY\0\0\0\0\0", 8);
	peer(b.port, "\0XY\0\0\0\0\0", 8);
	fflush(stderr);
	dup2(fileno(log), 2);
	/* the engine's refusals (st_tls_engine's hook): two of control's, one of a label not counted here */
	st_tlsstat_refused("control", "first reason");
	st_tlsstat_refused("control", "certificate refused: The certificate has been revoked (is on a CRL)");
	st_tlsstat_refused("publish", "not counted");
	/* dialers: the first is written at once, the second within the interval is not */
	st_tlsstat_refused(NULL, "server localhost: dial refused");
	st_tlsstat_refused(NULL, "server localhost: not written");
	st_test_loop_for(base, 2000); /* about six intervals: the failures land in one or two of them */
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	rewind(log);
	n = fread(text, 1, sizeof(text) - 1, log);
	text[n] = '\0';
	fclose(log);
	/* every failure in exactly one line: the lines' counts add up to 2 bad SP headers + 2 refusals */
	for (const char *p = text; (p = strstr(p, "tls: control listener: ")) != NULL; p++)
		logged += strtoul(p + strlen("tls: control listener: "), NULL, 10);
	ST_CHECK_EQ_U64(logged, 4);
	/* in one line or two, the latest refusal's reason in the line that counts it */
	ST_CHECK(strstr(text, "failed handshakes in the last 1 s (") != NULL);
	ST_CHECK(strstr(text, " refused, the last: certificate refused: The certificate has been revoked (is on a "
			      "CRL); 0 timed out; ") != NULL);
	ST_CHECK(strstr(text, " bad SP header)") != NULL);
	ST_CHECK(strstr(text, "tls: ingest listener") == NULL);
	ST_CHECK(strstr(text, "not counted") == NULL);
	ST_CHECK(strstr(text, "tls: handshake failed: server localhost: dial refused (0 more failed dials") != NULL);
	ST_CHECK(strstr(text, "not written") == NULL);
	ST_CHECK_EQ_U64(metric(m, "t_failures_total", "control"), 4);
	if (logged != 4)
		fprintf(stderr, "log: %s\n", text);
	st_tlsstat_free(s);
	nng_close(a.sock);
	nng_close(b.sock);
	event_free(tick);
	st_metrics_free(m);
	event_base_free(base);
}

int
main(void)
{
	st_log_init("st_tlsstat_test");
	ST_RUN(t_counts_by_label);
	ST_RUN(t_closed_listeners_free_their_slot);
	ST_RUN(t_summary_line);
	return st_test_done();
}
