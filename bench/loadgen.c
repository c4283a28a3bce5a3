/*
 * loadgen: the benchmark's load client.  Opens N concurrent HTTP streams
 * (SSE) to one server at a bounded connect rate, parses them, counts frames
 * per stream and measures delivery latency from the timestamp the publisher
 * put in each event's data ("t": CLOCK_MONOTONIC nanoseconds, which every
 * process on the machine shares).  The same client is pointed at
 * edge-gateway and at nginx+nchan, so both are measured by the same code.
 *
 * DESIGN.  One thread, one epoll set, level-triggered; every socket is
 * non-blocking.  Bytes read are de-chunked when the response is chunked
 * (nchan may answer HTTP/1.1 chunked; the edge is close-delimited), then
 * split into lines; an SSE "data:" line holding "n": and "t": is one item.
 * A partial line is carried per connection (bounded: longer lines are
 * dropped and counted).  The measurement window is driven by the caller
 * with signals (signalfd, so the loop never races a handler): SIGUSR1 resets
 * the counters (window start), SIGUSR2 writes the report (window end),
 * SIGTERM/SIGINT exit.  With --until-close the client exits by itself when
 * every stream has ended and reports the whole run (replay measurements).
 *
 * Edge-added latency: with --sub URL a second thread holds an nng sub0
 * socket dialed to the writer's publish socket and stamps, the moment nng
 * hands it a message, the arrival time of every event number in it (a ring
 * indexed by "n").  The SSE item with the same "n" then gives
 * client_receive - tail_receive: the time the edge took from the nng message
 * arriving to the bytes reaching a client, measured in one process with one
 * clock.  Both receivers share the loopback and the CPUs with the server,
 * so this is an approximation (documented in docs/performance.md).
 *
 * 50,000 streams need more than one loopback source port range: --src-addrs
 * K binds stream i to 127.0.0.(1 + i % K) with IP_BIND_ADDRESS_NO_PORT so the
 * port is chosen per 4-tuple at connect.
 *
 * Several servers (the 50,000-stream scenario: edges behind one Ingress):
 * --connect takes a comma-separated list; stream i first goes to target
 * i % K (round-robin over the first K = --initial targets).  With --resume a
 * stream that ends (a terminal `reconnect`, or cut off) comes back as an
 * EventSource does: after the hint (`retry:`, 1 s when there was none), with
 * Last-Event-ID set to the last id it read, to the target with the fewest
 * open streams of this process among those not draining (least connections,
 * the Ingress of scripts/cluster.sh; a target is taken out when a stream of
 * it reads reason `draining`, as /readyz takes a pod out of its Service).
 * Targets after the first K are spares: they join the pool when one drains
 * (the replacement pod a rolling update with maxSurge 1 starts first).
 * Per stream the event numbers must go up by one: a gap (events lost) or a
 * number again (a duplicate) is counted, across reconnects too.
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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
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

#define CARRY_MAX 8192
#define READ_BUF (256 * 1024)
#define RING (1u << 20)
#define MAX_TARGETS 16
#define RETRY_DEFAULT_MS 1000

enum cstate { C_IDLE, C_CONNECTING, C_HEADERS, C_BODY, C_WAIT, C_DONE };

struct conn {
	int fd;
	enum cstate st;
	int chunked;
	int status;
	/* chunked decoding: bytes left in the current chunk, or -1 while
	 * reading a size line; crlf: bytes of the CRLF after a chunk to skip. */
	long chunk_left;
	int crlf_skip;
	char sizeline[32];
	size_t sizeline_len;
	char *carry;
	size_t carry_len;
	int carry_overflow;
	uint64_t frames;
	uint64_t frames_at_mark;
	uint64_t last_n;
	uint64_t last_n_at_mark;
	uint64_t last_id;  /* the last SSE id: read (an item's seq or the stream position) */
	uint32_t retry_ms; /* the last hint (`retry:`), 0 = none this connection */
	uint8_t target;
	uint8_t resuming; /* reopened after an end: waiting for its first item */
	uint8_t terminal; /* a terminal envelope was read on this connection */
	uint8_t was_up;   /* a response head was read once: a reopen is a come-back */
};

/* A stream waiting to reopen (--resume), in a min-heap by due time. */
struct pending {
	uint64_t due;
	unsigned i;
};

struct ring_slot {
	_Atomic uint64_t n;
	_Atomic uint64_t t;
};

static struct {
	struct sockaddr_in dst[MAX_TARGETS];
	char host[MAX_TARGETS][64];
	unsigned targets;
	unsigned initial;
	int resume;
	const char *path;
	const char *accept;
	unsigned streams;
	double rate;
	unsigned src_addrs;
	const char *ready_file;
	const char *out_file;
	const char *sub_url;
	int until_close;
	double max_seconds;
} opt;

