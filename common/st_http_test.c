/*
 * st_http_test: the server over real sockets on 127.0.0.1 (port 0), one
 * libevent loop driven by the test, raw client sockets written here.
 *
 * The loop carries a 5 ms persistent tick so that EVLOOP_ONCE never blocks
 * for long; helpers pump it until a condition holds or a wide deadline
 * passes.  The only timing checks (header timeout, blocked_ms) use margins
 * of several times the configured value.
 *
 * SIZE.  Over 800 lines on purpose: one case per rule of st_http.h, over the
 * shared socket helpers at the top.
 */
#include "st_http.h"

#include "st_buf.h"
#include "st_clock.h"
#include "st_metrics.h"
#include "st_test.h"
#include "st_test_metric.h"
#include "st_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

size_t http_stream_struct_size_(void);

static struct event_base *base;

/* ---- a counting allocator for libevent (memory per idle stream) ---- */
static size_t ev_bytes;

static void *
cnt_malloc(size_t n)
{
	size_t *p = malloc(n + 16);

	if (!p)
		return NULL;
	p[0] = n;
	ev_bytes += n;
	return (char *)p + 16;
}

static void
cnt_free(void *q)
{
	size_t *p;

	if (!q)
		return;
	p = (size_t *)((char *)q - 16);
	ev_bytes -= p[0];
	free(p);
}

static void *
cnt_realloc(void *q, size_t n)
{
	size_t *p, old;

	if (!q)
		return cnt_malloc(n);
	p = (size_t *)((char *)q - 16);
	old = p[0];
	p = realloc(p, n + 16);
	if (!p)
		return NULL;
	p[0] = n;
	ev_bytes = ev_bytes - old + n;
	return (char *)p + 16;
}

/* ---- loop pumping ---- */
static uint64_t
now(void)
{
	return st_clock_now(st_clock_system());
}

static void
tick_cb(evutil_socket_t fd, short w, void *a)
{
	(void)fd;
	(void)w;
	(void)a;
}

static void
pump_ms(int ms)
{
	uint64_t end = now() + (uint64_t)ms;

	while (now() < end)
		event_base_loop(base, EVLOOP_ONCE);
}

#define PUMP_UNTIL(cond, ms)                                \
	do {                                                \
		uint64_t end_ = now() + (ms);               \
		while (!(cond) && now() < end_)             \
			event_base_loop(base, EVLOOP_ONCE); \
	} while (0)

/* ---- raw clients ---- */
static int
cl_connect_rcvbuf(int port, int rcvbuf)
{
	struct sockaddr_in sa;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	ST_ASSERT(fd >= 0);
	if (rcvbuf)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ST_ASSERT(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return fd;
}

static int
cl_connect(int port)
{
	return cl_connect_rcvbuf(port, 0);
}

static void
cl_send(int fd, const char *p, size_t n)
{
	uint64_t end = now() + 5000;

	while (n > 0 && now() < end) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);

		if (k > 0) {
			p += k;
			n -= (size_t)k;
		} else if (k == -1 && (errno == EAGAIN || errno == EINTR)) {
			event_base_loop(base, EVLOOP_ONCE);
		} else {
			return;
		}
	}
}

static void
cl_puts(int fd, const char *s)
{
	cl_send(fd, s, strlen(s));
}

/* Reads what is there; true on EOF or error. */
static bool
cl_poll(int fd, st_buf *b)
{
	char tmp[65536];

	for (;;) {
		ssize_t k = recv(fd, tmp, sizeof(tmp), 0);

		if (k > 0)
			st_buf_append(b, tmp, (size_t)k);
		else if (k == 0)
			return true;
		else
			return !(errno == EAGAIN || errno == EINTR);
	}
}

/* Pumps and reads until EOF (true) or ms pass (false). */
static bool
cl_read_eof(int fd, st_buf *b, int ms)
{
	uint64_t end = now() + (uint64_t)ms;

	while (now() < end) {
		if (cl_poll(fd, b))
			return true;
		event_base_loop(base, EVLOOP_ONCE);
	}
	return false;
}

/* ---- response parsing ---- */
typedef struct resp {
	int status;
	char head[8192];
	const char *body;
	size_t blen;
} resp;

/* Header value from a response head, "" when absent (copied to out). */
static const char *
hdr(const resp *r, const char *name, char *out, size_t outlen)
{
	char key[128];
	const char *p, *e;
	size_t n;

	snprintf(key, sizeof(key), "\r\n%s:", name);
	out[0] = '\0';
	if (!(p = strcasestr(r->head, key)))
		return NULL;
	p += strlen(key);
	while (*p == ' ')
		p++;
	e = strstr(p, "\r\n");
	n = e ? (size_t)(e - p) : strlen(p);
	if (n >= outlen)
		n = outlen - 1;
	memcpy(out, p, n);
	out[n] = '\0';
	return out;
}

/* Parses one response at *off; nobody: a HEAD answer; until_eof: a stream. */
static bool
resp_at(const st_buf *b, size_t *off, resp *r, bool nobody, bool until_eof)
{
	const char *p = b->p + *off, *e;
	size_t n = b->len - *off, hl, blen = 0;
	char v[64];

	if (!b->p || n < 12 || !(e = memmem(p, n, "\r\n\r\n", 4)))
		return false;
	hl = (size_t)(e + 4 - p);
	if (hl >= sizeof(r->head))
		return false;
	memcpy(r->head, p, hl);
	r->head[hl] = '\0';
	r->status = atoi(p + 9);
	if (until_eof)
		blen = n - hl;
	else if (!nobody && hdr(r, "Content-Length", v, sizeof(v)))
		blen = strtoul(v, NULL, 10);
	if (n - hl < blen)
		return false;
	r->body = p + hl;
	r->blen = blen;
	*off += hl + blen;
	return true;
}

/* Pumps until n complete responses arrived (or EOF / ms). */
static int
cl_read_resps(int fd, st_buf *b, resp *rs, int n, int ms)
{
	uint64_t end = now() + (uint64_t)ms;
	int got = 0;
	size_t off = 0;

	while (got < n && now() < end) {
		bool eof = cl_poll(fd, b);

		while (got < n && resp_at(b, &off, &rs[got], false, false))
			got++;
		if (eof || got == n)
			break;
		event_base_loop(base, EVLOOP_ONCE);
	}
	/* Appending may have moved the buffer: point the bodies at it again. */
	off = 0;
	for (int i = 0; i < got; i++)
		resp_at(b, &off, &rs[i], false, false);
	return got;
}

/* ---- the test handler ---- */
typedef struct stream_rec {
	http_stream *s;
	int writable, closed;
	bool abrupt;
	unsigned next; /* /big: next chunk */
} stream_rec;

static struct {
	int calls;
	http_req *held;
	int gone;
	struct event *later;
	stream_rec rec;
} T;

#define BIG_CHUNK (16 * 1024)
#define BIG_N 64
static unsigned char bigdata[BIG_CHUNK * BIG_N];
static int big_cleanups[BIG_N];
static int mb_cleanups;

