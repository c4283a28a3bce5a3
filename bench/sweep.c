/*
 * sweep: the write floor of a fan-out, the "limit" beside the edge's
 * edge-added latency.  A bare SSE server with no queues, no parsing beyond
 * the end of the request head, no allocation per event: every 1/rate s it
 * builds one frame and write()s it to every open stream in turn, one
 * non-blocking syscall each, and records for every write the time from the
 * start of the sweep to the write's return (the analogue of
 * studio_edge_delivery_seconds, whose origin is the nng message arriving).
 * What is left is what the kernel charges for handing small frames to N
 * loopback sockets on this machine: any server that writes each stream once
 * per event pays it, so the edge's p99 over this p99 says how much the edge
 * itself adds.
 *
 * The frame is shaped like the edge's SSE item (id, event, data envelope
 * carrying the publisher's {"n","t","p"}) so bench/loadgen reads it the same
 * way and the write sizes match.  A stream whose socket refuses a frame
 * (EAGAIN) skips it and is counted: at the rates this runs it must not happen.
 *
 * Usage: sweep --listen 127.0.0.1:PORT --rate R [--pad 64] [--report FILE]
 * Prints "ready" on stdout once listening.  Sweeps from the start, measures
 * from SIGUSR1 (the window start, as loadgen's), writes the JSON report and
 * exits on SIGTERM.  Single thread, epoll, level-triggered.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <msgpack.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>

#include "hist.h"
#include "clock.h"

#define HEAD_MAX 4096
#define MAX_FDS (1u << 20)

enum { C_NONE, C_HEAD, C_STREAM };

/* Per descriptor: how far the request head has been read (bounded). */
struct conn {
	uint8_t state;
	uint16_t got; /* bytes of the head seen, to give up on junk */
	uint8_t crlf; /* progress through "\r\n\r\n" */
};

static struct conn *conns;
static int *streams; /* the fds in C_STREAM, swept in order */
static size_t n_streams;
static hist wr; /* sweep start -> write returned, per write (us) */
static hist sw; /* whole sweep (us) */
static uint64_t writes, refused, errors, sweeps;

static double
cpu_now(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       (double)ru.ru_stime.tv_usec / 1e6;
}

static void
usage(void)
{
	fprintf(stderr, "usage: sweep --listen ADDR:PORT --rate R [--pad N] [--report FILE]\n"
			"       sweep --listen ADDR:PORT --sub nng-url [--threads K] [--report FILE]\n");
	exit(2);
}

static void
drop(int ep, int fd)
{
	if (conns[fd].state == C_STREAM) {
		for (size_t i = 0; i < n_streams; i++) {
			if (streams[i] == fd) {
				streams[i] = streams[--n_streams];
				break;
			}
		}
	}
	conns[fd].state = C_NONE;
	epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
	close(fd);
}

static void
on_readable(int ep, int fd)
{
	static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
				   "Cache-Control: no-store\r\nConnection: close\r\n\r\n";
	char b[2048];
	ssize_t n = read(fd, b, sizeof(b));
	struct conn *c = &conns[fd];

	if (n <= 0) {
		if (n == 0 || (errno != EAGAIN && errno != EINTR))
			drop(ep, fd);
		return;
	}
	if (c->state != C_HEAD)
		return; /* a stream's client has nothing to say */
	for (ssize_t i = 0; i < n && c->state == C_HEAD; i++) {
		static const char end[] = "\r\n\r\n";

		c->crlf = b[i] == end[c->crlf] ? (uint8_t)(c->crlf + 1) : (uint8_t)(b[i] == '\r');
		if (++c->got > HEAD_MAX) {
			drop(ep, fd);
			return;
		}
		if (c->crlf == 4) {
			if (write(fd, head, sizeof(head) - 1) != (ssize_t)(sizeof(head) - 1)) {
				drop(ep, fd);
				return;
			}
			c->state = C_STREAM;
			streams[n_streams++] = fd;
		}
	}
}