static struct conn *conns;
static int epfd;
static char *rbuf;
static char *cbuf;
static struct ring_slot *ring;
static struct pending *heap;
static unsigned heap_len;
static unsigned t_open[MAX_TARGETS];
static uint8_t t_draining[MAX_TARGETS];

static struct {
	uint64_t connected, failed, closed, http_errors, items, other_data, heartbeats, terminal;
	uint64_t resyncs, long_lines, unmatched, reordered;
	uint64_t bytes;
	hist e2e, edge;
	uint64_t t_mark;
	/* --resume; gaps and lost also without it.  Not reset by the window:
	 * the seam of a drain is what they are for. */
	uint64_t gaps, lost, ends, reconnects, back, retry_fail;
	uint64_t fail_connect, fail_head, fail_read; /* why attempts failed; fail_errno: the last errno */
	uint64_t why_draining, why_slow, why_other;  /* reasons of the `reconnect` envelopes read */
	int fail_errno;
	uint64_t t_first_end, t_last_head, t_last_back;
	hist late; /* reopened stream's first item - (end + hint), us */
} st;

static uint64_t t_start, t_all_up, t_last_close, t_first_item;
static uint64_t *t_due;     /* per stream: when it was due to reopen (--resume) */
static unsigned n_body;     /* streams past their response head now */
static uint64_t t_all_open; /* the first time every stream was past its head */
static unsigned n_started, n_finished;
static _Atomic uint64_t sub_msgs, sub_events;