static void
big_cleanup(const void *data, size_t len, void *arg)
{
	(void)data;
	(void)len;
	big_cleanups[(uintptr_t)arg]++;
}

static void
mb_cleanup(const void *data, size_t len, void *arg)
{
	(void)data;
	(void)len;
	(void)arg;
	mb_cleanups++;
}

static void
on_writable(void *arg)
{
	stream_rec *r = arg;

	r->writable++;
}

static void
on_close(void *arg, bool abrupt)
{
	stream_rec *r = arg;

	r->closed++;
	r->abrupt = abrupt;
	r->s = NULL;
}

static const http_stream_cbs rec_cbs = { on_writable, on_close };

static void
big_fill(void *arg)
{
	stream_rec *r = arg;

	r->writable++;
	while (r->next < BIG_N && http_stream_backlog(r->s) <= http_stream_low_watermark(r->s)) {
		http_stream_write_ref(r->s, bigdata + (size_t)r->next * BIG_CHUNK, BIG_CHUNK, big_cleanup,
				      (void *)(uintptr_t)r->next);
		r->next++;
	}
	if (r->next == BIG_N)
		http_stream_end(r->s); /* repeated calls are no-ops */
}

static const http_stream_cbs big_cbs = { big_fill, on_close };

static void
later_cb(evutil_socket_t fd, short w, void *a)
{
	http_req *r = T.held;

	(void)fd;
	(void)w;
	(void)a;
	T.held = NULL;
	if (r)
		http_reply(r, 200, "text/plain", "later\n", 6, NULL);
}

static void
gone_cb(void *arg)
{
	(void)arg;
	T.gone++;
	T.held = NULL;
}

static void
handler(http_req *r, void *arg)
{
	const char *path = http_req_path(r);
	struct timeval tv = { 0, 50 * 1000 };

	(void)arg;
	T.calls++;
	if (strcmp(path, "/hello") == 0) {
		http_reply(r, 200, "text/plain", "hello\n", 6, NULL);
	} else if (strcmp(path, "/hdr") == 0) {
		const char *v = http_req_header(r, "x-TEST");
		st_buf b;

		st_buf_init(&b);
		st_buf_printf(&b, "%s|%s|%s", v ? v : "(none)", http_req_query(r), http_req_method(r));
		http_reply(r, 200, "text/plain", b.p, b.len, "X-Extra: 1\r\n");
		st_buf_fini(&b);
	} else if (strcmp(path, "/problem") == 0) {
		http_reply_problem(r, 404, NULL, "No \"such\" thing", "a\nb\x01\\ \xc3\xa9 \xff", "Retry-After: 5\r\n");
	} else if (strcmp(path, "/defer") == 0) {
		T.held = r;
		evtimer_add(T.later, &tv);
	} else if (strcmp(path, "/gone") == 0) {
		T.held = r;
		http_req_set_gone_cb(r, gone_cb, NULL);
	} else if (strcmp(path, "/stream") == 0) {
		memset(&T.rec, 0, sizeof(T.rec));
		T.rec.s = http_stream_start(r, 200, "text/event-stream", "X-Stream: yes\r\n", &rec_cbs, &T.rec);
	} else if (strcmp(path, "/big") == 0) {
		memset(&T.rec, 0, sizeof(T.rec));
		T.rec.s = http_stream_start(r, 200, "application/octet-stream", NULL, &big_cbs, &T.rec);
		/* A stream writes what it has after the start (as the edge does);
		 * on_writable follows only once the backlog fell under the mark. */
		big_fill(&T.rec);
	} else if (strcmp(path, "/end") == 0) {
		memset(&T.rec, 0, sizeof(T.rec));
		T.rec.s = http_stream_start(r, 200, "application/x-ndjson", NULL, &rec_cbs, &T.rec);
		for (int i = 0; i < 100; i++)
			http_stream_write(T.rec.s, "{\"n\":1}\n", 8);
		http_stream_end(T.rec.s);
	} else {
		http_reply_problem(r, 404, NULL, NULL, "no such path", NULL);
	}
}

static http_server *
server_new(const http_server_config *cfg)
{
	http_server *s = NULL;

	ST_ASSERT(http_server_new(base, "127.0.0.1:0", cfg, handler, NULL, &s) == ST_OK);
	ST_ASSERT(http_server_port(s) > 0);
	return s;
}

static const http_server_config cors_cfg = { .cors_origins = "https://a.example, https://b.example" };

/* ---------------------------------------------------------------- tests */

static void
t_bad_listen(void)
{
	http_server *s = NULL;

	ST_CHECK(http_server_new(base, "nonsense", NULL, handler, NULL, &s) == ST_EINVAL);
	ST_CHECK(http_server_new(base, "127.0.0.1", NULL, handler, NULL, &s) == ST_EINVAL);
	ST_CHECK(http_server_new(base, "127.0.0.1:x", NULL, handler, NULL, &s) == ST_EINVAL);
	ST_CHECK(s == NULL);
	ST_CHECK(http_server_new(base, "[::1]:0", NULL, handler, NULL, &s) == ST_OK ||
		 s == NULL); /* no IPv6 loopback in some containers */
	http_server_free(s);
	http_server_free(NULL);
}

static void
t_get_plain(void)
{
	http_server *s = server_new(&cors_cfg);
	int fd = cl_connect(http_server_port(s));
	st_buf b;
	resp r;
	char v[256];

	st_buf_init(&b);
	cl_puts(fd, "GET /hdr?a=1 HTTP/1.1\r\nHost: x\r\nX-Test:   spaced value  \r\n\r\n");
	ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1);
	ST_CHECK(strncmp(r.head, "HTTP/1.1 200 OK\r\n", 17) == 0);
	ST_CHECK_MEM(r.body, r.blen, "spaced value|a=1|GET");
	ST_CHECK_STR(hdr(&r, "Content-Type", v, sizeof(v)), "text/plain");
	ST_CHECK_STR(hdr(&r, "Content-Length", v, sizeof(v)), "20");
	ST_CHECK_STR(hdr(&r, "Cache-Control", v, sizeof(v)), "no-store");
	ST_CHECK_STR(hdr(&r, "Connection", v, sizeof(v)), "keep-alive");
	ST_CHECK_STR(hdr(&r, "X-Extra", v, sizeof(v)), "1");
	ST_CHECK(hdr(&r, "Access-Control-Allow-Origin", v, sizeof(v)) == NULL);

	/* problem document with escaping, unknown path */
	st_buf_reset(&b);
	cl_puts(fd, "GET /problem HTTP/1.1\r\n\r\n");
	ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1);
	ST_CHECK(r.status == 404);
	ST_CHECK(strncmp(r.head, "HTTP/1.1 404 Not Found\r\n", 24) == 0);
	ST_CHECK_STR(hdr(&r, "Content-Type", v, sizeof(v)), "application/problem+json");
	ST_CHECK_STR(hdr(&r, "Retry-After", v, sizeof(v)), "5");
	ST_CHECK_MEM(r.body, r.blen,
		     "{\"type\":\"about:blank\",\"title\":\"No \\\"such\\\" thing\",\"status\":404,"
		     "\"detail\":\"a\\nb\\u0001\\\\ \xc3\xa9 \\ufffd\"}");
	st_buf_reset(&b);
	cl_puts(fd, "GET /nope HTTP/1.1\r\n\r\n");
	ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1);
	ST_CHECK_MEM(r.body, r.blen,
		     "{\"type\":\"about:blank\",\"title\":\"Not Found\",\"status\":404,\"detail\":\"no such path\"}");
	close(fd);
	st_buf_fini(&b);
	http_server_free(s);
}