static void
sweep_once(uint64_t n, int pad, bool measure)
{
	char frame[1024], data[512];
	uint64_t t0 = now_ns();
	int dl = snprintf(
		data, sizeof(data), "{\"n\":%" PRIu64 ",\"t\":%" PRIu64 ",\"p\":\"%.*s\"}", n, t0, pad,
		"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
		"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
	int fl = snprintf(frame, sizeof(frame),
			  "id: %" PRIu64 "\nevent: item\ndata: {\"type\":\"item\",\"id\":%" PRIu64
			  ",\"topic\":\"fan\",\"data\":%.*s}\n\n",
			  n, n, dl, data);

	for (size_t i = 0; i < n_streams; i++) {
		ssize_t w = write(streams[i], frame, (size_t)fl);

		if (w == fl) {
			if (measure)
				hist_add(&wr, (now_ns() - t0) / 1000);
			writes++;
		} else if (w < 0 && errno == EAGAIN) {
			refused++;
		} else {
			errors++; /* the read side sees the close and drops it */
		}
	}
	if (measure) {
		hist_add(&sw, (now_ns() - t0) / 1000);
		sweeps++;
	}
}

static void
report(const char *path, uint64_t window_ns, double cpu0)
{
	FILE *f = path ? fopen(path, "w") : stdout;

	if (!f) {
		perror("sweep: report");
		return;
	}
	fprintf(f,
		"{\"streams\":%zu,\"sweeps\":%" PRIu64 ",\"writes\":%" PRIu64 ",\"refused\":%" PRIu64
		",\"errors\":%" PRIu64 ",\"window_s\":%.3f,\"cpu_s\":%.3f,\"write_us\":",
		n_streams, sweeps, writes, refused, errors, (double)window_ns / 1e9, cpu_now() - cpu0);
	hist_json(&wr, f);
	fprintf(f, ",\"sweep_us\":");
	hist_json(&sw, f);
	fprintf(f, "}\n");
	if (f != stdout)
		fclose(f);
}

/* ---- the same-shape floor (--sub) -------------------------------------- */

/*
 * With --sub URL the floor gets what the edge gets: it subscribes (at SIGHUP) to the
 * writer's publish socket (nng sub0, beside the edge's or in its place), so
 * every flush arrives as the same messages at the same times (up to 256
 * events each).  Each message becomes one burst, the SSE items of all its
 * events in one buffer shaped like the edge's frames ("id: S\ndata:
 * {"type":"item","id":"S","topic":..,"about":[],"data":D}\n\n"), written to
 * every stream with one write() each; what the kernel does not take waits
 * in the stream's queue of burst references and goes out with writev() when
 * the socket is writable.  Nothing else: no per-stream queue of frames, no
 * sequencing, no parsing beyond the request head.
 *
 * --threads 1: one epoll loop holds the nng receive descriptor, the
 * listening socket and every stream.  --threads K > 1 (the edge's
 * --threads K): the main thread receives and builds the burst and posts it
 * to K loops (a locked list and an eventfd each), each with its own
 * SO_REUSEPORT listening socket and the streams it accepted, as the edge's
 * workers.  loadgen measures both the same way (its own sub stamps the
 * message, the client reads the frame).  The report adds, per burst and
 * stream, the time from the message's arrival to its last byte handed to the
 * kernel (write_us, the analogue of studio_edge_delivery_seconds).
 */
#define BURST_LOOPS_MAX 8
#define BURST_PENDING_MAX 256          /* bursts queued per stream before it is dropped */
#define BURST_PENDING_BYTES (4u << 20) /* as the edge's per-stream bound, roughly */

typedef struct burst {
	_Atomic unsigned refs;
	uint64_t arrival_ns;
	size_t len;
	char buf[];
} burst;

typedef struct pend {
	burst *b;
	size_t off;
} pend;

/* Per descriptor in burst mode (a stream belongs to one loop). */
typedef struct bconn {
	pend *q; /* ring, BURST_PENDING_MAX, allocated on the first refusal */
	uint16_t head, n;
	size_t bytes;
	bool out; /* EPOLLOUT armed */
} bconn;

typedef struct bloop {
	int ep, lfd, efd; /* efd: -1 when the loop is main's (threads 1) */
	int *streams;
	size_t n_streams;
	pthread_t th;
	pthread_mutex_t mu;
	burst **posted; /* under mu */
	size_t n_posted, cap_posted;
	unsigned gen_seen;
	hist wr;
	uint64_t writes, queued, dropped, errors, bursts;
} bloop;

static bconn *bconns;
static bloop bloops[BURST_LOOPS_MAX];
static size_t n_bloops;
static _Atomic unsigned b_gen; /* bumped at SIGUSR1: loops reset their counters */
static _Atomic bool b_measuring, b_stop;
static const char *b_sub_url;

enum { TAG_LISTEN = 1, TAG_EFD, TAG_SUB, TAG_SIG, TAG_CONN };
#define TAGGED(tag, fd) (((uint64_t)(tag) << 32) | (uint32_t)(fd))

static void
burst_unref(burst *b)
{
	if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1)
		free(b);
}

