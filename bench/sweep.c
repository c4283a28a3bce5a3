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
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "hist.h"

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

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

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
	fprintf(stderr, "usage: sweep --listen ADDR:PORT --rate R [--pad N] [--report FILE]\n");
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

int
main(int argc, char **argv)
{
	const char *listen_s = NULL, *report_path = NULL;
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
		else
			usage();
	}
	if (!listen_s || rate <= 0 || rate > 100000 || pad < 0 || pad > 200 || !(colon = strrchr(listen_s, ':')) ||
	    (size_t)(colon - listen_s) >= sizeof(host))
		usage();
	memcpy(host, listen_s, (size_t)(colon - listen_s));
	host[colon - listen_s] = '\0';
	a.sin_port = htons((uint16_t)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
		usage();
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