static void
t_keepalive_and_close(void)
{
	http_server *s = server_new(NULL);
	int fd = cl_connect(http_server_port(s));
	st_buf b;
	resp r;
	char v[64];

	st_buf_init(&b);
	cl_puts(fd, "GET /hello HTTP/1.1\r\n\r\n");
	ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1);
	ST_CHECK_MEM(r.body, r.blen, "hello\n");
	st_buf_reset(&b);
	cl_puts(fd, "\r\nGET /hello HTTP/1.1\r\nConnection: Keep-Alive\r\n\r\n"); /* a stray CRLF first */
	ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1);
	ST_CHECK_MEM(r.body, r.blen, "hello\n");
	ST_CHECK_STR(hdr(&r, "Connection", v, sizeof(v)), "keep-alive");
	/* Connection: close -> close after the response */
	st_buf_reset(&b);
	cl_puts(fd, "GET /hello HTTP/1.1\r\nConnection: foo, close\r\n\r\n");
	ST_CHECK(cl_read_eof(fd, &b, 3000));
	{
		size_t off = 0;

		ST_CHECK(resp_at(&b, &off, &r, false, false));
		ST_CHECK_STR(hdr(&r, "Connection", v, sizeof(v)), "close");
		ST_CHECK(off == b.len);
	}
	close(fd);
	/* HTTP/1.0 -> close */
	fd = cl_connect(http_server_port(s));
	st_buf_reset(&b);
	cl_puts(fd, "GET /hello HTTP/1.0\r\n\r\n");
	ST_CHECK(cl_read_eof(fd, &b, 3000));
	ST_CHECK(b.len > 0 && strstr(b.p, "Connection: close\r\n") != NULL && strstr(b.p, "\r\n\r\nhello\n"));
	close(fd);
	ST_CHECK(T.calls >= 4);
	st_buf_fini(&b);
	http_server_free(s);
}

static void
t_pipelined(void)
{
	http_server *s = server_new(NULL);
	int fd = cl_connect(http_server_port(s));
	st_buf b;
	resp r[3];

	st_buf_init(&b);
	/* The middle one is answered later: the order must hold. */
	cl_puts(fd, "GET /hello HTTP/1.1\r\n\r\nGET /defer HTTP/1.1\r\n\r\nGET /hdr?z HTTP/1.1\r\n\r\n");
	ST_CHECK(cl_read_resps(fd, &b, r, 3, 5000) == 3);
	ST_CHECK_MEM(r[0].body, r[0].blen, "hello\n");
	ST_CHECK_MEM(r[1].body, r[1].blen, "later\n");
	ST_CHECK_MEM(r[2].body, r[2].blen, "(none)|z|GET");
	close(fd);
	st_buf_fini(&b);
	http_server_free(s);
}

static void
t_head(void)
{
	http_server *s = server_new(NULL);
	int fd = cl_connect(http_server_port(s));
	st_buf b;
	resp r;
	size_t off = 0;
	char v[64];

	st_buf_init(&b);
	cl_puts(fd, "HEAD /hello HTTP/1.1\r\n\r\nGET /hello HTTP/1.1\r\n\r\n");
	PUMP_UNTIL((cl_poll(fd, &b), b.len > 0 && strstr(b.p, "hello\n")), 3000);
	ST_CHECK(resp_at(&b, &off, &r, true, false));
	ST_CHECK(r.status == 200 && r.blen == 0);
	ST_CHECK_STR(hdr(&r, "Content-Length", v, sizeof(v)), "6");
	ST_CHECK(resp_at(&b, &off, &r, false, false));
	ST_CHECK(strncmp(r.head, "HTTP/1.1 200 OK\r\n", 17) == 0); /* no stray body before it */
	ST_CHECK_MEM(r.body, r.blen, "hello\n");
	ST_CHECK(off == b.len);
	close(fd);

	/* A HEAD stream: headers, then EOF; on_close(abrupt=false). */
	fd = cl_connect(http_server_port(s));
	st_buf_reset(&b);
	cl_puts(fd, "HEAD /end HTTP/1.1\r\n\r\n");
	ST_CHECK(cl_read_eof(fd, &b, 3000));
	off = 0;
	ST_CHECK(resp_at(&b, &off, &r, false, true));
	ST_CHECK(r.blen == 0);
	ST_CHECK_STR(hdr(&r, "Content-Type", v, sizeof(v)), "application/x-ndjson");
	close(fd);
	PUMP_UNTIL(T.rec.closed, 3000);
	ST_CHECK(T.rec.closed == 1 && !T.rec.abrupt);
	st_buf_fini(&b);
	http_server_free(s);
}