static void
bconn_drop(bloop *L, int fd)
{
	bconn *c = &bconns[fd];

	for (size_t i = 0; i < L->n_streams; i++) {
		if (L->streams[i] == fd) {
			L->streams[i] = L->streams[--L->n_streams];
			break;
		}
	}
	while (c->n > 0) {
		burst_unref(c->q[c->head].b);
		c->head = (uint16_t)((c->head + 1) % BURST_PENDING_MAX);
		c->n--;
	}
	free(c->q);
	*c = (bconn){ 0 };
	conns[fd].state = C_NONE;
	epoll_ctl(L->ep, EPOLL_CTL_DEL, fd, NULL);
	close(fd);
}

static void
bconn_arm(bloop *L, int fd, bool out)
{
	struct epoll_event ev = { .events = EPOLLIN | (out ? EPOLLOUT : 0), .data.u64 = TAGGED(TAG_CONN, fd) };

	bconns[fd].out = out;
	epoll_ctl(L->ep, EPOLL_CTL_MOD, fd, &ev);
}

/* Queues b from off for fd (one more reference); false when over the bound. */
static bool
bconn_queue(bloop *L, int fd, burst *b, size_t off)
{
	bconn *c = &bconns[fd];

	if (c->q == NULL && (c->q = calloc(BURST_PENDING_MAX, sizeof(*c->q))) == NULL)
		return false;
	if (c->n == BURST_PENDING_MAX || c->bytes + b->len - off > BURST_PENDING_BYTES)
		return false;
	atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
	c->q[(c->head + c->n) % BURST_PENDING_MAX] = (pend){ b, off };
	c->n++;
	c->bytes += b->len - off;
	if (!c->out)
		bconn_arm(L, fd, true);
	L->queued++;
	return true;
}

/* The socket has room: writev what waits (up to 64 bursts a call). */
static void
bconn_writable(bloop *L, int fd)
{
	bconn *c = &bconns[fd];

	while (c->n > 0) {
		struct iovec iov[64];
		int k = 0;
		ssize_t w;

		for (unsigned i = 0; i < c->n && k < 64; i++, k++) {
			pend *p = &c->q[(c->head + i) % BURST_PENDING_MAX];

			iov[k] = (struct iovec){ p->b->buf + p->off, p->b->len - p->off };
		}
		w = writev(fd, iov, k);
		if (w < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return;
			L->errors++;
			bconn_drop(L, fd);
			return;
		}
		c->bytes -= (size_t)w;
		while (w > 0) {
			pend *p = &c->q[c->head];
			size_t left = p->b->len - p->off;

			if ((size_t)w < left) {
				p->off += (size_t)w;
				return; /* the kernel took part: room comes back as EPOLLOUT */
			}
			w -= (ssize_t)left;
			if (atomic_load(&b_measuring))
				hist_add(&L->wr, (now_ns() - p->b->arrival_ns) / 1000);
			burst_unref(p->b);
			c->head = (uint16_t)((c->head + 1) % BURST_PENDING_MAX);
			c->n--;
		}
	}
	bconn_arm(L, fd, false);
}

