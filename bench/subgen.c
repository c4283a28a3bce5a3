/*
 * subgen: a light stand-in for N edges on one writer's publish socket.  One
 * process holds --subs nng sub0 sockets, each dialled to the writer's
 * publish URL (so the writer sees N subscriber pipes, as with N edges), and
 * for every message each socket receives it stamps the arrival.  It does
 * none of an edge's work: it measures what the writer's fan-out costs and
 * how late the copies arrive, not an edge.
 *
 * Per message (a batch of proto/README.md, "Published messages") it reads
 * without a full decode: the event count (the "ev" array header) and, from
 * the data text pubgen writes ({"n":N,"t":T,...}), the n and t of the first
 * and of the last event (T = CLOCK_MONOTONIC ns at the producer, which every
 * process of the machine shares).  Three histograms over (message,
 * subscriber) pairs:
 *   e2e_last   arrival - t of the message's last event: the producer's send
 *              to the arrival at this subscriber for the newest event of the
 *              flush (the flush interval's wait is smallest for it; the
 *              commit, the publish and nng's delivery are all in it);
 *   e2e_first  the same for the oldest event (up to a flush interval more);
 *   lag        arrival at this subscriber - the first arrival of the same
 *              message at any subscriber of this process: the fan-out's own
 *              spread (0 for the first one).
 *
 * DESIGN.  One aio per socket, its callback on nng's threads; each
 * subscriber's counters are under its own mutex (the report reads them), the
 * first-arrival table under one mutex (a few thousand messages a second).
 * The window is driven by signals from the main thread (sigwait): SIGUSR1
 * resets the counters, SIGUSR2 writes the report (one JSON line) to --out,
 * SIGTERM/SIGINT exit.  --ready-file is written once every socket has a pipe.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>

#include "hist.h"
#include "clock.h"

#define MAX_SUBS 256
#define RING 65536u

struct sub {
	nng_socket s;
	nng_aio *aio;
	pthread_mutex_t mu;
	uint64_t msgs, events, ticks, unparsed;
	hist e2e_first, e2e_last, lag;
};

static struct {
	const char *url;
	unsigned subs;
	const char *ready_file;
	const char *out_file;
} opt;

static struct sub *subs;
static pthread_mutex_t ring_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	uint64_t key; /* first event's n + 1; 0 = empty */
	uint64_t t0;
} ring[RING];

static void
die(const char *what)
{
	fprintf(stderr, "subgen: %s\n", what);
	exit(1);
}

/* The unsigned number after `key` at p (p..end), or false. */
static int
num_after(const char *p, const char *end, const char *key, uint64_t *out)
{
	size_t kl = strlen(key);
	uint64_t v = 0;
	int any = 0;

	if (p == NULL || (size_t)(end - p) < kl || memcmp(p, key, kl) != 0)
		return 0;
	for (p += kl; p < end && *p >= '0' && *p <= '9'; p++, any = 1)
		v = v * 10 + (uint64_t)(*p - '0');
	*out = v;
	return any;
}

/* The last occurrence of needle (len nl) in [b, b + len). */
static const char *
memrmem(const char *b, size_t len, const char *needle, size_t nl)
{
	if (len < nl)
		return NULL;
	for (const char *p = b + len - nl;; p--) {
		if (memcmp(p, needle, nl) == 0)
			return p;
		if (p == b)
			return NULL;
	}
}

/* The "ev" array's length: the key is the fixstr 0xa2 'e' 'v', then an array header. */
static const char ev_key[3] = { (char)0xa2, 'e', 'v' };

static uint64_t
ev_count(const unsigned char *b, size_t len)
{
	const unsigned char *k = memmem(b, len, ev_key, sizeof(ev_key)), *end = b + len;

	if (k == NULL || k + 3 >= end)
		return 0;
	k += 3;
	if ((*k & 0xf0) == 0x90)
		return *k & 0x0f;
	if (*k == 0xdc && k + 3 <= end)
		return (uint64_t)k[1] << 8 | k[2];
	if (*k == 0xdd && k + 5 <= end)
		return (uint64_t)k[1] << 24 | (uint64_t)k[2] << 16 | (uint64_t)k[3] << 8 | k[4];
	return 0;
}