static void
t_options_cors(void)
{
	http_server *s = server_new(&cors_cfg);
	http_server *star;
	http_server_config sc = { .cors_origins = "*" };
	int fd = cl_connect(http_server_port(s));
	st_buf b;
	resp r;
	char v[128];

	st_buf_init(&b);
	cl_puts(fd, "OPTIONS /v1/stream HTTP/1.1\r\nOrigin: https://b.example\r\n"
		    "Access-Control-Request-Method: GET\r\n\r\n");
	ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1);
	ST_CHECK(strncmp(r.head, "HTTP/1.1 204 No Content\r\n", 25) == 0);
	ST_CHECK_STR(hdr(&r, "Access-Control-Allow-Origin", v, sizeof(v)), "https://b.example");
	ST_CHECK_STR(hdr(&r, "Vary", v, sizeof(v)), "Origin");
	ST_CHECK_STR(hdr(&r, "Access-Control-Allow-Methods", v, sizeof(v)), "GET, HEAD, OPTIONS");
	ST_CHECK_STR(hdr(&r, "Access-Control-Allow-Headers", v, sizeof(v)),
		     "Last-Event-ID, Accept, Cache-Control, Authorization");
	ST_CHECK_STR(hdr(&r, "Access-Control-Max-Age", v, sizeof(v)), "600");
	ST_CHECK(hdr(&r, "Content-Length", v, sizeof(v)) == NULL);
	ST_CHECK(hdr(&r, "Allow", v, sizeof(v)) == NULL);
	ST_CHECK(hdr(&r, "Access-Control-Allow-Credentials", v, sizeof(v)) == NULL);

	st_buf_reset(&b);
	cl_puts(fd, "OPTIONS /v1/stream HTTP/1.1\r\nOrigin: https://evil.example\r\n\r\n");
	ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1);
	ST_CHECK(r.status == 204);
	ST_CHECK_STR(hdr(&r, "Allow", v, sizeof(v)), "GET, HEAD, OPTIONS");
	ST_CHECK(hdr(&r, "Access-Control-Allow-Origin", v, sizeof(v)) == NULL);
	ST_CHECK(hdr(&r, "Access-Control-Allow-Methods", v, sizeof(v)) == NULL);

	/* CORS on a plain GET, present then absent. */
	st_buf_reset(&b);
	cl_puts(fd, "GET /hello HTTP/1.1\r\nOrigin: https://a.example\r\n\r\n");
	ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1);
	ST_CHECK_STR(hdr(&r, "Access-Control-Allow-Origin", v, sizeof(v)), "https://a.example");
	st_buf_reset(&b);
	cl_puts(fd, "GET /hello HTTP/1.1\r\nOrigin: https://a.example.evil\r\n\r\n");
	ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1);
	ST_CHECK(hdr(&r, "Access-Control-Allow-Origin", v, sizeof(v)) == NULL);
	ST_CHECK(T.calls == 2); /* OPTIONS never reached the handler */

	/* With credentials (edge access control): beside the echoed origin only. */
	http_server_set_cors_credentials(s, true);
	st_buf_reset(&b);
	cl_puts(fd, "GET /hello HTTP/1.1\r\nOrigin: https://b.example\r\n\r\n");
	ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1);
	ST_CHECK_STR(hdr(&r, "Access-Control-Allow-Origin", v, sizeof(v)), "https://b.example");
	ST_CHECK_STR(hdr(&r, "Access-Control-Expose-Headers", v, sizeof(v)), "Retry-After, Studio-Until");
	ST_CHECK_STR(hdr(&r, "Access-Control-Allow-Credentials", v, sizeof(v)), "true");
	st_buf_reset(&b);
	cl_puts(fd, "OPTIONS /v1/stream HTTP/1.1\r\nOrigin: https://b.example\r\n\r\n");
	ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1);
	ST_CHECK_STR(hdr(&r, "Access-Control-Allow-Credentials", v, sizeof(v)), "true");
	st_buf_reset(&b);
	cl_puts(fd, "GET /hello HTTP/1.1\r\nOrigin: https://evil.example\r\n\r\n");
	ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1);
	ST_CHECK(hdr(&r, "Access-Control-Allow-Credentials", v, sizeof(v)) == NULL);
	ST_CHECK(hdr(&r, "Access-Control-Allow-Origin", v, sizeof(v)) == NULL);
	close(fd);
	http_server_free(s);

	/* "*" allows any origin; a stream carries it too. */
	star = server_new(&sc);
	fd = cl_connect(http_server_port(star));
	st_buf_reset(&b);
	cl_puts(fd, "GET /end HTTP/1.1\r\nOrigin: http://x.test:8080\r\n\r\n");
	ST_CHECK(cl_read_eof(fd, &b, 3000));
	{
		size_t off = 0;

		ST_CHECK(resp_at(&b, &off, &r, false, true));
		ST_CHECK_STR(hdr(&r, "Access-Control-Allow-Origin", v, sizeof(v)), "http://x.test:8080");
	}
	close(fd);
	st_buf_fini(&b);
	http_server_free(star);
}

/* --cors-origins at start: null and non-loopback http:// refused (issue 25). */
static void
t_cors_origins_check(void)
{
	static const struct {
		const char *list;
		bool ok;
		const char *why; /* a part of the reason */
	} cases[] = {
		{ "", true, NULL },
		{ "*", true, NULL },
		{ "https://app.example", true, NULL },
		{ "https://app.example:8443, https://b.example", true, NULL },
		{ "http://localhost", true, NULL },
		{ "http://localhost:3000", true, NULL },
		{ "HTTP://127.0.0.1:8080", true, NULL },
		{ "http://[::1]:5173", true, NULL },
		{ "http://[::1]", true, NULL },
		{ "null", false, "origin null is refused" },
		{ "https://a.example, NULL", false, "origin null is refused" },
		{ "http://app.example", false, "origin http://app.example: plain http://" },
		{ "http://127.0.0.2", false, "plain http://" },
		{ "http://localhost.evil.example", false, "plain http://" },
		{ "http://localhost:80x", false, "plain http://" },
		{ "http://localhost:", false, "plain http://" },
		{ "http://[::1", false, "plain http://" },
		{ "http://", false, "must be https://" },
		{ "app.example", false, "origin app.example: must be https://" },
		{ "file://", false, "must be https://" },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		char why[300] = "";
		bool ok = http_cors_origins_check(cases[i].list, why, sizeof(why));

		if (ok != cases[i].ok || (cases[i].why && strstr(why, cases[i].why) == NULL))
			fprintf(stderr, "%s: got %d (%s), want %d (%s)\n", cases[i].list, ok, why, cases[i].ok,
				cases[i].why ? cases[i].why : "");
		ST_CHECK(ok == cases[i].ok);
		ST_CHECK(cases[i].why == NULL || strstr(why, cases[i].why) != NULL);
	}
}

/* cors_path: CORS answers (and preflights) only on that path, never on /metrics. */
static void
t_cors_path(void)
{
	static const http_server_config pc = { .cors_origins = "https://a.example", .cors_path = "/v1/stream" };
	http_server *s = server_new(&pc);
	int fd = cl_connect(http_server_port(s));
	st_buf b;
	resp r;
	char v[128];

	http_server_set_cors_credentials(s, true);
	st_buf_init(&b);
	cl_puts(fd, "GET /hello HTTP/1.1\r\nOrigin: https://a.example\r\n\r\n");
	ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1);
	ST_CHECK(hdr(&r, "Access-Control-Allow-Origin", v, sizeof(v)) == NULL);
	ST_CHECK(hdr(&r, "Access-Control-Allow-Credentials", v, sizeof(v)) == NULL);
	st_buf_reset(&b);
	cl_puts(fd, "OPTIONS /metrics HTTP/1.1\r\nOrigin: https://a.example\r\n\r\n");
	ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1);
	ST_CHECK(r.status == 204);
	ST_CHECK(hdr(&r, "Access-Control-Allow-Origin", v, sizeof(v)) == NULL);
	ST_CHECK_STR(hdr(&r, "Allow", v, sizeof(v)), "GET, HEAD, OPTIONS");
	st_buf_reset(&b);
	cl_puts(fd, "OPTIONS /v1/stream HTTP/1.1\r\nOrigin: https://a.example\r\n\r\n");
	ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1);
	ST_CHECK_STR(hdr(&r, "Access-Control-Allow-Origin", v, sizeof(v)), "https://a.example");
	ST_CHECK_STR(hdr(&r, "Access-Control-Allow-Credentials", v, sizeof(v)), "true");
	close(fd);
	st_buf_fini(&b);
	http_server_free(s);
}

