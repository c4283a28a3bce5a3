/*
 * fuzz_http_head: the HTTP request head parser (static in st_http.c) fed
 * through the public API, as a client would: one in-process http_server on
 * 127.0.0.1:0, and per input one real loopback connection that writes the
 * input (at most 32 KiB: max_header_bytes is 8 KiB, so this also covers
 * 431 and pipelining), half-closes, and reads until the server closes.  The
 * loop runs only until then; a server that has not closed 5 s after the
 * client's EOF is a finding (a connection the parser left hanging).
 *
 * The handler checks what the parser hands out: the method is 1..32 token
 * characters, the path starts with '/' and holds no space, control
 * character, '?' or '#', the query no space, control character or '#', and
 * the looked-up header values are trimmed and free of control characters
 * (tab aside).  It answers in one of three ways, chosen by the path length,
 * so plain replies, problem replies and streams all follow a parsed head.
 * Whatever the server sends must begin with "HTTP/1.1 ".
 *
 * Slower than the pure-function targets (a few thousand inputs a second)
 * but it runs the real parse, the head-end scan and the keep-alive loop.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "fuzz_check.h"
#include "st_http.h"
#include "st_log.h"
#include "st_util.h"

#define MAX_INPUT (32u * 1024)

static struct event_base *base;
static http_server *srv;
static int port;

struct client {
	int fd;
	bool done;
	char first[16];
	size_t got;
};

static bool
tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static void
check_value(const char *name, const char *v)
{
	size_t n;

	if (!v)
		return;
	n = strlen(v);
	FUZZ_CHECK(n == 0 || (v[0] != ' ' && v[0] != '\t' && v[n - 1] != ' ' && v[n - 1] != '\t'),
	           "header %s not trimmed", name);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)v[i];

		FUZZ_CHECK(!((c < 0x20 && c != '\t') || c == 0x7f), "header %s: control byte 0x%02x", name, c);
	}
}

static void
stream_close(void *arg, bool abrupt)
{
	(void)arg;
	(void)abrupt;
}

static st_err
on_pair(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	(void)k;
	(void)kl;
	(void)v;
	(void)vl;
	(void)arg;
	return ST_OK;
}

static void
on_request(http_req *r, void *arg)
{
	const char *m = http_req_method(r), *p = http_req_path(r), *q = http_req_query(r);
	static const char *const names[] = {"Host", "Last-Event-ID", "Origin", "Connection", "Accept",
	                                    "Content-Length", "X-Fuzz"};
	size_t ml, pl;

	(void)arg;
	FUZZ_CHECK(m && p && q, "NULL method/path/query");
	ml = strlen(m);
	pl = strlen(p);
	FUZZ_CHECK(ml >= 1 && ml <= 32, "method of %zu bytes", ml);
	for (size_t i = 0; i < ml; i++)
		FUZZ_CHECK(tchar((unsigned char)m[i]), "method byte 0x%02x", (unsigned char)m[i]);
	FUZZ_CHECK(p[0] == '/', "path does not start with '/'");
	for (size_t i = 0; i < pl; i++) {
		unsigned char c = (unsigned char)p[i];

		FUZZ_CHECK(c > 0x20 && c < 0x7f && c != '?' && c != '#', "path byte 0x%02x", c);
	}
	for (const char *c = q; *c; c++)
		FUZZ_CHECK((unsigned char)*c > 0x20 && (unsigned char)*c < 0x7f && *c != '#', "query byte 0x%02x",
		           (unsigned char)*c);
	for (size_t i = 0; i < ST_ARRAY_LEN(names); i++)
		check_value(names[i], http_req_header(r, names[i]));
	(void)http_query_each(q, on_pair, NULL);

	switch (pl % 3) {
	case 0:
		http_reply(r, 200, "text/plain", "ok\n", 3, NULL);
		break;
	case 1:
		http_reply_problem(r, 404, NULL, "Not Found", "no such path", "Retry-After: 1\r\n");
		break;
	default: {
		http_stream_cbs cbs = {NULL, stream_close};
		http_stream *s = http_stream_start(r, 200, "text/event-stream", NULL, &cbs, NULL);

		http_stream_write(s, "data: x\n\n", 9);
		http_stream_end(s);
		break;
	}
	}
}

static void
client_cb(evutil_socket_t fd, short what, void *arg)
{
	struct client *c = arg;
	char buf[4096];

	(void)what;
	for (;;) {
		ssize_t n = recv(fd, buf, sizeof(buf), 0);

		if (n > 0) {
			if (c->got < sizeof(c->first)) {
				size_t k = ST_MIN(sizeof(c->first) - c->got, (size_t)n);

				memcpy(c->first + c->got, buf, k);
			}
			c->got += (size_t)n;
			continue;
		}
		if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n == -1 && errno == EINTR)
			continue;
		c->done = true; /* EOF or reset: the server closed */
		event_base_loopbreak(base);
		return;
	}
}

static void
timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	FUZZ_CHECK(0, "the server did not close the connection within 5 s of the client's EOF");
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	http_server_config cfg = {0, 0, 0, "https://a.example, https://b.example"};

	(void)argc;
	(void)argv;
	signal(SIGPIPE, SIG_IGN);
	st_log_set_level(ST_LOG_ERROR);
	base = event_base_new();
	FUZZ_CHECK(base != NULL, "event_base_new");
	FUZZ_CHECK(http_server_new(base, "127.0.0.1:0", &cfg, on_request, NULL, &srv) == ST_OK, "http_server_new");
	port = http_server_port(srv);
	FUZZ_CHECK(port > 0, "port");
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sockaddr_in sa;
	struct client c = {-1, false, {0}, 0};
	struct event *ev, *tm;
	struct timeval tv = {5, 0};
	size_t off = 0;

	if (size > MAX_INPUT)
		size = MAX_INPUT;
	c.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	FUZZ_CHECK(c.fd != -1, "socket: %s", strerror(errno));
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(c.fd, (struct sockaddr *)&sa, sizeof(sa)) == -1) {
		/* A signal (libFuzzer's timers) can interrupt connect; it then
		 * completes asynchronously: wait for it and read its outcome. */
		struct pollfd pfd = {c.fd, POLLOUT, 0};
		int soerr = errno;
		socklen_t sl = sizeof(soerr);

		FUZZ_CHECK(soerr == EINTR || soerr == EINPROGRESS, "connect: %s", strerror(soerr));
		while (poll(&pfd, 1, 5000) == -1 && errno == EINTR)
			;
		FUZZ_CHECK(getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0, "connect: %s",
		           strerror(soerr));
	}
	while (off < size) {
		ssize_t n = send(c.fd, data + off, size - off, MSG_NOSIGNAL);

		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			break; /* the server may refuse early and reset: fine */
		off += (size_t)n;
	}
	shutdown(c.fd, SHUT_WR);
	FUZZ_CHECK(fcntl(c.fd, F_SETFL, fcntl(c.fd, F_GETFL) | O_NONBLOCK) == 0, "fcntl");
	ev = event_new(base, c.fd, EV_READ | EV_PERSIST, client_cb, &c);
	tm = evtimer_new(base, timeout_cb, NULL);
	FUZZ_CHECK(ev && tm, "event_new");
	event_add(ev, NULL);
	evtimer_add(tm, &tv);
	while (!c.done)
		event_base_loop(base, EVLOOP_ONCE);
	event_free(ev);
	event_free(tm);
	close(c.fd);
	if (c.got > 0)
		FUZZ_CHECK(c.got >= 9 && memcmp(c.first, "HTTP/1.1 ", 9) == 0, "response does not start with HTTP/1.1");
	return 0;
}