static void
die(const char *what)
{
	fprintf(stderr, "loadgen: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void
usage(void)
{
	fprintf(stderr,
		"usage: loadgen --connect 127.0.0.1:PORT[,127.0.0.1:PORT...] --path /v1/stream?topic=T --streams N\n"
		"               [--initial K] [--resume] [--rate CONN_PER_S] [--src-addrs K] [--accept TYPE]\n"
		"               [--sub nng-url] [--ready-file F] [--out F] [--until-close] [--max-seconds S]\n"
		"signals: USR1 starts the window (resets counters), USR2 writes the report to --out\n");
	exit(2);
}

/* Scans "key":NUMBER in s[0..len); returns 1 and the number when found. */
static int
json_u64(const char *s, size_t len, const char *key, uint64_t *out)
{
	size_t kl = strlen(key);
	const char *p = s, *end = s + len;

	while ((p = memmem(p, (size_t)(end - p), key, kl)) != NULL) {
		p += kl;
		if (p < end && *p >= '0' && *p <= '9') {
			uint64_t v = 0;

			while (p < end && *p >= '0' && *p <= '9')
				v = v * 10 + (uint64_t)(*p++ - '0');
			*out = v;
			return 1;
		}
	}
	return 0;
}

static void
t_last_back_set(uint64_t now)
{
	if (now > st.t_last_back)
		st.t_last_back = now;
}

static uint64_t
line_u64(const char *l, size_t len, size_t skip)
{
	uint64_t v = 0;

	while (skip < len && l[skip] == ' ')
		skip++;
	while (skip < len && l[skip] >= '0' && l[skip] <= '9')
		v = v * 10 + (uint64_t)(l[skip++] - '0');
	return v;
}

static void
on_line(struct conn *c, const char *l, size_t len, uint64_t now)
{
	if (len >= 5 && memcmp(l, "data:", 5) == 0) {
		uint64_t t, n;

		if (json_u64(l, len, "\"t\":", &t) && json_u64(l, len, "\"n\":", &n)) {
			c->frames++;
			st.items++;
			if (t_first_item == 0)
				t_first_item = now;
			if (n <= c->last_n && c->last_n != 0) {
				st.reordered++;
			} else if (c->last_n != 0 && n > c->last_n + 1) {
				st.gaps++;
				st.lost += n - c->last_n - 1;
			}
			c->last_n = n;
			if (c->resuming) {
				c->resuming = 0;
				st.back++;
				t_last_back_set(now);
				if (t_due != NULL && t_due[c - conns] != 0)
					hist_add(&st.late,
						 now > t_due[c - conns] ? (now - t_due[c - conns]) / 1000 : 0);
			}
			if (now > t)
				hist_add(&st.e2e, (now - t) / 1000);
			if (ring != NULL) {
				struct ring_slot *r = &ring[n % RING];

				if (atomic_load_explicit(&r->n, memory_order_acquire) == n + 1) {
					uint64_t ta = atomic_load_explicit(&r->t, memory_order_relaxed);

					hist_add(&st.edge, now > ta ? (now - ta) / 1000 : 0);
				} else {
					st.unmatched++;
				}
			}
		} else if (memmem(l, len, "\"type\":\"resync\"", 15) != NULL) {
			st.resyncs++;
		} else if (memmem(l, len, "\"type\":\"reconnect\"", 18) != NULL) {
			uint64_t ms;

			st.terminal++;
			c->terminal = 1;
			if (json_u64(l, len, "\"retry_ms\":", &ms))
				c->retry_ms = ms > 3600000 ? 3600000 : (uint32_t)ms;
			/* The endpoint leaves the pool, as a pod whose /readyz fails. */
			if (memmem(l, len, "\"reason\":\"draining\"", 19) != NULL) {
				t_draining[c->target] = 1;
				st.why_draining++;
			} else if (memmem(l, len, "\"reason\":\"slow_consumer\"", 24) != NULL ||
				   memmem(l, len, "\"reason\":\"blocked\"", 18) != NULL) {
				st.why_slow++;
			} else {
				st.why_other++;
			}
		} else if (memmem(l, len, "\"type\":\"complete\"", 17) != NULL ||
			   memmem(l, len, "\"type\":\"failure\"", 16) != NULL) {
			st.terminal++;
			c->terminal = 1;
		} else {
			st.other_data++;
		}
	} else if (len >= 3 && memcmp(l, "id:", 3) == 0) {
		c->last_id = line_u64(l, len, 3);
	} else if (len >= 6 && memcmp(l, "retry:", 6) == 0) {
		uint64_t ms = line_u64(l, len, 6);

		c->retry_ms = ms > 3600000 ? 3600000 : (uint32_t)ms;
	} else if (len >= 1 && l[0] == ':') {
		st.heartbeats++;
	}
}

/* Splits body bytes into lines, carrying a partial line over. */
static void
on_body(struct conn *c, const char *b, size_t len, uint64_t now)
{
	const char *p = b, *end = b + len, *nl;

	if (c->carry_len > 0) {
		nl = memchr(p, '\n', len);
		if (nl == NULL) {
			if (c->carry_len + len > CARRY_MAX) {
				c->carry_overflow = 1;
				c->carry_len = 0;
			} else {
				memcpy(c->carry + c->carry_len, p, len);
				c->carry_len += len;
			}
			return;
		}
		size_t part = (size_t)(nl - p);

		if (!c->carry_overflow && c->carry_len + part <= CARRY_MAX) {
			memcpy(c->carry + c->carry_len, p, part);
			on_line(c, c->carry, c->carry_len + part, now);
		} else {
			st.long_lines++;
		}
		c->carry_len = 0;
		c->carry_overflow = 0;
		p = nl + 1;
	} else if (c->carry_overflow) {
		nl = memchr(p, '\n', len);
		if (nl == NULL)
			return;
		st.long_lines++;
		c->carry_overflow = 0;
		p = nl + 1;
	}
	while (p < end && (nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
		size_t ll = (size_t)(nl - p);

		if (ll > 0 && p[ll - 1] == '\r')
			ll--;
		on_line(c, p, ll, now);
		p = nl + 1;
	}
	if (p < end) {
		size_t rest = (size_t)(end - p);

		if (c->carry == NULL)
			c->carry = malloc(CARRY_MAX);
		if (c->carry == NULL || rest > CARRY_MAX) {
			c->carry_overflow = 1;
			return;
		}
		memcpy(c->carry, p, rest);
		c->carry_len = rest;
	}
}

/* De-chunks b into cbuf and feeds the body; returns -1 on a framing error. */
static int
on_chunked(struct conn *c, const char *b, size_t len, uint64_t now)
{
	size_t o = 0, i = 0;

	while (i < len) {
		if (c->crlf_skip > 0) {
			i++;
			c->crlf_skip--;
		} else if (c->chunk_left < 0) {
			char ch = b[i++];

			if (ch == '\n') {
				c->sizeline[c->sizeline_len] = '\0';
				c->chunk_left = strtol(c->sizeline, NULL, 16);
				c->sizeline_len = 0;
				if (c->chunk_left == 0)
					return -1; /* last chunk: the stream ended */
			} else if (c->sizeline_len < sizeof(c->sizeline) - 1) {
				c->sizeline[c->sizeline_len++] = ch;
			}
		} else {
			size_t take = len - i;

			if ((long)take > c->chunk_left)
				take = (size_t)c->chunk_left;
			memcpy(cbuf + o, b + i, take);
			o += take;
			i += take;
			c->chunk_left -= (long)take;
			if (c->chunk_left == 0) {
				c->chunk_left = -1;
				c->crlf_skip = 2;
			}
		}
	}
	if (o > 0)
		on_body(c, cbuf, o, now);
	return 0;
}

static void
heap_push(uint64_t due, unsigned i)
{
	unsigned k = heap_len++;

	while (k > 0 && heap[(k - 1) / 2].due > due) {
		heap[k] = heap[(k - 1) / 2];
		k = (k - 1) / 2;
	}
	heap[k] = (struct pending){ .due = due, .i = i };
}

static unsigned
heap_pop(void)
{
	unsigned top = heap[0].i, k = 0;
	struct pending last = heap[--heap_len];

	for (;;) {
		unsigned m = 2 * k + 1;

		if (m >= heap_len)
			break;
		if (m + 1 < heap_len && heap[m + 1].due < heap[m].due)
			m++;
		if (heap[m].due >= last.due)
			break;
		heap[k] = heap[m];
		k = m;
	}
	if (heap_len > 0)
		heap[k] = last;
	return top;
}

static void
conn_close(struct conn *c, int failed)
{
	uint64_t now = now_ns();

	if (c->fd >= 0) {
		epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
		c->fd = -1;
		t_open[c->target]--;
	}
	if (c->st == C_BODY)
		n_body--;
	free(c->carry);
	c->carry = NULL;
	c->carry_len = 0;
	c->carry_overflow = 0;
	if (c->st == C_DONE || c->st == C_WAIT)
		return;
	if (failed)
		st.failed++;
	if (opt.resume) {
		/* As an EventSource: back after the hint, from the last id read. */
		unsigned i = (unsigned)(c - conns);

		if (failed) {
			st.retry_fail++;
		} else {
			st.ends++;
			if (st.t_first_end == 0)
				st.t_first_end = now;
		}
		t_due[i] = now + (uint64_t)(c->retry_ms ? c->retry_ms : RETRY_DEFAULT_MS) * 1000000u;
		c->st = C_WAIT;
		heap_push(t_due[i], i);
		return;
	}
	if (!failed)
		st.closed++;
	n_finished++;
	t_last_close = now;
	c->st = C_DONE;
}

/* Least connections among the targets in the pool: the first --initial ones
 * until one drains, then every target that does not (the spares stand for
 * the replacement a rolling update starts before it stops a pod). */
static unsigned
target_pick(unsigned i)
{
	int best = -1, drained = 0;

	for (unsigned t = 0; t < opt.targets; t++)
		drained |= t_draining[t];
	for (unsigned t = 0; t < (drained ? opt.targets : opt.initial); t++)
		if (!t_draining[t] && (best < 0 || t_open[t] < t_open[best]))
			best = (int)t;
	return best < 0 ? i % opt.targets : (unsigned)best;
}

static void
conn_open(unsigned i, unsigned target)
{
	struct conn *c = &conns[i];
	int one = 1;

	c->st = C_IDLE;
	c->target = (uint8_t)target;
	c->chunk_left = -1;
	c->chunked = 0;
	c->crlf_skip = 0;
	c->sizeline_len = 0;
	c->status = 0;
	c->retry_ms = 0;
	c->terminal = 0;
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd == -1) {
		conn_close(c, 1);
		return;
	}
	t_open[target]++;
	c->st = C_CONNECTING;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (opt.src_addrs > 1) {
		struct sockaddr_in src = { .sin_family = AF_INET };

		src.sin_addr.s_addr = htonl(0x7f000001u + i % opt.src_addrs);
		setsockopt(c->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
		if (bind(c->fd, (struct sockaddr *)&src, sizeof(src)) == -1) {
			conn_close(c, 1);
			return;
		}
	}
	if (connect(c->fd, (struct sockaddr *)&opt.dst[target], sizeof(opt.dst[target])) == -1 &&
	    errno != EINPROGRESS) {
		conn_close(c, 1);
		return;
	}
	struct epoll_event ev = { .events = EPOLLOUT, .data.u32 = i };

	if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev) == -1)
		conn_close(c, 1);
}

/* The first connection of stream i: round-robin over the first --initial targets. */
static void
conn_start(unsigned i)
{
	n_started++;
	conn_open(i, i % opt.initial);
}

static void
conn_reopen(unsigned i)
{
	st.reconnects++;
	if (conns[i].was_up)
		conns[i].resuming = 1;
	conn_open(i, target_pick(i));
}

static void
conn_writable(unsigned i)
{
	struct conn *c = &conns[i];
	char req[2048];
	int err = 0;
	socklen_t el = sizeof(err);

	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) == -1 || err != 0) {
		st.fail_connect++;
		st.fail_errno = err;
		conn_close(c, 1);
		return;
	}
	char lei[48] = "";

	if (opt.resume && c->last_id > 0)
		snprintf(lei, sizeof(lei), "Last-Event-ID: %" PRIu64 "\r\n", c->last_id);
	int n = snprintf(req, sizeof(req),
			 "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: %s\r\n%sUser-Agent: studio-loadgen\r\n\r\n", opt.path,
			 opt.host[c->target], opt.accept, lei);

	if (n <= 0 || (size_t)n >= sizeof(req) || write(c->fd, req, (size_t)n) != n) {
		conn_close(c, 1);
		return;
	}
	c->st = C_HEADERS;
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = i };

	epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