/*
 * RFC 9112 3.2: the absolute-form is served as its path and query (a
 * server MUST accept it); '*' is OPTIONS's (answered like a preflight).
 */
static void
t_target_forms(void)
{
	http_server *s = server_new(NULL);
	int fd = cl_connect(http_server_port(s));
	st_buf b;
	resp r;
	char v[128], req[256];
	int calls0 = T.calls;

	st_buf_init(&b);
	snprintf(req, sizeof(req), "GET http://127.0.0.1:%d/hdr?a=1 HTTP/1.1\r\nHost: other\r\nX-Test: abs\r\n\r\n",
		 http_server_port(s));
	cl_puts(fd, req);
	ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1);
	ST_CHECK(r.status == 200);
	ST_CHECK_MEM(r.body, r.blen, "abs|a=1|GET");

	st_buf_reset(&b);
	cl_puts(fd, "GET HTTPS://[::1]:8443/hdr HTTP/1.1\r\n\r\n");
	ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1);
	ST_CHECK(r.status == 200);
	ST_CHECK_MEM(r.body, r.blen, "(none)||GET");

	/* An empty path is "/" and the query keeps its place. */
	st_buf_reset(&b);
	cl_puts(fd, "GET http://x.example?z=1 HTTP/1.1\r\n\r\n");
	ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1);
	ST_CHECK(r.status == 404);
	ST_CHECK(T.calls == calls0 + 3);

	/* OPTIONS * is the server-wide OPTIONS: 204 with Allow, no handler. */
	st_buf_reset(&b);
	cl_puts(fd, "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n");
	ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1);
	ST_CHECK(r.status == 204);
	ST_CHECK_STR(hdr(&r, "Allow", v, sizeof(v)), "GET, HEAD, OPTIONS");
	ST_CHECK(T.calls == calls0 + 3);
	close(fd);
	st_buf_fini(&b);
	http_server_free(s);
}

/* Sends raw bytes on a fresh connection, expects a refusal and EOF. */
static void
expect_refusal(http_server *s, const char *req, size_t len, int status)
{
	int fd = cl_connect(http_server_port(s));
	st_buf b;
	resp r;
	size_t off = 0;
	char v[64], want[64];

	st_buf_init(&b);
	cl_send(fd, req, len);
	ST_CHECK(cl_read_eof(fd, &b, 5000));
	ST_CHECK(resp_at(&b, &off, &r, false, false));
	if (r.status != status)
		fprintf(stderr, "  request %.40s: status %d, want %d\n", req, r.status, status);
	ST_CHECK(r.status == status);
	ST_CHECK_STR(hdr(&r, "Connection", v, sizeof(v)), "close");
	ST_CHECK_STR(hdr(&r, "Content-Type", v, sizeof(v)), "application/problem+json");
	snprintf(want, sizeof(want), "\"status\":%d", status);
	ST_CHECK(r.blen > 0 && memmem(r.body, r.blen, want, strlen(want)) != NULL);
	close(fd);
	st_buf_fini(&b);
}