/* One burst to every stream of the loop: one write() each; the rest queued. */
static void
bloop_write(bloop *L, burst *b)
{
	unsigned gen = atomic_load(&b_gen);
	bool measure = atomic_load(&b_measuring);

	if (gen != L->gen_seen) {
		L->gen_seen = gen;
		memset(&L->wr, 0, sizeof(L->wr));
		L->writes = L->queued = L->dropped = L->errors = L->bursts = 0;
	}
	L->bursts++;
	for (size_t i = 0; i < L->n_streams; i++) {
		int fd = L->streams[i];
		bconn *c = &bconns[fd];
		ssize_t w = 0;

		if (c->n == 0) {
			w = write(fd, b->buf, b->len);
			if (w < 0 && errno != EAGAIN && errno != EINTR) {
				L->errors++;
				bconn_drop(L, fd);
				i--; /* the last stream moved into this slot */
				continue;
			}
			if (w < 0)
				w = 0;
		}
		if ((size_t)w < b->len && !bconn_queue(L, fd, b, (size_t)w)) {
			L->dropped++;
			bconn_drop(L, fd);
			i--;
			continue;
		}
		if ((size_t)w == b->len && measure)
			hist_add(&L->wr, (now_ns() - b->arrival_ns) / 1000);
		L->writes++;
	}
}

static void
bloop_accept(bloop *L)
{
	int c, one = 1;

	while ((c = accept4(L->lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = TAGGED(TAG_CONN, c) };

		if ((unsigned)c >= MAX_FDS) {
			close(c);
			continue;
		}
		setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		conns[c] = (struct conn){ .state = C_HEAD };
		bconns[c] = (bconn){ 0 };
		epoll_ctl(L->ep, EPOLL_CTL_ADD, c, &ev);
	}
}

/* The request head of a new stream, then nothing: as on_readable, on this loop's lists. */
static void
bloop_readable(bloop *L, int fd)
{
	static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
				   "Cache-Control: no-store\r\nConnection: close\r\n\r\n";
	char b[2048];
	ssize_t n = read(fd, b, sizeof(b));
	struct conn *c = &conns[fd];

	if (n <= 0) {
		if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
			if (c->state == C_HEAD)
				c->state = C_NONE, epoll_ctl(L->ep, EPOLL_CTL_DEL, fd, NULL), close(fd);
			else
				bconn_drop(L, fd);
		}
		return;
	}
	for (ssize_t i = 0; i < n && c->state == C_HEAD; i++) {
		static const char end[] = "\r\n\r\n";

		c->crlf = b[i] == end[c->crlf] ? (uint8_t)(c->crlf + 1) : (uint8_t)(b[i] == '\r');
		if (++c->got > HEAD_MAX || (c->crlf == 4 && write(fd, head, sizeof(head) - 1) != sizeof(head) - 1)) {
			c->state = C_NONE;
			epoll_ctl(L->ep, EPOLL_CTL_DEL, fd, NULL);
			close(fd);
			return;
		}
		if (c->crlf == 4) {
			c->state = C_STREAM;
			L->streams[L->n_streams++] = fd;
		}
	}
}

/* Bursts the main thread posted to this loop. */
static void
bloop_take_posted(bloop *L)
{
	uint64_t x;
	burst *local[256];
	size_t n;

	if (read(L->efd, &x, sizeof(x)) < 0 && errno != EAGAIN)
		return;
	do {
		pthread_mutex_lock(&L->mu);
		n = L->n_posted < 256 ? L->n_posted : 256;
		memcpy(local, L->posted, n * sizeof(*local));
		memmove(L->posted, L->posted + n, (L->n_posted - n) * sizeof(*local));
		L->n_posted -= n;
		pthread_mutex_unlock(&L->mu);
		for (size_t i = 0; i < n; i++) {
			bloop_write(L, local[i]);
			burst_unref(local[i]);
		}
	} while (n == 256);
}