/* Parses the response head in rbuf[0..len); returns bytes consumed, 0 if incomplete. */
static size_t
parse_head(struct conn *c, char *b, size_t len)
{
	char *end = memmem(b, len, "\r\n\r\n", 4);

	if (end == NULL)
		return 0;
	*end = '\0';
	if (strncmp(b, "HTTP/1.", 7) != 0 || len < 12)
		return (size_t)-1;
	c->status = atoi(b + 9);
	for (char *p = b; *p; p++)
		*p = (char)((*p >= 'A' && *p <= 'Z') ? *p + 32 : *p);
	c->chunked = strstr(b, "\r\ntransfer-encoding: chunked") != NULL;
	return (size_t)(end - b) + 4;
}

static void
conn_readable(unsigned i, uint64_t now)
{
	struct conn *c = &conns[i];

	for (int rounds = 0; rounds < 4; rounds++) {
		size_t have = 0;

		if (c->st == C_HEADERS && c->carry_len > 0) {
			memcpy(rbuf, c->carry, c->carry_len);
			have = c->carry_len;
			c->carry_len = 0;
		}
		ssize_t n = read(c->fd, rbuf + have, READ_BUF - have);

		if (n == 0) {
			if (c->st == C_HEADERS)
				st.fail_head++;
			conn_close(c, c->st == C_HEADERS);
			return;
		}
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return;
			st.fail_read++;
			st.fail_errno = errno;
			conn_close(c, 1);
			return;
		}
		st.bytes += (uint64_t)n;
		size_t len = have + (size_t)n, off = 0;

		if (c->st == C_HEADERS) {
			size_t h = parse_head(c, rbuf, len);

			if (h == (size_t)-1 || (h == 0 && len > CARRY_MAX)) {
				st.http_errors++;
				conn_close(c, 1);
				return;
			}
			if (h == 0) {
				if (c->carry == NULL && (c->carry = malloc(CARRY_MAX)) == NULL)
					die("malloc");
				memcpy(c->carry, rbuf, len);
				c->carry_len = len;
				continue;
			}
			if (c->status != 200) {
				st.http_errors++;
				conn_close(c, 1);
				return;
			}
			c->st = C_BODY;
			st.connected++;
			c->was_up = 1;
			if (++n_body == opt.streams && t_all_open == 0)
				t_all_open = now;
			if (c->resuming && now > st.t_last_head)
				st.t_last_head = now;
			off = h;
		}
		if (off < len) {
			if (c->chunked) {
				if (on_chunked(c, rbuf + off, len - off, now) != 0) {
					conn_close(c, 0);
					return;
				}
			} else {
				on_body(c, rbuf + off, len - off, now);
			}
		}
		if ((size_t)n < READ_BUF - have)
			return;
	}
}

