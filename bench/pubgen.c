/*
 * pubgen: the benchmark's publisher.  Sends events at a fixed rate (or as
 * fast as the server takes them) either to broker-writer (nng req0, the
 * ingest protocol of proto/README.md) or to nchan's publish endpoint (HTTP
 * POST on one keep-alive connection).  Every event's data is the JSON text
 * {"n":N,"t":T,"p":"..."}: n a unique event number, t CLOCK_MONOTONIC
 * nanoseconds when the request was built (loadgen turns it into delivery
 * latency), p padding to the requested size.
 *
 * DESIGN.  nng mode: K request contexts (nng_ctx on one req0 socket), each
 * with its own aio; the main thread paces, and whenever a context is free it
 * sends every event due so far as one batch request (at most --batch), so
 * a writer that replies only after its flush (once per flush interval) is
 * kept fed without losing the rate.  Replies are decoded in the aio callback
 * on nng's threads; counters are atomics; the free list is under a mutex.
 * `busy` replies are counted, not retried (the rate is what was committed).
 * HTTP mode: one blocking keep-alive socket, one POST at a time, paced with
 * absolute sleeps.  A report (JSON, one line) goes to stdout at the end.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <msgpack.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include "clock.h"

#define MAX_CTX 256

static struct {
	const char *mode;
	const char *url;
	const char *path;
	const char *topic;
	double rate;
	double duration;
	uint64_t total;
	unsigned batch;
	unsigned inflight;
	unsigned pad;
	uint64_t n_base;
} opt;

struct work {
	nng_aio *aio;
	nng_ctx ctx;
	int sending;
	unsigned events;
	struct work *next;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct work *free_list;
static unsigned n_busy_ctx;
static _Atomic uint64_t c_ok, c_busy, c_err, c_reqs, t_last_reply;
static volatile sig_atomic_t stop_flag;

static void
on_stop(int sig)
{
	(void)sig;
	stop_flag = 1;
}

static void
usage(void)
{
	fprintf(stderr,
		"usage: pubgen --mode nng --url tcp://H:P --topic T [--rate EV_PER_S|0] [--duration S]\n"
		"              [--total N] [--batch B] [--inflight K] [--pad BYTES] [--n-base N]\n"
		"       pubgen --mode http --url 127.0.0.1:PORT --path '/pub?id=T' [--rate ..] [--duration ..]\n");
	exit(2);
}

static int
data_text(char *buf, size_t cap, uint64_t n, uint64_t t)
{
	static char padding[4096];

	if (padding[0] == '\0')
		memset(padding, 'x', sizeof(padding) - 1);
	return snprintf(buf, cap, "{\"n\":%" PRIu64 ",\"t\":%" PRIu64 ",\"p\":\"%.*s\"}", n, t,
			(int)(opt.pad < sizeof(padding) - 1 ? opt.pad : sizeof(padding) - 1), padding);
}

static void
reply_count(nng_msg *m, unsigned events)
{
	msgpack_unpacked u;
	size_t off = 0;
	int ok = 0, busy = 0;
	uint64_t seqs = 0;

	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, nng_msg_body(m), nng_msg_len(m), &off) == MSGPACK_UNPACK_SUCCESS &&
	    u.data.type == MSGPACK_OBJECT_MAP) {
		for (uint32_t i = 0; i < u.data.via.map.size; i++) {
			msgpack_object *k = &u.data.via.map.ptr[i].key, *v = &u.data.via.map.ptr[i].val;

			if (k->type != MSGPACK_OBJECT_STR)
				continue;
			if (k->via.str.size == 2 && memcmp(k->via.str.ptr, "ok", 2) == 0 &&
			    v->type == MSGPACK_OBJECT_BOOLEAN)
				ok = v->via.boolean;
			else if (k->via.str.size == 4 && memcmp(k->via.str.ptr, "seqs", 4) == 0 &&
				 v->type == MSGPACK_OBJECT_ARRAY)
				seqs = v->via.array.size;
			else if (k->via.str.size == 5 && memcmp(k->via.str.ptr, "error", 5) == 0 &&
				 v->type == MSGPACK_OBJECT_STR && v->via.str.size == 4 &&
				 memcmp(v->via.str.ptr, "busy", 4) == 0)
				busy = 1;
		}
	}
	msgpack_unpacked_destroy(&u);
	if (ok && seqs == events)
		atomic_fetch_add(&c_ok, seqs);
	else if (busy)
		atomic_fetch_add(&c_busy, events);
	else
		atomic_fetch_add(&c_err, events);
}

static void
work_cb(void *arg)
{
	struct work *w = arg;
	int rv = nng_aio_result(w->aio);

	if (w->sending) {
		if (rv != 0) {
			nng_msg_free(nng_aio_get_msg(w->aio));
			atomic_fetch_add(&c_err, w->events);
			goto release;
		}
		w->sending = 0;
		nng_ctx_recv(w->ctx, w->aio);
		return;
	}
	if (rv != 0) {
		atomic_fetch_add(&c_err, w->events);
		goto release;
	}
	nng_msg *m = nng_aio_get_msg(w->aio);

	reply_count(m, w->events);
	nng_msg_free(m);
	atomic_store(&t_last_reply, now_ns());
release:
	pthread_mutex_lock(&mu);
	w->next = free_list;
	free_list = w;
	n_busy_ctx--;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

static nng_msg *
build_batch(uint64_t first_n, unsigned count)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	char data[8192];
	size_t tl = strlen(opt.topic);
	uint64_t t = now_ns();
	nng_msg *m = NULL;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, count);
	for (unsigned i = 0; i < count; i++) {
		int dl = data_text(data, sizeof(data), first_n + i, t);

		msgpack_pack_map(&pk, 2);
		msgpack_pack_str(&pk, 5);
		msgpack_pack_str_body(&pk, "topic", 5);
		msgpack_pack_str(&pk, tl);
		msgpack_pack_str_body(&pk, opt.topic, tl);
		msgpack_pack_str(&pk, 4);
		msgpack_pack_str_body(&pk, "data", 4);
		msgpack_pack_str(&pk, (size_t)dl);
		msgpack_pack_str_body(&pk, data, (size_t)dl);
	}
	if (nng_msg_alloc(&m, 0) != 0 || nng_msg_append(m, sb.data, sb.size) != 0) {
		fprintf(stderr, "pubgen: nng_msg_alloc failed\n");
		exit(1);
	}
	msgpack_sbuffer_destroy(&sb);
	return m;
}

static int
run_nng(void)
{
	nng_socket s;
	struct work ws[MAX_CTX];
	int rv;
	uint64_t sent = 0, t0, t_end_send;

	if ((rv = nng_req0_open(&s)) != 0 || (rv = nng_dial(s, opt.url, NULL, 0)) != 0) {
		fprintf(stderr, "pubgen: %s: %s\n", opt.url, nng_strerror(rv));
		return 1;
	}
	nng_setopt_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	for (unsigned i = 0; i < opt.inflight; i++) {
		if ((rv = nng_ctx_open(&ws[i].ctx, s)) != 0 || (rv = nng_aio_alloc(&ws[i].aio, work_cb, &ws[i])) != 0) {
			fprintf(stderr, "pubgen: ctx: %s\n", nng_strerror(rv));
			return 1;
		}
		nng_aio_set_timeout(ws[i].aio, 60000);
		ws[i].next = free_list;
		free_list = &ws[i];
	}
	t0 = now_ns();
	for (;;) {
		uint64_t now = now_ns();
		double el = (double)(now - t0) / 1e9;

		if (stop_flag || (opt.duration > 0 && el >= opt.duration) || (opt.total > 0 && sent >= opt.total))
			break;
		uint64_t target = opt.rate > 0 ? (uint64_t)(el * opt.rate) : sent + opt.batch;

		if (opt.total > 0 && target > opt.total)
			target = opt.total;
		pthread_mutex_lock(&mu);
		while (target > sent && free_list != NULL) {
			struct work *w = free_list;
			uint64_t want = target - sent;
			unsigned cnt = want > opt.batch ? opt.batch : (unsigned)want;

			free_list = w->next;
			n_busy_ctx++;
			pthread_mutex_unlock(&mu);
			w->events = cnt;
			w->sending = 1;
			nng_aio_set_msg(w->aio, build_batch(opt.n_base + sent, cnt));
			sent += cnt;
			atomic_fetch_add(&c_reqs, 1);
			nng_ctx_send(w->ctx, w->aio);
			pthread_mutex_lock(&mu);
		}
		if (opt.rate <= 0 && free_list == NULL) {
			struct timespec dl;

			clock_gettime(CLOCK_REALTIME, &dl);
			dl.tv_nsec += 10000000;
			if (dl.tv_nsec >= 1000000000) {
				dl.tv_sec++;
				dl.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&cv, &mu, &dl);
			pthread_mutex_unlock(&mu);
		} else {
			pthread_mutex_unlock(&mu);
			struct timespec ts = { 0, 1000000 };

			nanosleep(&ts, NULL);
		}
	}
	t_end_send = now_ns();
	/* Wait (bounded) for the replies of what was sent. */
	pthread_mutex_lock(&mu);
	for (int i = 0; i < 600 && n_busy_ctx > 0; i++) {
		struct timespec dl;

		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_nsec += 100000000;
		if (dl.tv_nsec >= 1000000000) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&cv, &mu, &dl);
	}
	pthread_mutex_unlock(&mu);
	uint64_t tl = atomic_load(&t_last_reply);
	double el = (double)((tl > t0 ? tl : t_end_send) - t0) / 1e9;

	printf("{\"mode\":\"nng\",\"sent\":%" PRIu64 ",\"ok\":%" PRIu64 ",\"busy\":%" PRIu64 ",\"errors\":%" PRIu64
	       ",\"requests\":%" PRIu64 ",\"elapsed_s\":%.3f,\"send_s\":%.3f,\"committed_per_s\":%.0f}\n",
	       sent, (uint64_t)atomic_load(&c_ok), (uint64_t)atomic_load(&c_busy), (uint64_t)atomic_load(&c_err),
	       (uint64_t)atomic_load(&c_reqs), el, (double)(t_end_send - t0) / 1e9,
	       el > 0 ? (double)atomic_load(&c_ok) / el : 0.0);
	fflush(stdout);
	nng_close(s);
	return 0;
}

