/*
 * ingestflood: N producers, each its own nng req0 socket (its own
 * connection), send the same request to one writer at once, and each waits
 * for its answer.  The memory test (test_ingest_memory.py) uses it to put N
 * large requests on the writer's ingest socket at the same moment.
 *
 * Usage: ingestflood [--producers N] [--timeout-ms N] [--sources N] URL < REQUEST
 *   --producers N   sockets (default 200, at most 1000)
 *   --sources N     producer k connects from 127.0.0.(2 + k % N) (a tcp://
 *                   URL on loopback; default: the system's choice), so that
 *                   the writer's per-address cap is not what is met
 *   --timeout-ms N  how long each producer waits for its answer (default 120000)
 * Every socket is dialed first; then every request is sent without waiting,
 * and the answers are counted by their error code.  REQ resending is off
 * (a resend would be a second request: not what is measured).  Prints one
 * JSON line:
 *   {"producers":N,"ok":N,"busy":N,"invalid":N,"unavailable":N,"other":N,
 *    "no_reply":N,"first_ms":N,"last_ms":N}
 * Exit codes: 0 every producer was answered; 1 some were not; 2 bad usage;
 * 3 nng error while setting up; 4 bad input.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <msgpack.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#define FLOOD_MAX_INPUT (64u * 1024 * 1024)

enum { R_PENDING, R_OK, R_BUSY, R_INVALID, R_UNAVAILABLE, R_OTHER, R_NONE };

typedef struct producer {
	nng_socket sock;
	nng_aio *aio;
	int sending;
	int result;
	int err;         /* the nng error of a producer left without an answer */
	int err_in_send; /* that error ended the send, not the receive */
	double at_ms;
} producer;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int remaining;
static struct timespec t0;

static double
ms_since_start(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0.tv_sec) * 1000.0 + (double)(t.tv_nsec - t0.tv_nsec) / 1e6;
}

/* The "error" of a reply map, or R_OK for {"ok":true}. */
static int
classify(const void *p, size_t n)
{
	msgpack_unpacked u;
	size_t off = 0;
	int res = R_OTHER;

	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, p, n, &off) == MSGPACK_UNPACK_SUCCESS && u.data.type == MSGPACK_OBJECT_MAP) {
		for (uint32_t i = 0; i < u.data.via.map.size; i++) {
			const msgpack_object *k = &u.data.via.map.ptr[i].key, *v = &u.data.via.map.ptr[i].val;
			if (k->type != MSGPACK_OBJECT_STR)
				continue;
			if (k->via.str.size == 2 && memcmp(k->via.str.ptr, "ok", 2) == 0 &&
			    v->type == MSGPACK_OBJECT_BOOLEAN && v->via.boolean) {
				res = R_OK;
				break;
			}
			if (k->via.str.size == 5 && memcmp(k->via.str.ptr, "error", 5) == 0 &&
			    v->type == MSGPACK_OBJECT_STR) {
				const char *e = v->via.str.ptr;
				size_t el = v->via.str.size;
				res = el == 4 && memcmp(e, "busy", 4) == 0            ? R_BUSY
				      : el == 7 && memcmp(e, "invalid", 7) == 0       ? R_INVALID
				      : el == 11 && memcmp(e, "unavailable", 11) == 0 ? R_UNAVAILABLE
										      : R_OTHER;
			}
		}
	}
	msgpack_unpacked_destroy(&u);
	return res;
}

static void
done(producer *p, int result)
{
	pthread_mutex_lock(&mu);
	p->result = result;
	p->at_ms = ms_since_start();
	if (--remaining == 0)
		pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
}

static void
cb(void *arg)
{
	producer *p = arg;
	int rv = nng_aio_result(p->aio);
	nng_msg *m;

	if (p->sending) {
		if (rv != 0) {
			nng_msg_free(nng_aio_get_msg(p->aio));
			p->err = rv;
			p->err_in_send = 1;
			done(p, R_NONE);
			return;
		}
		p->sending = 0;
		nng_recv_aio(p->sock, p->aio);
		return;
	}
	if (rv != 0) {
		p->err = rv;
		done(p, R_NONE);
		return;
	}
	m = nng_aio_get_msg(p->aio);
	done(p, classify(nng_msg_body(m), nng_msg_len(m)));
	nng_msg_free(m);
}

static int
read_stdin(unsigned char **out, size_t *len)
{
	size_t cap = 1 << 20, n = 0, r;
	unsigned char *b = malloc(cap), *nb;

	if (b == NULL)
		return -1;
	while ((r = fread(b + n, 1, cap - n, stdin)) > 0) {
		n += r;
		if (n == cap) {
			if (cap > FLOOD_MAX_INPUT || (nb = realloc(b, cap * 2)) == NULL) {
				free(b);
				return -1;
			}
			b = nb;
			cap *= 2;
		}
	}
	if (ferror(stdin) || n > FLOOD_MAX_INPUT) {
		free(b);
		return -1;
	}
	*out = b;
	*len = n;
	return 0;
}

static void
usage(void)
{
	fprintf(stderr, "usage: ingestflood [--producers N] [--timeout-ms N] [--sources N] URL < REQUEST\n");
	exit(2);
}

/*
 * Dials url, from 127.0.0.(2 + k % sources) when sources > 0, with flags
 * (0: blocking, connected when it returns; NNG_FLAG_NONBLOCK).
 */