static void *
sub_main(void *arg)
{
	nng_socket s;
	msgpack_unpacked u;
	int rv;

	(void)arg;
	if ((rv = nng_sub0_open(&s)) != 0 || (rv = nng_setopt(s, NNG_OPT_SUB_SUBSCRIBE, "", 0)) != 0 ||
	    (rv = nng_setopt_int(s, NNG_OPT_RECVBUF, 8192)) != 0 ||
	    (rv = nng_dial(s, opt.sub_url, NULL, NNG_FLAG_NONBLOCK)) != 0) {
		fprintf(stderr, "loadgen: sub %s: %s\n", opt.sub_url, nng_strerror(rv));
		return NULL;
	}
	msgpack_unpacked_init(&u);
	for (;;) {
		nng_msg *m;

		if (nng_recvmsg(s, &m, 0) != 0)
			break;
		uint64_t t = now_ns();
		size_t off = 0;

		atomic_fetch_add(&sub_msgs, 1);
		if (msgpack_unpack_next(&u, nng_msg_body(m), nng_msg_len(m), &off) == MSGPACK_UNPACK_SUCCESS &&
		    u.data.type == MSGPACK_OBJECT_MAP) {
			msgpack_object_map *mp = &u.data.via.map;

			for (uint32_t k = 0; k < mp->size; k++) {
				msgpack_object *key = &mp->ptr[k].key, *val = &mp->ptr[k].val;

				if (key->type != MSGPACK_OBJECT_STR || key->via.str.size != 2 ||
				    memcmp(key->via.str.ptr, "ev", 2) != 0 || val->type != MSGPACK_OBJECT_ARRAY)
					continue;
				for (uint32_t e = 0; e < val->via.array.size; e++) {
					msgpack_object *ev = &val->via.array.ptr[e];
					uint64_t n;

					if (ev->type != MSGPACK_OBJECT_ARRAY || ev->via.array.size != 4 ||
					    ev->via.array.ptr[3].type != MSGPACK_OBJECT_STR)
						continue;
					if (!json_u64(ev->via.array.ptr[3].via.str.ptr,
						      ev->via.array.ptr[3].via.str.size, "\"n\":", &n))
						continue;
					atomic_store_explicit(&ring[n % RING].t, t, memory_order_relaxed);
					atomic_store_explicit(&ring[n % RING].n, n + 1, memory_order_release);
					atomic_fetch_add(&sub_events, 1);
				}
			}
		}
		nng_msg_free(m);
	}
	msgpack_unpacked_destroy(&u);
	return NULL;
}