static void
bloop_post(bloop *L, burst *b)
{
	uint64_t one = 1;

	pthread_mutex_lock(&L->mu);
	if (L->n_posted == L->cap_posted) {
		size_t cap = L->cap_posted ? L->cap_posted * 2 : 64;
		burst **p = realloc(L->posted, cap * sizeof(*p));

		if (p == NULL) {
			pthread_mutex_unlock(&L->mu);
			burst_unref(b);
			return;
		}
		L->posted = p;
		L->cap_posted = cap;
	}
	L->posted[L->n_posted++] = b;
	pthread_mutex_unlock(&L->mu);
	if (write(L->efd, &one, sizeof(one)) < 0)
		perror("sweep: eventfd");
}

/* A published message -> a burst of SSE items (NULL for a tick or junk). */
static burst *
burst_from_msg(const void *body, size_t len, uint64_t arrival)
{
	msgpack_unpacked u;
	size_t off = 0, cap = 0, used = 0;
	burst *b = NULL;

	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, body, len, &off) != MSGPACK_UNPACK_SUCCESS || u.data.type != MSGPACK_OBJECT_MAP)
		goto out;
	for (uint32_t k = 0; k < u.data.via.map.size; k++) {
		msgpack_object *key = &u.data.via.map.ptr[k].key, *val = &u.data.via.map.ptr[k].val;

		if (key->type != MSGPACK_OBJECT_STR || key->via.str.size != 2 ||
		    memcmp(key->via.str.ptr, "ev", 2) != 0 || val->type != MSGPACK_OBJECT_ARRAY)
			continue;
		for (uint32_t e = 0; e < val->via.array.size; e++) {
			msgpack_object *ev = &val->via.array.ptr[e], *f;
			size_t need;

			if (ev->type != MSGPACK_OBJECT_ARRAY || ev->via.array.size != 4)
				continue;
			f = ev->via.array.ptr;
			if (f[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER || f[1].type != MSGPACK_OBJECT_STR ||
			    f[3].type != MSGPACK_OBJECT_STR)
				continue;
			need = 128 + f[1].via.str.size + f[3].via.str.size;
			if (used + need > cap) {
				size_t ncap = (cap ? cap * 2 : 64 * 1024) + need;
				burst *nb = realloc(b, sizeof(*b) + ncap);

				if (nb == NULL)
					goto out;
				b = nb;
				cap = ncap;
			}
			used += (size_t)sprintf(b->buf + used,
						"id: %" PRIu64 "\ndata: {\"type\":\"item\",\"id\":\"%" PRIu64
						"\",\"topic\":\"%.*s\",\"about\":[],\"data\":%.*s}\n\n",
						f[0].via.u64, f[0].via.u64, (int)f[1].via.str.size, f[1].via.str.ptr,
						(int)f[3].via.str.size, f[3].via.str.ptr);
		}
	}
out:
	msgpack_unpacked_destroy(&u);
	if (b != NULL && used == 0) {
		free(b);
		b = NULL;
	}
	if (b != NULL) {
		atomic_init(&b->refs, 1);
		b->arrival_ns = arrival;
		b->len = used;
	}
	return b;
}

/* Every message nng holds now: each one burst, written (threads 1) or posted to every loop. */
static void
burst_receive(nng_socket s, bool posting)
{
	nng_msg *m;

	while (nng_recvmsg(s, &m, NNG_FLAG_NONBLOCK) == 0) {
		uint64_t t = now_ns();
		burst *b = burst_from_msg(nng_msg_body(m), nng_msg_len(m), t);

		nng_msg_free(m);
		if (b == NULL)
			continue;
		if (!posting) {
			bloop_write(&bloops[0], b);
			burst_unref(b);
			continue;
		}
		atomic_store(&b->refs, (unsigned)n_bloops);
		for (size_t i = 0; i < n_bloops; i++)
			bloop_post(&bloops[i], b);
	}
}