static void
on_msg(struct sub *s, nng_msg *m, uint64_t t)
{
	const char *b = nng_msg_body(m), *end = b + nng_msg_len(m);
	size_t len = nng_msg_len(m);
	const char *f = memmem(b, len, "{\"n\":", 5), *l = memrmem(b, len, "{\"n\":", 5);
	uint64_t n1 = 0, t1 = 0, nl = 0, tl = 0, lag = 0, evs = ev_count((const unsigned char *)b, len);

	if (f == NULL) {
		pthread_mutex_lock(&s->mu);
		s->msgs++;
		/* a tick has no "ev"; anything else without pubgen's data is counted apart */
		if (evs == 0)
			s->ticks++;
		else
			s->unparsed++;
		pthread_mutex_unlock(&s->mu);
		return;
	}
	const char *ft = f + 5, *lt = l + 5;

	while (ft < end && *ft >= '0' && *ft <= '9')
		ft++;
	while (lt < end && *lt >= '0' && *lt <= '9')
		lt++;
	if (!num_after(f, end, "{\"n\":", &n1) || !num_after(ft, end, ",\"t\":", &t1) ||
	    !num_after(l, end, "{\"n\":", &nl) || !num_after(lt, end, ",\"t\":", &tl)) {
		pthread_mutex_lock(&s->mu);
		s->msgs++;
		s->unparsed++;
		pthread_mutex_unlock(&s->mu);
		return;
	}
	pthread_mutex_lock(&ring_mu);
	if (ring[n1 % RING].key == n1 + 1) {
		/* another subscriber's callback may stamp earlier and lock later */
		if (t > ring[n1 % RING].t0)
			lag = t - ring[n1 % RING].t0;
		else
			ring[n1 % RING].t0 = t;
	} else {
		ring[n1 % RING].key = n1 + 1;
		ring[n1 % RING].t0 = t;
	}
	pthread_mutex_unlock(&ring_mu);
	pthread_mutex_lock(&s->mu);
	s->msgs++;
	s->events += evs;
	hist_add(&s->e2e_first, t > t1 ? (t - t1) / 1000 : 0);
	hist_add(&s->e2e_last, t > tl ? (t - tl) / 1000 : 0);
	hist_add(&s->lag, lag / 1000);
	pthread_mutex_unlock(&s->mu);
}

static void
recv_cb(void *arg)
{
	struct sub *s = arg;
	int rv = nng_aio_result(s->aio);

	if (rv == 0) {
		nng_msg *m = nng_aio_get_msg(s->aio);

		on_msg(s, m, now_ns());
		nng_msg_free(m);
	} else if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) {
		return;
	}
	nng_recv_aio(s->s, s->aio);
}

static void
hist_merge(hist *into, const hist *h)
{
	for (unsigned i = 0; i < HIST_N; i++)
		into->b[i] += h->b[i];
	into->count += h->count;
	into->sum += h->sum;
	if (h->max > into->max)
		into->max = h->max;
}

static void
reset(void)
{
	for (unsigned i = 0; i < opt.subs; i++) {
		struct sub *s = &subs[i];

		pthread_mutex_lock(&s->mu);
		s->msgs = s->events = s->ticks = s->unparsed = 0;
		memset(&s->e2e_first, 0, sizeof(hist));
		memset(&s->e2e_last, 0, sizeof(hist));
		memset(&s->lag, 0, sizeof(hist));
		pthread_mutex_unlock(&s->mu);
	}
}