static void
mark(void)
{
	memset(&st.e2e, 0, sizeof(st.e2e));
	memset(&st.edge, 0, sizeof(st.edge));
	st.items = st.other_data = st.heartbeats = st.resyncs = st.unmatched = st.bytes = 0;
	st.reordered = 0;
	st.t_mark = now_ns();
	for (unsigned i = 0; i < opt.streams; i++) {
		conns[i].frames_at_mark = conns[i].frames;
		conns[i].last_n_at_mark = conns[i].last_n;
	}
}

/* Non-empty buckets as [[upper bound us, count],...]: reports of several
 * processes add up to one distribution. */
static void
hist_buckets_json(const hist *h, FILE *f)
{
	int first = 1;

	fputc('[', f);
	for (unsigned i = 0; i < HIST_N; i++) {
		if (h->b[i] == 0)
			continue;
		fprintf(f, "%s[%" PRIu64 ",%" PRIu64 "]", first ? "" : ",", hist_value(i), h->b[i]);
		first = 0;
	}
	fputc(']', f);
}

static void
report(void)
{
	uint64_t now = now_ns();
	uint64_t fmin = UINT64_MAX, fmax = 0, zero = 0, open = 0;
	uint64_t nmin = UINT64_MAX, nmax = 0, expect_n = 0, got_n = 0;
	FILE *f = opt.out_file ? fopen(opt.out_file, "w") : stdout;

	if (f == NULL)
		die("open --out");
	for (unsigned i = 0; i < opt.streams; i++) {
		struct conn *c = &conns[i];
		uint64_t d = c->frames - c->frames_at_mark;

		if (c->st == C_BODY)
			open++;
		if (c->last_n < nmin)
			nmin = c->last_n;
		if (c->last_n > nmax)
			nmax = c->last_n;
		/* Streams that had read an item at the window's start: their
		 * items since, and the numbers they moved by. */
		if (c->last_n_at_mark != 0) {
			got_n += d;
			if (c->last_n > c->last_n_at_mark)
				expect_n += c->last_n - c->last_n_at_mark;
		}
		if (c->st != C_BODY && d == 0)
			continue;
		if (d < fmin)
			fmin = d;
		if (d > fmax)
			fmax = d;
		if (d == 0)
			zero++;
	}
	if (fmin == UINT64_MAX)
		fmin = 0;
	fprintf(f,
		"{\"window_s\":%.3f,\"streams\":%u,\"open\":%" PRIu64 ",\"connected\":%" PRIu64 ",\"failed\":%" PRIu64
		",\"closed\":%" PRIu64 ",\"http_errors\":%" PRIu64 ",\"items\":%" PRIu64 ",\"bytes\":%" PRIu64
		",\"per_stream_min\":%" PRIu64 ",\"per_stream_max\":%" PRIu64 ",\"streams_without_items\":%" PRIu64
		",\"resyncs\":%" PRIu64 ",\"terminal\":%" PRIu64 ",\"heartbeats\":%" PRIu64 ",\"other_data\":%" PRIu64
		",\"long_lines\":%" PRIu64 ",\"reordered\":%" PRIu64
		",\"connect_s\":%.3f,\"first_item_s\":%.6f,\"last_close_s\":%.6f",
		(double)(now - st.t_mark) / 1e9, opt.streams, open, st.connected, st.failed, st.closed, st.http_errors,
		st.items, st.bytes, fmin, fmax, zero, st.resyncs, st.terminal, st.heartbeats, st.other_data,
		st.long_lines, st.reordered, t_all_up ? (double)(t_all_up - t_start) / 1e9 : -1.0,
		t_first_item ? (double)(t_first_item - t_start) / 1e9 : -1.0,
		t_last_close ? (double)(t_last_close - t_start) / 1e9 : -1.0);
	fprintf(f, ",\"e2e_us\":");
	hist_json(&st.e2e, f);
	fprintf(f, ",\"e2e_buckets\":");
	hist_buckets_json(&st.e2e, f);
	if (nmin == UINT64_MAX)
		nmin = 0;
	fprintf(f,
		",\"gaps\":%" PRIu64 ",\"lost\":%" PRIu64 ",\"last_n_min\":%" PRIu64 ",\"last_n_max\":%" PRIu64
		",\"items_expected_by_n\":%" PRIu64 ",\"items_by_n\":%" PRIu64 ",\"t_start_ns\":%" PRIu64
		",\"t_all_up_ns\":%" PRIu64 ",\"t_all_open_ns\":%" PRIu64 ",\"fail_connect\":%" PRIu64
		",\"fail_head\":%" PRIu64 ",\"fail_read\":%" PRIu64 ",\"fail_errno\":%d"
		",\"reconnect_draining\":%" PRIu64 ",\"reconnect_slow\":%" PRIu64 ",\"reconnect_other\":%" PRIu64,
		st.gaps, st.lost, nmin, nmax, expect_n, got_n, t_start, t_all_up, t_all_open, st.fail_connect,
		st.fail_head, st.fail_read, st.fail_errno, st.why_draining, st.why_slow, st.why_other);
	if (opt.resume) {
		fprintf(f,
			",\"ends\":%" PRIu64 ",\"reconnects\":%" PRIu64 ",\"retry_fail\":%" PRIu64 ",\"back\":%" PRIu64
			",\"waiting\":%u,\"t_first_end_ns\":%" PRIu64 ",\"t_last_head_ns\":%" PRIu64
			",\"t_last_back_ns\":%" PRIu64 ",\"late_us\":",
			st.ends, st.reconnects, st.retry_fail, st.back, heap_len, st.t_first_end, st.t_last_head,
			st.t_last_back);
		hist_json(&st.late, f);
		fprintf(f, ",\"per_target_open\":[");
		for (unsigned t = 0; t < opt.targets; t++)
			fprintf(f, "%s%u", t ? "," : "", t_open[t]);
		fprintf(f, "]");
	}
	if (ring != NULL) {
		fprintf(f, ",\"edge_us\":");
		hist_json(&st.edge, f);
		fprintf(f, ",\"unmatched\":%" PRIu64 ",\"sub_msgs\":%" PRIu64 ",\"sub_events\":%" PRIu64, st.unmatched,
			(uint64_t)atomic_load(&sub_msgs), (uint64_t)atomic_load(&sub_events));
	}
	fprintf(f, "}\n");
	if (f != stdout)
		fclose(f);
	else
		fflush(f);
}