/* One loop's turn over its events; false once main was told to stop. */
static bool
bloop_turn(bloop *L, nng_socket s, int sfd, bool posting)
{
	struct epoll_event evs[256];
	int k = epoll_wait(L->ep, evs, 256, 500);

	for (int i = 0; i < k; i++) {
		int tag = (int)(evs[i].data.u64 >> 32), fd = (int)(uint32_t)evs[i].data.u64;

		switch (tag) {
		case TAG_LISTEN: bloop_accept(L); break;
		case TAG_EFD: bloop_take_posted(L); break;
		case TAG_SUB: burst_receive(s, posting); break;
		case TAG_SIG: {
			struct signalfd_siginfo si;

			if (read(sfd, &si, sizeof(si)) != sizeof(si))
				break;
			if (si.ssi_signo == SIGHUP) {
				/* The client's own sub is connected by now (see burst_main). */
				int rv = nng_dial(s, b_sub_url, NULL, NNG_FLAG_NONBLOCK);

				if (rv != 0)
					fprintf(stderr, "sweep: dial %s: %s\n", b_sub_url, nng_strerror(rv));
				break;
			}
			if (si.ssi_signo != SIGUSR1)
				return false;
			atomic_fetch_add(&b_gen, 1); /* the window starts: what came before was warm-up */
			atomic_store(&b_measuring, true);
			break;
		}
		default:
			if (conns[fd].state == C_NONE)
				break; /* dropped earlier in this turn */
			if (evs[i].events & EPOLLOUT)
				bconn_writable(L, fd);
			if (conns[fd].state != C_NONE && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
				bloop_readable(L, fd);
		}
	}
	return !atomic_load(&b_stop);
}

static void *
bloop_main(void *arg)
{
	nng_socket none = NNG_SOCKET_INITIALIZER;

	while (bloop_turn(arg, none, -1, true))
		;
	return NULL;
}

static int
bloop_init(bloop *L, const struct sockaddr_in *a, bool own_efd)
{
	int one = 1;
	struct epoll_event ev = { .events = EPOLLIN };

	L->ep = epoll_create1(0);
	L->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	L->efd = own_efd ? eventfd(0, EFD_NONBLOCK) : -1;
	L->streams = calloc(MAX_FDS, sizeof(*L->streams));
	pthread_mutex_init(&L->mu, NULL);
	setsockopt(L->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	setsockopt(L->lfd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	if (L->ep < 0 || L->streams == NULL || bind(L->lfd, (const struct sockaddr *)a, sizeof(*a)) != 0 ||
	    listen(L->lfd, 65535) != 0) {
		perror("sweep: listen");
		return -1;
	}
	ev.data.u64 = TAGGED(TAG_LISTEN, L->lfd);
	epoll_ctl(L->ep, EPOLL_CTL_ADD, L->lfd, &ev);
	if (L->efd >= 0) {
		ev.data.u64 = TAGGED(TAG_EFD, L->efd);
		epoll_ctl(L->ep, EPOLL_CTL_ADD, L->efd, &ev);
	}
	return 0;
}

static void
burst_report(const char *path, uint64_t window_ns, double cpu0, size_t threads)
{
	FILE *f = path ? fopen(path, "w") : stdout;
	hist all;
	uint64_t n_wr = 0, n_q = 0, n_drop = 0, n_err = 0, n_b = 0;
	size_t streams_n = 0;

	if (!f) {
		perror("sweep: report");
		return;
	}
	memset(&all, 0, sizeof(all));
	for (size_t i = 0; i < n_bloops; i++) {
		bloop *L = &bloops[i];

		for (unsigned j = 0; j < HIST_N; j++)
			all.b[j] += L->wr.b[j];
		all.count += L->wr.count;
		all.sum += L->wr.sum;
		if (L->wr.max > all.max)
			all.max = L->wr.max;
		n_wr += L->writes, n_q += L->queued, n_drop += L->dropped, n_err += L->errors;
		n_b += L->bursts, streams_n += L->n_streams;
	}
	fprintf(f,
		"{\"mode\":\"burst\",\"threads\":%zu,\"streams\":%zu,\"bursts\":%" PRIu64 ",\"writes\":%" PRIu64
		",\"queued\":%" PRIu64 ",\"dropped\":%" PRIu64 ",\"errors\":%" PRIu64
		",\"window_s\":%.3f,\"cpu_s\":%.3f,\"write_us\":",
		threads, streams_n, n_b, n_wr, n_q, n_drop, n_err, (double)window_ns / 1e9, cpu_now() - cpu0);
	hist_json(&all, f);
	fprintf(f, "}\n");
	if (f != stdout)
		fclose(f);
}

static int
burst_main(const struct sockaddr_in *a, const char *sub_url, size_t threads, const char *report_path)
{
	nng_socket s;
	int rv, nfd, sfd;
	sigset_t ss;
	bloop *M; /* the loop that holds the nng descriptor and the signals */
	bloop main_only = { 0 };
	struct epoll_event ev = { .events = EPOLLIN };
	uint64_t t_start = 0;
	double cpu0 = 0;
	unsigned gen0;

	conns = calloc(MAX_FDS, sizeof(*conns));
	bconns = calloc(MAX_FDS, sizeof(*bconns));
	if (!conns || !bconns)
		return 1;
	sigemptyset(&ss);
	sigaddset(&ss, SIGTERM);
	sigaddset(&ss, SIGINT);
	sigaddset(&ss, SIGUSR1);
	sigaddset(&ss, SIGHUP);
	sigprocmask(SIG_BLOCK, &ss, NULL); /* before the threads: they inherit it */
	signal(SIGPIPE, SIG_IGN);
	sfd = signalfd(-1, &ss, SFD_NONBLOCK | SFD_CLOEXEC);
	if ((rv = nng_sub0_open(&s)) != 0 || (rv = nng_setopt(s, NNG_OPT_SUB_SUBSCRIBE, "", 0)) != 0 ||
	    (rv = nng_setopt_int(s, NNG_OPT_RECVBUF, 8192)) != 0 ||
	    (rv = nng_socket_get_int(s, NNG_OPT_RECVFD, &nfd)) != 0) {
		fprintf(stderr, "sweep: sub %s: %s\n", sub_url, nng_strerror(rv));
		return 1;
	}
	/*
	 * Dialed at SIGHUP, once the load client's own sub (its arrival stamps)
	 * is connected: the writer's pub sends to its pipes in the order they
	 * came, so the client's copy leaves first, as it does beside an edge
	 * (which takes milliseconds more).  The other way round, a stream of
	 * the floor could read a frame before the client stamped its message,
	 * and those fastest frames would be lost to the measurement.
	 */
	b_sub_url = sub_url;
	n_bloops = threads;
	for (size_t i = 0; i < threads; i++)
		if (bloop_init(&bloops[i], a, threads > 1) != 0)
			return 1;
	if (threads == 1) {
		M = &bloops[0];
	} else {
		M = &main_only;
		M->ep = epoll_create1(0);
		for (size_t i = 0; i < threads; i++)
			pthread_create(&bloops[i].th, NULL, bloop_main, &bloops[i]);
	}
	ev.data.u64 = TAGGED(TAG_SUB, nfd);
	epoll_ctl(M->ep, EPOLL_CTL_ADD, nfd, &ev);
	ev.data.u64 = TAGGED(TAG_SIG, sfd);
	epoll_ctl(M->ep, EPOLL_CTL_ADD, sfd, &ev);
	printf("ready\n");
	fflush(stdout);
	gen0 = atomic_load(&b_gen);
	while (bloop_turn(M, s, sfd, threads > 1)) {
		if (atomic_load(&b_gen) != gen0) {
			gen0 = atomic_load(&b_gen);
			t_start = now_ns();
			cpu0 = cpu_now();
		}
	}
	atomic_store(&b_stop, true);
	if (threads > 1)
		for (size_t i = 0; i < threads; i++)
			pthread_join(bloops[i].th, NULL);
	burst_report(report_path, t_start ? now_ns() - t_start : 0, cpu0, threads);
	nng_close(s);
	return 0;
}

int
main(int argc, char **argv)
{
	const char *listen_s = NULL, *report_path = NULL, *sub_url = NULL;
	long threads = 1;
	double rate = 0, cpu0 = 0;
	bool measuring = false;
	int pad = 64, one = 1, ep, lfd, tfd, sfd;
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct itimerspec its = { 0 };
	struct epoll_event ev, evs[256];
	sigset_t ss;
	uint64_t t_start = 0, n = 0;
	char host[64];
	const char *colon;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--listen") == 0)
			listen_s = argv[i + 1];
		else if (strcmp(argv[i], "--rate") == 0)
			rate = atof(argv[i + 1]);
		else if (strcmp(argv[i], "--pad") == 0)
			pad = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--report") == 0)
			report_path = argv[i + 1];
		else if (strcmp(argv[i], "--sub") == 0)
			sub_url = argv[i + 1];
		else if (strcmp(argv[i], "--threads") == 0)
			threads = atol(argv[i + 1]);
		else
			usage();
	}
	if (sub_url != NULL)
		rate = 1; /* unused: the writer's messages pace the bursts */
	if (!listen_s || rate <= 0 || threads < 1 || threads > BURST_LOOPS_MAX || rate > 100000 || pad < 0 ||
	    pad > 200 || !(colon = strrchr(listen_s, ':')) || (size_t)(colon - listen_s) >= sizeof(host))
		usage();
	memcpy(host, listen_s, (size_t)(colon - listen_s));
	host[colon - listen_s] = '\0';
	a.sin_port = htons((uint16_t)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
		usage();
	if (sub_url != NULL)
		return burst_main(&a, sub_url, (size_t)threads, report_path);
	conns = calloc(MAX_FDS, sizeof(*conns));
	streams = calloc(MAX_FDS, sizeof(*streams));
	if (!conns || !streams)
		return 1;

	sigemptyset(&ss);
	sigaddset(&ss, SIGTERM);
	sigaddset(&ss, SIGINT);
	sigaddset(&ss, SIGUSR1);
	sigprocmask(SIG_BLOCK, &ss, NULL);
	signal(SIGPIPE, SIG_IGN);
	sfd = signalfd(-1, &ss, SFD_NONBLOCK | SFD_CLOEXEC);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lfd, 65535) != 0) {
		perror("sweep: listen");
		return 1;
	}
	tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
	its.it_interval.tv_sec = (time_t)(1.0 / rate);
	its.it_interval.tv_nsec = (long)((1.0 / rate - (double)its.it_interval.tv_sec) * 1e9);
	its.it_value = its.it_interval;
	timerfd_settime(tfd, 0, &its, NULL);
	ep = epoll_create1(0);
	ev.events = EPOLLIN;
	ev.data.fd = lfd;
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	ev.data.fd = tfd;
	epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev);
	ev.data.fd = sfd;
	epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev);
	printf("ready\n");
	fflush(stdout);

	for (;;) {
		int k = epoll_wait(ep, evs, 256, 1000);

		for (int i = 0; i < k; i++) {
			int fd = evs[i].data.fd;

			if (fd == sfd) {
				struct signalfd_siginfo si;

				if (read(sfd, &si, sizeof(si)) != sizeof(si))
					continue;
				if (si.ssi_signo != SIGUSR1)
					goto out;
				/* The window starts: what came before was warm-up. */
				memset(&wr, 0, sizeof(wr));
				memset(&sw, 0, sizeof(sw));
				writes = refused = errors = sweeps = 0;
				t_start = now_ns();
				cpu0 = cpu_now();
				measuring = true;
			} else if (fd == lfd) {
				int c;

				while ((c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
					if ((unsigned)c >= MAX_FDS) {
						close(c);
						continue;
					}
					setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
					conns[c] = (struct conn){ .state = C_HEAD };
					ev.data.fd = c;
					epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
				}
			} else if (fd == tfd) {
				uint64_t ticks;

				if (read(tfd, &ticks, sizeof(ticks)) == sizeof(ticks))
					sweep_once(++n, pad, measuring);
			} else {
				on_readable(ep, fd);
			}
		}
	}
out:
	report(report_path, measuring ? now_ns() - t_start : 0, cpu0);
	return 0;
}