static void
report(void)
{
	static hist ef, el, lg;
	uint64_t msgs = 0, events = 0, ticks = 0, unparsed = 0, ev_min = UINT64_MAX, ev_max = 0;
	char tmp[4096];
	FILE *f;

	memset(&ef, 0, sizeof(ef));
	memset(&el, 0, sizeof(el));
	memset(&lg, 0, sizeof(lg));
	for (unsigned i = 0; i < opt.subs; i++) {
		struct sub *s = &subs[i];

		pthread_mutex_lock(&s->mu);
		msgs += s->msgs;
		events += s->events;
		ticks += s->ticks;
		unparsed += s->unparsed;
		ev_min = s->events < ev_min ? s->events : ev_min;
		ev_max = s->events > ev_max ? s->events : ev_max;
		hist_merge(&ef, &s->e2e_first);
		hist_merge(&el, &s->e2e_last);
		hist_merge(&lg, &s->lag);
		pthread_mutex_unlock(&s->mu);
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", opt.out_file);
	if ((f = fopen(tmp, "w")) == NULL)
		die("cannot write --out");
	fprintf(f,
		"{\"subs\":%u,\"msgs\":%" PRIu64 ",\"events\":%" PRIu64 ",\"events_min_per_sub\":%" PRIu64
		",\"events_max_per_sub\":%" PRIu64 ",\"ticks\":%" PRIu64 ",\"unparsed\":%" PRIu64 ",\"e2e_first_us\":",
		opt.subs, msgs, events, ev_min, ev_max, ticks, unparsed);
	hist_json(&ef, f);
	fprintf(f, ",\"e2e_last_us\":");
	hist_json(&el, f);
	fprintf(f, ",\"lag_us\":");
	hist_json(&lg, f);
	fprintf(f, "}\n");
	fclose(f);
	rename(tmp, opt.out_file); /* whole or absent: the caller polls for it */
}

static void
usage(void)
{
	fprintf(stderr, "usage: subgen --url tcp://H:P --subs N --ready-file F --out F\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	sigset_t set;
	int rv, sig;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--url") == 0)
			opt.url = argv[i + 1];
		else if (strcmp(argv[i], "--subs") == 0)
			opt.subs = (unsigned)strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--ready-file") == 0)
			opt.ready_file = argv[i + 1];
		else if (strcmp(argv[i], "--out") == 0)
			opt.out_file = argv[i + 1];
		else
			usage();
	}
	if (opt.url == NULL || opt.subs == 0 || opt.subs > MAX_SUBS || opt.ready_file == NULL || opt.out_file == NULL)
		usage();
	/* before any nng thread exists, so they all inherit the mask and only sigwait sees these */
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGUSR2);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	if ((subs = calloc(opt.subs, sizeof(*subs))) == NULL)
		die("out of memory");
	for (unsigned i = 0; i < opt.subs; i++) {
		struct sub *s = &subs[i];

		pthread_mutex_init(&s->mu, NULL);
		if ((rv = nng_sub0_open(&s->s)) != 0 || (rv = nng_setopt(s->s, NNG_OPT_SUB_SUBSCRIBE, "", 0)) != 0 ||
		    (rv = nng_setopt_int(s->s, NNG_OPT_RECVBUF, 8192)) != 0 ||
		    (rv = nng_setopt_ms(s->s, NNG_OPT_RECONNMINT, 100)) != 0 ||
		    (rv = nng_dial(s->s, opt.url, NULL, NNG_FLAG_NONBLOCK)) != 0 ||
		    (rv = nng_aio_alloc(&s->aio, recv_cb, s)) != 0) {
			fprintf(stderr, "subgen: %s: %s\n", opt.url, nng_strerror(rv));
			return 1;
		}
		nng_recv_aio(s->s, s->aio);
	}
	/* nng has no "connected" query on a socket: a short settle, then ready (the caller warms up anyway) */
	usleep(300000);
	FILE *rf = fopen(opt.ready_file, "w");

	if (rf == NULL)
		die("cannot write --ready-file");
	fprintf(rf, "%u\n", opt.subs);
	fclose(rf);
	for (;;) {
		if (sigwait(&set, &sig) != 0)
			continue;
		if (sig == SIGUSR1)
			reset();
		else if (sig == SIGUSR2)
			report();
		else
			break;
	}
	for (unsigned i = 0; i < opt.subs; i++)
		nng_close(subs[i].s);
	for (unsigned i = 0; i < opt.subs; i++)
		nng_aio_free(subs[i].aio);
	return 0;
}