static void
t_refusals(void)
{
	static const struct {
		const char *req;
		int status;
	} tab[] = {
		{ "GET\r\n\r\n", 400 },
		{ "GET /  HTTP/1.1\r\n\r\n", 400 },
		{ "GET * HTTP/1.1\r\n\r\n", 400 },
		{ "GET x:443 HTTP/1.1\r\n\r\n", 400 },
		{ "GET ftp://x/hello HTTP/1.1\r\n\r\n", 400 },
		{ "GET http:///hello HTTP/1.1\r\n\r\n", 400 },
		{ "GET http://:80/hello HTTP/1.1\r\n\r\n", 400 },
		{ "GET http://u:p@x/hello HTTP/1.1\r\n\r\n", 400 },
		{ "GET hello HTTP/1.1\r\n\r\n", 400 },
		{ "CONNECT x.example:443 HTTP/1.1\r\n\r\n", 405 },
		{ "GET / HTTP/2.0\r\n\r\n", 505 },
		{ "GET / HTTP/1.1 x\r\n\r\n", 400 },
		{ "GET / FOO/1.1\r\n\r\n", 400 },
		{ "G@T / HTTP/1.1\r\n\r\n", 400 },
		{ "GET / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n", 400 },
		{ "GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400 },
		{ "GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400 },
		{ "GET / HTTP/1.1\r\nX : x\r\n\r\n", 400 },
		{ "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", 400 },
		{ "GET / HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400 },
		{ "GET /hello HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 413 },
		{ "GET /hello HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 413 },
	};
	http_server *s = server_new(NULL);
	st_buf big;

	for (size_t i = 0; i < ST_ARRAY_LEN(tab); i++)
		expect_refusal(s, tab[i].req, strlen(tab[i].req), tab[i].status);
	/* Content-Length: 0 is fine */
	{
		int fd = cl_connect(http_server_port(s));
		st_buf b;
		resp r;

		st_buf_init(&b);
		cl_puts(fd, "GET /hello HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
		ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1 && r.status == 200);
		close(fd);
		st_buf_fini(&b);
	}
	/* 431: one huge header, then too many headers */
	st_buf_init(&big);
	st_buf_puts(&big, "GET /hello HTTP/1.1\r\nX-Big: ");
	for (int i = 0; i < 9000; i++)
		st_buf_putc(&big, 'a');
	st_buf_puts(&big, "\r\n\r\n");
	expect_refusal(s, big.p, big.len, 431);
	st_buf_reset(&big);
	st_buf_puts(&big, "GET /hello HTTP/1.1\r\n");
	for (int i = 0; i < 101; i++)
		st_buf_printf(&big, "H%d: v\r\n", i);
	st_buf_puts(&big, "\r\n");
	expect_refusal(s, big.p, big.len, 431);
	st_buf_fini(&big);
	ST_CHECK(T.calls == 1);
	http_server_free(s);
}

static void
t_header_timeout(void)
{
	http_server_config cfg = { .header_timeout_ms = 200 };
	http_server *s = server_new(&cfg);
	int fd = cl_connect(http_server_port(s));
	uint64_t t0 = now(), next = t0, elapsed;
	st_buf b;
	bool eof = false;

	st_buf_init(&b);
	cl_puts(fd, "GET /hello HTTP/1.1\r\n");
	/* A slow sender: one header line every 40 ms, never finishing. */
	while (!eof && now() < t0 + 3000) {
		if (now() >= next) {
			cl_puts(fd, "X-Slow: 1\r\n");
			next += 40;
		}
		event_base_loop(base, EVLOOP_ONCE);
		eof = cl_poll(fd, &b);
	}
	elapsed = now() - t0;
	ST_CHECK(eof);
	ST_CHECK(elapsed >= 150 && elapsed < 2500);
	ST_CHECK(b.len == 0);
	ST_CHECK(T.calls == 0);
	close(fd);

	/* Keep-alive: the timer restarts after each response, then an idle
	 * connection is closed too. */
	fd = cl_connect(http_server_port(s));
	{
		resp r;

		cl_puts(fd, "GET /hello HTTP/1.1\r\n\r\n");
		ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1);
		pump_ms(120);
		st_buf_reset(&b);
		cl_puts(fd, "GET /hello HTTP/1.1\r\n\r\n");
		ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1 && r.status == 200);
		st_buf_reset(&b);
		ST_CHECK(cl_read_eof(fd, &b, 3000));
		ST_CHECK(b.len == 0);
	}
	close(fd);
	st_buf_fini(&b);
	http_server_free(s);
}

static void
t_stream_big(void)
{
	http_server *s = server_new(NULL);
	int fd = cl_connect(http_server_port(s));
	st_buf b;
	resp r;
	size_t off = 0;
	char v[64];
	int bad = 0;

	for (size_t i = 0; i < sizeof(bigdata); i++)
		bigdata[i] = (unsigned char)(i * 7 % 251);
	memset(big_cleanups, 0, sizeof(big_cleanups));
	st_buf_init(&b);
	cl_puts(fd, "GET /big HTTP/1.1\r\n\r\n");
	ST_CHECK(cl_read_eof(fd, &b, 20000));
	ST_CHECK(resp_at(&b, &off, &r, false, true));
	ST_CHECK(r.status == 200);
	ST_CHECK_STR(hdr(&r, "Connection", v, sizeof(v)), "close");
	ST_CHECK_STR(hdr(&r, "X-Accel-Buffering", v, sizeof(v)), "no");
	ST_CHECK_STR(hdr(&r, "Cache-Control", v, sizeof(v)), "no-store");
	ST_CHECK(hdr(&r, "Content-Length", v, sizeof(v)) == NULL);
	ST_CHECK_EQ_U64(r.blen, sizeof(bigdata));
	ST_CHECK(r.blen == sizeof(bigdata) && memcmp(r.body, bigdata, sizeof(bigdata)) == 0);
	close(fd);
	PUMP_UNTIL(T.rec.closed, 3000);
	ST_CHECK(T.rec.closed == 1 && !T.rec.abrupt);
	ST_CHECK(T.rec.writable > 1); /* paced by on_writable, not written at once */
	pump_ms(20);
	for (int i = 0; i < BIG_N; i++)
		bad += big_cleanups[i] != 1;
	ST_CHECK(bad == 0);
	st_buf_fini(&b);
	http_server_free(s);
}

static void
t_stream_client_close(void)
{
	http_server *s = server_new(NULL);
	int fd = cl_connect(http_server_port(s));
	st_buf b;
	char v[64];
	resp r;
	size_t off = 0;

	st_buf_init(&b);
	cl_puts(fd, "GET /stream HTTP/1.1\r\n\r\n");
	PUMP_UNTIL((cl_poll(fd, &b), b.len > 0 && strstr(b.p, "\r\n\r\n")), 3000);
	ST_CHECK(resp_at(&b, &off, &r, false, true));
	ST_CHECK_STR(hdr(&r, "X-Stream", v, sizeof(v)), "yes");
	ST_CHECK_STR(hdr(&r, "Content-Type", v, sizeof(v)), "text/event-stream");
	ST_CHECK(T.rec.s != NULL);
	ST_CHECK(strncmp(http_stream_peer(T.rec.s), "127.0.0.1:", 10) == 0);
	http_stream_write(T.rec.s, "data: 1\n\n", 9);
	PUMP_UNTIL((cl_poll(fd, &b), strstr(b.p, "data: 1\n\n")), 3000);
	ST_CHECK(strstr(b.p, "data: 1\n\n") != NULL);
	/* the client sends junk (discarded), then goes away */
	cl_puts(fd, "ignored bytes");
	pump_ms(20);
	ST_CHECK(T.rec.closed == 0);
	close(fd);
	PUMP_UNTIL(T.rec.closed, 3000);
	ST_CHECK(T.rec.closed == 1 && T.rec.abrupt);
	st_buf_fini(&b);
	http_server_free(s);
}

/* The count and the sum of the delivery histogram, from its rendering. */
static void
delivery_read(st_metrics *m, unsigned *count, double *sum)
{
	double c = st_test_metric(m, "t_delivery_seconds_count");

	*count = c < 0 ? 0 : (unsigned)c;
	*sum = st_test_metric(m, "t_delivery_seconds_sum");
}

/* Stamped bytes are observed once, when they reached the kernel; unstamped ones never. */
static void
t_stream_delivery(void)
{
	static const double bounds[] = { 0.001, 1 };
	http_server *s = server_new(NULL);
	st_metrics *m = st_metrics_new();
	st_histogram *h = st_metrics_histogram(m, "t_delivery_seconds", NULL, "test", bounds, 2);
	int fd = cl_connect(http_server_port(s));
	unsigned count;
	double sum;
	st_buf b;

	http_server_set_delivery_histogram(s, h);
	st_buf_init(&b);
	cl_puts(fd, "GET /stream HTTP/1.1\r\n\r\n");
	PUMP_UNTIL((cl_poll(fd, &b), b.len > 0 && strstr(b.p, "\r\n\r\n")), 3000);
	ST_CHECK(T.rec.s != NULL);
	http_stream_write(T.rec.s, "data: 1\n\n", 9);
	PUMP_UNTIL((cl_poll(fd, &b), strstr(b.p, "data: 1\n\n")), 3000);
	delivery_read(m, &count, &sum);
	ST_CHECK_EQ_U64(count, 0);
	/* Two buffers, the first with an origin 5 ms old (the second's, newer, is not the one
	 * timed): written to the kernel at once, one observation of >= 5 ms. */
	{
		uint64_t now = st_clock_mono_ns();
		const http_ref refs[2] = { { "data: 2\n\n", 9, NULL, NULL, now - 5000000u },
					   { "data: 3\n\n", 9, NULL, NULL, now } };

		http_stream_write_refs(T.rec.s, refs, 2);
	}
	PUMP_UNTIL((cl_poll(fd, &b), strstr(b.p, "data: 3\n\n")), 3000);
	ST_CHECK(strstr(b.p, "data: 2\n\ndata: 3\n\n") != NULL);
	delivery_read(m, &count, &sum);
	ST_CHECK_EQ_U64(count, 1);
	ST_CHECK(sum >= 0.005 && sum < 1);
	/* Queued behind other bytes (copied, no origin) the next origin is not taken: not timed. */
	http_stream_write(T.rec.s, "data: 4\n\n", 9);
	{
		const http_ref r = { "data: 5\n\n", 9, NULL, NULL, st_clock_mono_ns() };

		http_stream_write_refs(T.rec.s, &r, 1);
	}
	PUMP_UNTIL((cl_poll(fd, &b), strstr(b.p, "data: 5\n\n")), 3000);
	delivery_read(m, &count, &sum);
	ST_CHECK_EQ_U64(count, 1);
	close(fd);
	PUMP_UNTIL(T.rec.closed, 3000);
	st_buf_fini(&b);
	http_server_free(s);
	st_metrics_free(m);
}

static void
t_stream_no_reader(void)
{
	http_server *s = server_new(NULL);
	int fd = cl_connect_rcvbuf(http_server_port(s), 4096);
	size_t written = 0, b1, b2;
	int w0;
	enum { N = 32 };
	static unsigned char mb[1 << 20];

	mb_cleanups = 0;
	cl_puts(fd, "GET /stream HTTP/1.1\r\n\r\n");
	PUMP_UNTIL(T.rec.s != NULL, 3000);
	ST_CHECK(T.rec.s != NULL);
	if (!T.rec.s)
		goto out;
	pump_ms(50);
	ST_CHECK(http_stream_blocked_ms(T.rec.s, now()) == 0); /* nothing queued */
	w0 = T.rec.writable;
	for (int i = 0; i < N; i++) {
		http_stream_write_ref(T.rec.s, mb, sizeof(mb), mb_cleanup, NULL);
		written += sizeof(mb);
	}
	ST_CHECK(http_stream_backlog(T.rec.s) <= written);
	pump_ms(300);
	b1 = http_stream_backlog(T.rec.s);
	ST_CHECK(b1 > 0 && b1 <= written);
	pump_ms(200);
	b2 = http_stream_backlog(T.rec.s);
	ST_CHECK(b2 <= b1);
	ST_CHECK(T.rec.writable == w0);
	ST_CHECK(http_stream_blocked_ms(T.rec.s, now()) > 0);
	ST_CHECK(mb_cleanups == 0 || b2 < written);
	http_stream_abort(T.rec.s);
	ST_CHECK(T.rec.closed == 0); /* deferred, never under the caller */
	/* A reference handed to an aborted stream is released from the loop too. */
	{
		int before = mb_cleanups;

		http_stream_write_ref(T.rec.s, mb, sizeof(mb), mb_cleanup, NULL);
		ST_CHECK(mb_cleanups == before);
	}
	PUMP_UNTIL(T.rec.closed && mb_cleanups == N + 1, 3000);
	ST_CHECK(T.rec.closed == 1 && T.rec.abrupt);
	ST_CHECK(mb_cleanups == N + 1);
out:
	close(fd);
	http_server_free(s);
}

/*
 * The quiet time asks the kernel, not only st_http's output: a client that
 * reads shows in its acknowledgements however long our own output has not
 * moved (ten seconds later on the caller's clock here), and one that stops
 * reading grows quiet.  Flow control's stall rule reads it (issue 27: a
 * 6 MB/s reader looked stalled for ~55 ms at a time to the output's measure).
 */
static void
t_stream_quiet(void)
{
	http_server *s = server_new(NULL);
	int fd = cl_connect_rcvbuf(http_server_port(s), 4096);
	static unsigned char mb[1 << 20];
	char tmp[65536];
	uint64_t later, quiet = 0;

	cl_puts(fd, "GET /stream HTTP/1.1\r\n\r\n");
	PUMP_UNTIL(T.rec.s != NULL, 3000);
	ST_CHECK(T.rec.s != NULL);
	if (!T.rec.s)
		goto out;
	ST_CHECK_EQ_U64(http_stream_quiet_ms(T.rec.s, now() + 10000), 0); /* nothing waits */
	for (int i = 0; i < 4; i++)
		http_stream_write_ref(T.rec.s, mb, sizeof(mb), mb_cleanup, NULL);
	PUMP_UNTIL(http_stream_backlog(T.rec.s) > 0, 3000);
	ST_CHECK(http_stream_backlog(T.rec.s) > 0);
	/* The client reads some: the kernel hears from it at once. */
	PUMP_UNTIL(recv(fd, tmp, sizeof(tmp), 0) > 0, 3000);
	pump_ms(5);
	later = now() + 10000;
	ST_CHECK(http_stream_blocked_ms(T.rec.s, later) >= 10000);
	quiet = http_stream_quiet_ms(T.rec.s, later);
	if (quiet >= 5000)
		fprintf(stderr, "quiet_ms %llu after the client read (blocked_ms %llu)\n", (unsigned long long)quiet,
			(unsigned long long)http_stream_blocked_ms(T.rec.s, later));
	ST_CHECK(quiet < 5000);
	/* It stops reading: the quiet time grows (the kernel's window probes are >= 200 ms apart). */
	PUMP_UNTIL((quiet = http_stream_quiet_ms(T.rec.s, now() + 10000)) >= 60, 5000);
	if (quiet < 60)
		fprintf(stderr, "quiet_ms %llu with the client not reading for 5 s\n", (unsigned long long)quiet);
	ST_CHECK(quiet >= 60);
	http_stream_abort(T.rec.s);
	PUMP_UNTIL(T.rec.closed, 3000);
out:
	close(fd);
	http_server_free(s);
}

static void
t_stream_end(void)
{
	http_server *s = server_new(NULL);
	int fd = cl_connect(http_server_port(s));
	st_buf b, want;
	resp r;
	size_t off = 0;

	st_buf_init(&b);
	st_buf_init(&want);
	for (int i = 0; i < 100; i++)
		st_buf_puts(&want, "{\"n\":1}\n");
	cl_puts(fd, "GET /end HTTP/1.1\r\n\r\n");
	ST_CHECK(cl_read_eof(fd, &b, 5000));
	ST_CHECK(resp_at(&b, &off, &r, false, true));
	ST_CHECK_MEM(r.body, r.blen, want.p);
	close(fd);
	PUMP_UNTIL(T.rec.closed, 3000);
	ST_CHECK(T.rec.closed == 1 && !T.rec.abrupt);
	st_buf_fini(&b);
	st_buf_fini(&want);
	http_server_free(s);
}

static void
t_deferred_and_gone(void)
{
	http_server *s = server_new(NULL);
	int fd = cl_connect(http_server_port(s));
	st_buf b;
	resp r;
	uint64_t t0 = now();

	st_buf_init(&b);
	cl_puts(fd, "GET /defer HTTP/1.1\r\n\r\n");
	ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1);
	ST_CHECK(now() - t0 >= 40);
	ST_CHECK_MEM(r.body, r.blen, "later\n");
	/* still keep-alive afterwards */
	st_buf_reset(&b);
	cl_puts(fd, "GET /hello HTTP/1.1\r\n\r\n");
	ST_CHECK(cl_read_resps(fd, &b, &r, 1, 3000) == 1);
	ST_CHECK_MEM(r.body, r.blen, "hello\n");
	close(fd);

	T.gone = 0;
	fd = cl_connect(http_server_port(s));
	cl_puts(fd, "GET /gone HTTP/1.1\r\n\r\n");
	PUMP_UNTIL(T.held != NULL, 3000);
	ST_CHECK(T.held != NULL);
	close(fd);
	PUMP_UNTIL(T.gone, 3000);
	ST_CHECK(T.gone == 1 && T.held == NULL);

	/* server free: a pending request gets gone, a stream on_close(abrupt) */
	fd = cl_connect(http_server_port(s));
	cl_puts(fd, "GET /gone HTTP/1.1\r\n\r\n");
	PUMP_UNTIL(T.held != NULL, 3000);
	{
		int fd2 = cl_connect(http_server_port(s));

		cl_puts(fd2, "GET /stream HTTP/1.1\r\n\r\n");
		PUMP_UNTIL(T.rec.s != NULL, 3000);
		ST_CHECK(T.rec.s != NULL);
		http_server_free(s);
		ST_CHECK(T.gone == 2);
		ST_CHECK(T.rec.closed == 1 && T.rec.abrupt);
		pump_ms(20);
		st_buf_reset(&b);
		ST_CHECK(cl_read_eof(fd2, &b, 3000));
		close(fd2);
	}
	close(fd);
	st_buf_fini(&b);
}

static void
t_max_conns(void)
{
	http_server_config cfg = { .max_conns = 2 };
	http_server *s = server_new(&cfg);
	int a = cl_connect(http_server_port(s));
	int c2 = cl_connect(http_server_port(s));
	int c3;
	st_buf b;
	resp r;

	st_buf_init(&b);
	pump_ms(50);
	c3 = cl_connect(http_server_port(s));
	ST_CHECK(cl_read_eof(c3, &b, 3000));
	ST_CHECK(b.len == 0);
	cl_puts(a, "GET /hello HTTP/1.1\r\n\r\n");
	ST_CHECK(cl_read_resps(a, &b, &r, 1, 3000) == 1 && r.status == 200);
	st_buf_reset(&b);
	cl_puts(c2, "GET /hello HTTP/1.1\r\n\r\n");
	ST_CHECK(cl_read_resps(c2, &b, &r, 1, 3000) == 1 && r.status == 200);
	close(c3);
	/* a slot frees when a connection closes */
	close(a);
	pump_ms(50);
	a = cl_connect(http_server_port(s));
	st_buf_reset(&b);
	cl_puts(a, "GET /hello HTTP/1.1\r\n\r\n");
	ST_CHECK(cl_read_resps(a, &b, &r, 1, 3000) == 1 && r.status == 200);
	close(a);
	close(c2);
	http_server_free(s);

	/* Two servers sharing one limit of 2 (as the loops of one address do): the third connection is refused. */
	{
		http_conn_limit *l = http_conn_limit_new(2);
		http_server *s1 = NULL, *s2 = NULL;

		ST_ASSERT(http_server_new_shared(base, "127.0.0.1:0", NULL, l, handler, NULL, &s1) == ST_OK);
		ST_ASSERT(http_server_new_shared(base, "127.0.0.1:0", NULL, l, handler, NULL, &s2) == ST_OK);
		a = cl_connect(http_server_port(s1));
		c2 = cl_connect(http_server_port(s2));
		pump_ms(50);
		ST_CHECK(http_conn_limit_open(l) == 2);
		c3 = cl_connect(http_server_port(s2));
		st_buf_reset(&b);
		ST_CHECK(cl_read_eof(c3, &b, 3000));
		ST_CHECK(b.len == 0);
		close(c3);
		cl_puts(c2, "GET /hello HTTP/1.1\r\n\r\n");
		ST_CHECK(cl_read_resps(c2, &b, &r, 1, 3000) == 1 && r.status == 200);
		close(a);
		pump_ms(50);
		ST_CHECK(http_conn_limit_open(l) == 1);
		a = cl_connect(http_server_port(s2));
		st_buf_reset(&b);
		cl_puts(a, "GET /hello HTTP/1.1\r\n\r\n");
		ST_CHECK(cl_read_resps(a, &b, &r, 1, 3000) == 1 && r.status == 200);
		close(a);
		close(c2);
		http_server_free(s1);
		http_server_free(s2);
		ST_CHECK(http_conn_limit_open(l) == 0);
		http_conn_limit_free(l);
	}
	st_buf_fini(&b);
}

/* Idle streams: our struct plus what libevent holds per bufferevent. */
static void
t_memory_per_stream(void)
{
	enum { N = 100 };
	http_server *s = server_new(NULL);
	int fds[N];
	http_stream *ss[N];
	size_t before, after, per, total;
	st_buf b;

	st_buf_init(&b);
	pump_ms(10);
	before = ev_bytes;
	for (int i = 0; i < N; i++) {
		fds[i] = cl_connect(http_server_port(s));
		cl_puts(fds[i], "GET /stream HTTP/1.1\r\n\r\n");
		T.rec.s = NULL;
		PUMP_UNTIL(T.rec.s != NULL, 3000);
		ss[i] = T.rec.s;
	}
	pump_ms(50);
	for (int i = 0; i < N; i++)
		cl_poll(fds[i], &b);
	pump_ms(20);
	after = ev_bytes;
	per = (after - before) / N;
	total = per + http_stream_struct_size_();
	fprintf(stderr, "  idle stream: struct http_stream %zu B + libevent %zu B = %zu B\n",
		http_stream_struct_size_(), per, total);
	/* Streams hold no bufferevent (docs/performance.md "Idle stream"): 312 + 33 B when measured. */
	ST_CHECK(total < 512);
	for (int i = 0; i < N; i++) {
		if (ss[i])
			http_stream_abort(ss[i]);
		close(fds[i]);
	}
	pump_ms(20);
	st_buf_fini(&b);
	http_server_free(s);
}

int
main(void)
{
	struct event *tick;
	struct timeval tv = { 0, 5000 };

	signal(SIGPIPE, SIG_IGN);
	event_set_mem_functions(cnt_malloc, cnt_realloc, cnt_free);
	base = event_base_new();
	tick = event_new(base, -1, EV_PERSIST, tick_cb, NULL);
	event_add(tick, &tv);
	T.later = evtimer_new(base, later_cb, NULL);

#define RUN(fn)                                   \
	do {                                      \
		T.calls = 0;                      \
		memset(&T.rec, 0, sizeof(T.rec)); \
		ST_RUN(fn);                       \
	} while (0)
	RUN(t_bad_listen);
	RUN(t_get_plain);
	RUN(t_keepalive_and_close);
	RUN(t_pipelined);
	RUN(t_head);
	RUN(t_options_cors);
	RUN(t_cors_origins_check);
	RUN(t_cors_path);
	RUN(t_refusals);
	RUN(t_target_forms);
	RUN(t_header_timeout);
	RUN(t_stream_big);
	RUN(t_stream_client_close);
	RUN(t_stream_delivery);
	RUN(t_stream_no_reader);
	RUN(t_stream_quiet);
	RUN(t_stream_end);
	RUN(t_deferred_and_gone);
	RUN(t_max_conns);
	RUN(t_memory_per_stream);

	event_free(T.later);
	event_free(tick);
	event_base_free(base);
	return st_test_done();
}