/* Target k from "IPv4:PORT" (len bytes at v); 0 when it is not one. */
static int
target_parse(unsigned k, const char *v, size_t len)
{
	char h[64];
	const char *colon = memrchr(v, ':', len);
	long port;

	if (colon == NULL || (size_t)(colon - v) >= sizeof(h) || len >= sizeof(opt.host[k]))
		return 0;
	memcpy(h, v, (size_t)(colon - v));
	h[colon - v] = '\0';
	memcpy(opt.host[k], v, len);
	opt.host[k][len] = '\0';
	port = strtol(colon + 1, NULL, 10);
	opt.dst[k].sin_family = AF_INET;
	opt.dst[k].sin_port = htons((uint16_t)port);
	return port > 0 && port < 65536 && inet_pton(AF_INET, h, &opt.dst[k].sin_addr) == 1;
}

static void
parse_args(int argc, char **argv)
{
	opt.rate = 2000;
	opt.src_addrs = 1;
	opt.accept = "text/event-stream";
	opt.max_seconds = 3600;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "--until-close") == 0) {
			opt.until_close = 1;
			continue;
		}
		if (strcmp(a, "--resume") == 0) {
			opt.resume = 1;
			continue;
		}
		if (v == NULL)
			usage();
		i++;
		if (strcmp(a, "--connect") == 0) {
			const char *p = v;

			while (*p != '\0') {
				const char *comma = strchr(p, ','), *e = comma ? comma : p + strlen(p);

				if (opt.targets == MAX_TARGETS || !target_parse(opt.targets, p, (size_t)(e - p)))
					usage();
				opt.targets++;
				p = comma ? comma + 1 : e;
			}
		} else if (strcmp(a, "--initial") == 0) {
			opt.initial = (unsigned)strtoul(v, NULL, 10);
		} else if (strcmp(a, "--path") == 0) {
			opt.path = v;
		} else if (strcmp(a, "--streams") == 0) {
			opt.streams = (unsigned)strtoul(v, NULL, 10);
		} else if (strcmp(a, "--rate") == 0) {
			opt.rate = atof(v);
		} else if (strcmp(a, "--src-addrs") == 0) {
			opt.src_addrs = (unsigned)strtoul(v, NULL, 10);
		} else if (strcmp(a, "--accept") == 0) {
			opt.accept = v;
		} else if (strcmp(a, "--sub") == 0) {
			opt.sub_url = v;
		} else if (strcmp(a, "--ready-file") == 0) {
			opt.ready_file = v;
		} else if (strcmp(a, "--out") == 0) {
			opt.out_file = v;
		} else if (strcmp(a, "--max-seconds") == 0) {
			opt.max_seconds = atof(v);
		} else {
			usage();
		}
	}
	if (opt.initial == 0 || opt.initial > opt.targets)
		opt.initial = opt.targets;
	if (opt.path == NULL || opt.streams == 0 || opt.streams > 1000000 || opt.targets == 0 || opt.rate <= 0 ||
	    opt.src_addrs == 0 || opt.src_addrs > 250 || (opt.resume && opt.until_close))
		usage();
}