static int
dial_once(nng_socket s, const char *url, long sources, long k, int flags)
{
	nng_dialer d;
	nng_sockaddr sa;
	int rv;

	if (sources == 0)
		return nng_dial(s, url, NULL, flags);
	memset(&sa, 0, sizeof(sa));
	sa.s_in.sa_family = NNG_AF_INET;
	sa.s_in.sa_addr = htonl(0x7f000002u + (uint32_t)(k % sources));
	if ((rv = nng_dialer_create(&d, s, url)) != 0)
		return rv;
	if ((rv = nng_dialer_set_addr(d, NNG_OPT_LOCADDR, &sa)) != 0 || (rv = nng_dialer_start(d, flags)) != 0)
		nng_dialer_close(d);
	return rv;
}

/*
 * Dials, blocking; a connection the writer closes as it arrives (past a
 * cap) can fail that first dial, and then the producer redials in the
 * background as a real one does (it stays unanswered unless it gets in).
 */
static int
dial(nng_socket s, const char *url, long sources, long k)
{
	int rv = dial_once(s, url, sources, k, 0);

	return rv == 0 ? 0 : dial_once(s, url, sources, k, NNG_FLAG_NONBLOCK);
}

static long
parse_long(const char *s, long lo, long hi)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || *end != '\0' || end == s || v < lo || v > hi)
		usage();
	return v;
}

int
main(int argc, char **argv)
{
	long n = 200, timeout_ms = 120000, sources = 0;
	int i = 1, rv, counts[R_NONE + 1] = { 0 };
	unsigned char *payload = NULL;
	size_t len = 0;
	producer *ps;
	double first = -1, last = 0;
	struct timespec deadline;

	for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
		if (strcmp(argv[i], "--producers") == 0 && i + 1 < argc)
			n = parse_long(argv[++i], 1, 1000);
		else if (strcmp(argv[i], "--timeout-ms") == 0 && i + 1 < argc)
			timeout_ms = parse_long(argv[++i], 1, 3600000);
		else if (strcmp(argv[i], "--sources") == 0 && i + 1 < argc)
			sources = parse_long(argv[++i], 1, 250);
		else
			usage();
	}
	if (i + 1 != argc)
		usage();
	if (read_stdin(&payload, &len) != 0) {
		fprintf(stderr, "ingestflood: bad input (stdin over 64 MiB?)\n");
		return 4;
	}
	if ((ps = calloc((size_t)n, sizeof(*ps))) == NULL)
		return 4;
	/*
	 * One copy per producer, all made before the first dial: the sends then
	 * go out together, and no connection waits idle while copies are made
	 * (the writer closes a connection that sends no request within 10 s).
	 */
	for (long k = 0; k < n; k++) {
		producer *p = &ps[k];
		nng_msg *m = NULL;
		if ((rv = nng_req0_open(&p->sock)) != 0 ||
		    (rv = nng_socket_set_ms(p->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE)) != 0 ||
		    (rv = nng_socket_set_ms(p->sock, NNG_OPT_RECONNMINT, 100)) != 0 ||
		    (rv = nng_aio_alloc(&p->aio, cb, p)) != 0 || (rv = nng_msg_alloc(&m, len)) != 0) {
			fprintf(stderr, "ingestflood: producer %ld: %s\n", k, nng_strerror(rv));
			return 3;
		}
		memcpy(nng_msg_body(m), payload, len);
		nng_aio_set_msg(p->aio, m);
		nng_aio_set_timeout(p->aio, (nng_duration)timeout_ms);
		p->result = R_PENDING;
	}
	for (long k = 0; k < n; k++) {
		if ((rv = dial(ps[k].sock, argv[i], sources, k)) != 0) {
			fprintf(stderr, "ingestflood: producer %ld: %s\n", k, nng_strerror(rv));
			return 3;
		}
		ps[k].sending = 1;
	}
	free(payload);
	remaining = (int)n;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long k = 0; k < n; k++)
		nng_send_aio(ps[k].sock, ps[k].aio);

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += timeout_ms / 1000 + 30;
	pthread_mutex_lock(&mu);
	while (remaining > 0)
		if (pthread_cond_timedwait(&cv, &mu, &deadline) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&mu);
	for (long k = 0; k < n; k++) {
		nng_aio_stop(ps[k].aio);
		nng_close(ps[k].sock);
	}
	for (long k = 0; k < n; k++) {
		int r = ps[k].result == R_PENDING ? R_NONE : ps[k].result;
		counts[r]++;
		/* why, on stderr: the test prints it when a producer is left without an answer */
		if (r == R_NONE)
			fprintf(stderr, "ingestflood: producer %ld: no answer: %s%s after %.0f ms\n", k,
				ps[k].err == 0 ? "still waiting" : nng_strerror(ps[k].err),
				ps[k].err == 0      ? ""
				: ps[k].err_in_send ? " (send)"
						    : " (receive)",
				ps[k].at_ms);
		if (r != R_NONE) {
			if (first < 0 || ps[k].at_ms < first)
				first = ps[k].at_ms;
			if (ps[k].at_ms > last)
				last = ps[k].at_ms;
		}
		nng_aio_free(ps[k].aio);
	}
	printf("{\"producers\":%ld,\"ok\":%d,\"busy\":%d,\"invalid\":%d,\"unavailable\":%d,\"other\":%d,"
	       "\"no_reply\":%d,\"first_ms\":%.0f,\"last_ms\":%.0f}\n",
	       n, counts[R_OK], counts[R_BUSY], counts[R_INVALID], counts[R_UNAVAILABLE], counts[R_OTHER],
	       counts[R_NONE], first < 0 ? 0 : first, last);
	/* the counts are out even if a sanitizer ends the process at exit without flushing stdio */
	fflush(stdout);
	free(ps);
	/* closed sockets' dialers and pipes are reaped asynchronously: let nng finish (LeakSanitizer) */
	nng_fini();
	return counts[R_NONE] == 0 ? 0 : 1;
}