/* Reads one HTTP response on fd; returns its status, or -1. */
static int
http_response(int fd, char *buf, size_t cap, size_t *have)
{
	for (;;) {
		char *end = memmem(buf, *have, "\r\n\r\n", 4);

		if (end != NULL) {
			size_t head = (size_t)(end - buf) + 4, clen = 0;
			char *cl = strcasestr(buf, "\r\ncontent-length:");
			int status = atoi(buf + 9);

			if (cl != NULL && cl < end)
				clen = (size_t)strtoul(cl + 17, NULL, 10);
			while (*have < head + clen) {
				ssize_t n = read(fd, buf + *have, cap - *have);

				if (n <= 0)
					return -1;
				*have += (size_t)n;
			}
			memmove(buf, buf + head + clen, *have - head - clen);
			*have -= head + clen;
			return status;
		}
		if (*have >= cap)
			return -1;
		ssize_t n = read(fd, buf + *have, cap - *have);

		if (n <= 0)
			return -1;
		*have += (size_t)n;
	}
}

static int
http_connect(const struct sockaddr_in *a)
{
	int fd, one = 1;

	if ((fd = socket(AF_INET, SOCK_STREAM, 0)) == -1 || connect(fd, (const struct sockaddr *)a, sizeof(*a)) == -1) {
		perror("pubgen: connect");
		if (fd != -1)
			close(fd);
		return -1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static int
run_http(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	char host[64], req[16384], data[8192], rb[65536];
	const char *colon = strrchr(opt.url, ':');
	int fd;
	size_t have = 0;
	uint64_t sent = 0, ok = 0, err = 0, reconnects = 0, t0;

	if (colon == NULL || (size_t)(colon - opt.url) >= sizeof(host) || opt.path == NULL)
		usage();
	memcpy(host, opt.url, (size_t)(colon - opt.url));
	host[colon - opt.url] = '\0';
	a.sin_port = htons((uint16_t)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
		usage();
	if ((fd = http_connect(&a)) == -1)
		return 1;
	t0 = now_ns();
	for (;;) {
		uint64_t now = now_ns();
		double el = (double)(now - t0) / 1e9;

		if (stop_flag || (opt.duration > 0 && el >= opt.duration) || (opt.total > 0 && sent >= opt.total))
			break;
		uint64_t target = opt.rate > 0 ? (uint64_t)(el * opt.rate) : sent + 1;

		if (target <= sent) {
			uint64_t next = t0 + (uint64_t)((double)(sent + 1) / opt.rate * 1e9);
			struct timespec ts = { (time_t)(next / 1000000000u), (long)(next % 1000000000u) };

			clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
			continue;
		}
		int dl = data_text(data, sizeof(data), opt.n_base + sent, now_ns());
		int rl = snprintf(
			req, sizeof(req),
			"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			opt.path, opt.url, dl, data);

		int status = write(fd, req, (size_t)rl) == rl ? http_response(fd, rb, sizeof(rb), &have) : -1;

		sent++;
		if (status < 0) {
			/* The server closed the kept-alive connection (nginx does after
			 * keepalive_requests): the event counts as an error, go on. */
			close(fd);
			have = 0;
			reconnects++;
			err++;
			if (reconnects > 1000 || (fd = http_connect(&a)) == -1) {
				fprintf(stderr, "pubgen: connection lost\n");
				return 1;
			}
			continue;
		}
		if (status >= 200 && status < 300)
			ok++;
		else
			err++;
	}
	double el = (double)(now_ns() - t0) / 1e9;

	printf("{\"mode\":\"http\",\"sent\":%" PRIu64 ",\"ok\":%" PRIu64 ",\"errors\":%" PRIu64
	       ",\"reconnects\":%" PRIu64 ",\"elapsed_s\":%.3f,\"committed_per_s\":%.0f}\n",
	       sent, ok, err, reconnects, el, el > 0 ? (double)ok / el : 0.0);
	fflush(stdout);
	close(fd);
	return 0;
}

int
main(int argc, char **argv)
{
	opt.mode = "nng";
	opt.topic = "bench";
	opt.rate = 100;
	opt.batch = 1000;
	opt.inflight = 16;
	opt.pad = 16;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (v == NULL)
			usage();
		i++;
		if (strcmp(a, "--mode") == 0)
			opt.mode = v;
		else if (strcmp(a, "--url") == 0)
			opt.url = v;
		else if (strcmp(a, "--path") == 0)
			opt.path = v;
		else if (strcmp(a, "--topic") == 0)
			opt.topic = v;
		else if (strcmp(a, "--rate") == 0)
			opt.rate = atof(v);
		else if (strcmp(a, "--duration") == 0)
			opt.duration = atof(v);
		else if (strcmp(a, "--total") == 0)
			opt.total = strtoull(v, NULL, 10);
		else if (strcmp(a, "--batch") == 0)
			opt.batch = (unsigned)strtoul(v, NULL, 10);
		else if (strcmp(a, "--inflight") == 0)
			opt.inflight = (unsigned)strtoul(v, NULL, 10);
		else if (strcmp(a, "--pad") == 0)
			opt.pad = (unsigned)strtoul(v, NULL, 10);
		else if (strcmp(a, "--n-base") == 0)
			opt.n_base = strtoull(v, NULL, 10);
		else
			usage();
	}
	if (opt.url == NULL || opt.batch == 0 || opt.batch > 10000 || opt.inflight == 0 || opt.inflight > MAX_CTX ||
	    (opt.duration <= 0 && opt.total == 0))
		usage();
	signal(SIGTERM, on_stop);
	signal(SIGINT, on_stop);
	signal(SIGPIPE, SIG_IGN);
	return strcmp(opt.mode, "http") == 0 ? run_http() : run_nng();
}
