/*
 * st_test_http: a plain HTTP client for unit tests that drive a real
 * st_http server on a real loop in the same thread (with st_test.h and
 * st_test_loop.h).  Header only.
 *
 *   st_test_http c;
 *   st_test_http_open(&c, port, "GET /v1/stream?topics=a HTTP/1.1\r\nHost: t\r\n\r\n", 0);
 *   ST_CHECK(st_test_http_wait(base, &c, "id: 5\n", 1, 10000));
 *
 * The request is written blocking (it is small and the kernel takes it
 * before the server accepts); the socket is then non-blocking, so reading
 * never stalls the loop the server runs on.  rcvbuf > 0 shrinks the
 * socket's receive buffer first (a slow reader whose window fills fast).
 * What it received stays in buf (NUL-terminated), up to ST_TEST_HTTP_MAX.
 */
#ifndef ST_TEST_HTTP_H
#define ST_TEST_HTTP_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "st_test_loop.h"

#define ST_TEST_HTTP_MAX (32u * 1024 * 1024)

typedef struct st_test_http {
	int fd;
	char *buf; /* owned, ST_TEST_HTTP_MAX + 1 */
	size_t len;
	bool eof; /* the server closed */
} st_test_http;

/* Connects to 127.0.0.1:port and sends req; false (fd -1) on any error. */
static inline bool
st_test_http_open(st_test_http *c, int port, const char *req, int rcvbuf)
{
	struct sockaddr_in sa;
	size_t off = 0, n = strlen(req);

	memset(c, 0, sizeof(*c));
	c->buf = malloc(ST_TEST_HTTP_MAX + 1);
	c->buf[0] = '\0';
	c->fd = socket(AF_INET, SOCK_STREAM, 0);
	if (c->fd == -1)
		return false;
	if (rcvbuf > 0)
		(void)setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) == -1)
		goto fail;
	while (off < n) {
		ssize_t w = write(c->fd, req + off, n - off);

		if (w == -1 && errno == EINTR)
			continue;
		if (w <= 0)
			goto fail;
		off += (size_t)w;
	}
	if (fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK) == -1)
		goto fail;
	return true;
fail:
	close(c->fd);
	c->fd = -1;
	return false;
}

/* Reads whatever the socket holds now (never blocks). */
static inline void
st_test_http_read(st_test_http *c)
{
	while (c->fd != -1 && !c->eof && c->len < ST_TEST_HTTP_MAX) {
		ssize_t r = read(c->fd, c->buf + c->len, ST_TEST_HTTP_MAX - c->len);

		if (r > 0) {
			c->len += (size_t)r;
			continue;
		}
		if (r == 0 || (errno != EAGAIN && errno != EINTR))
			c->eof = true;
		if (r == -1 && errno == EINTR)
			continue;
		break;
	}
	c->buf[c->len] = '\0';
}

/* Closes the socket (the server sees the client go). */
static inline void
st_test_http_close(st_test_http *c)
{
	if (c->fd != -1)
		close(c->fd);
	c->fd = -1;
}

static inline void
st_test_http_free(st_test_http *c)
{
	st_test_http_close(c);
	free(c->buf);
	c->buf = NULL;
}

/* Occurrences of needle in what was received. */
static inline size_t
st_test_http_count(const st_test_http *c, const char *needle)
{
	size_t n = 0;
	const char *p = c->buf;

	while ((p = strstr(p, needle)) != NULL) {
		n++;
		p += strlen(needle);
	}
	return n;
}

typedef struct st_test_http_want {
	st_test_http *c;
	const char *needle;
	size_t count;
} st_test_http_want;

static inline bool
st_test_http_has(void *arg)
{
	st_test_http_want *w = arg;

	st_test_http_read(w->c);
	return st_test_http_count(w->c, w->needle) >= w->count;
}

/* Runs base's loop until c received needle count times, at most ms; says what it got when not. */
static inline bool
st_test_http_wait(struct event_base *base, st_test_http *c, const char *needle, size_t count, uint64_t ms)
{
	st_test_http_want w = { c, needle, count };
	bool ok = st_test_loop_until(base, st_test_http_has, &w, ms);

	if (!ok)
		fprintf(stderr, "  waited for %zu x \"%s\", got %zu in %zu bytes: %.600s\n", count, needle,
			st_test_http_count(c, needle), c->len, c->buf);
	return ok;
}

/* A cond for st_test_loop_until: the server closed c. */
static inline bool
st_test_http_eof(void *arg)
{
	st_test_http *c = arg;

	st_test_http_read(c);
	return c->eof;
}

#endif