int
main(int argc, char **argv)
{
	sigset_t mask;
	int sfd, tfd;
	pthread_t th;
	struct epoll_event evs[512];
	const uint32_t SIG_TAG = UINT32_MAX, TIMER_TAG = UINT32_MAX - 1;

	parse_args(argc, argv);
	conns = calloc(opt.streams, sizeof(*conns));
	rbuf = malloc(READ_BUF);
	cbuf = malloc(READ_BUF);
	if (conns == NULL || rbuf == NULL || cbuf == NULL)
		die("malloc");
	for (unsigned i = 0; i < opt.streams; i++)
		conns[i].fd = -1;
	if (opt.resume && ((heap = calloc(opt.streams, sizeof(*heap))) == NULL ||
			   (t_due = calloc(opt.streams, sizeof(*t_due))) == NULL))
		die("malloc");
	sigemptyset(&mask);
	sigaddset(&mask, SIGUSR1);
	sigaddset(&mask, SIGUSR2);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	/* After the mask: the sub thread inherits it, so signals reach only signalfd. */
	if (opt.sub_url != NULL) {
		if ((ring = calloc(RING, sizeof(*ring))) == NULL)
			die("malloc");
		if (pthread_create(&th, NULL, sub_main, NULL) != 0)
			die("pthread_create");
	}
	if ((epfd = epoll_create1(EPOLL_CLOEXEC)) == -1 || (sfd = signalfd(-1, &mask, SFD_CLOEXEC)) == -1 ||
	    (tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK)) == -1)
		die("epoll/signalfd/timerfd");
	struct itimerspec its = { .it_interval = { 0, 1000000 }, .it_value = { 0, 1000000 } };
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = SIG_TAG };

	timerfd_settime(tfd, 0, &its, NULL);
	epoll_ctl(epfd, EPOLL_CTL_ADD, sfd, &ev);
	ev.data.u32 = TIMER_TAG;
	epoll_ctl(epfd, EPOLL_CTL_ADD, tfd, &ev);

	t_start = now_ns();
	st.t_mark = t_start;
	int ready_written = 0;

	for (;;) {
		uint64_t now = now_ns();

		/* Start the streams the connect rate allows by now. */
		uint64_t due = (uint64_t)((double)(now - t_start) / 1e9 * opt.rate) + 1;

		while (n_started < opt.streams && n_started < due)
			conn_start(n_started);
		while (heap_len > 0 && heap[0].due <= now)
			conn_reopen(heap_pop());
		if (!ready_written && n_started == opt.streams && st.connected + st.failed >= opt.streams) {
			t_all_up = now_ns();
			ready_written = 1;
			if (opt.ready_file != NULL) {
				FILE *f = fopen(opt.ready_file, "w");

				if (f != NULL) {
					fprintf(f, "%" PRIu64 " %" PRIu64 "\n", st.connected, st.failed);
					fclose(f);
				}
			}
		}
		if (opt.until_close && n_started == opt.streams && n_finished >= opt.streams) {
			report();
			return 0;
		}
		if ((double)(now - t_start) / 1e9 > opt.max_seconds) {
			report();
			return 3;
		}
		int n = epoll_wait(epfd, evs, 512, 100);

		if (n == -1 && errno != EINTR)
			die("epoll_wait");
		now = now_ns();
		for (int k = 0; k < n; k++) {
			uint32_t tag = evs[k].data.u32;

			if (tag == TIMER_TAG) {
				uint64_t x;

				if (read(tfd, &x, sizeof(x)) < 0 && errno != EAGAIN)
					die("timerfd");
			} else if (tag == SIG_TAG) {
				struct signalfd_siginfo si;

				if (read(sfd, &si, sizeof(si)) != sizeof(si))
					continue;
				if (si.ssi_signo == SIGUSR1)
					mark();
				else if (si.ssi_signo == SIGUSR2)
					report();
				else if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT)
					return 0;
			} else {
				struct conn *c = &conns[tag];

				if (c->fd < 0)
					continue;
				if (c->st == C_CONNECTING)
					conn_writable(tag);
				else if (evs[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
					conn_readable(tag, now);
			}
		}
	}
}
