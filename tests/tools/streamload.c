/*
 * streamload: opens many concurrent SSE streams on one edge-gateway and
 * reports what each of them received, as one JSON object on stdout.
 *
 * Design: one thread, one epoll set, one small state machine per stream
 * (CONNECTING -> SENDING -> HEADERS -> BODY -> DONE).  Connections are opened
 * at a bounded rate (--rate per second) so the load itself does not look like
 * a SYN flood.  The body is de-chunked (HTTP/1.1 chunked or close-delimited)
 * and parsed as an event stream with LF or CRLF line ends; the envelope of
 * each data event is inspected with plain string searches (the edge writes
 * compact JSON), which is enough to count items, resyncs, terminal
 * envelopes, reconnect reasons and retry hints, and to check that ids
 * strictly increase.  In stall mode (--stall-s S) nothing is read during the
 * first S seconds (with --rcvbuf the receive buffer is also small), then the
 * stream is read to its end like any other, so a test can see whether the
 * edge ended it with a well-formed reconnect.  One shared read buffer; per
 * stream only a line buffer and a data buffer, each capped (a line over
 * 4 MiB is a parse error), so 2,000 streams cost a few MiB here.
 *
 * Exit status: 0 when the run ended (all streams done, or --timeout-s / --hold-s
 * reached), 2 on bad usage.  Outcome judgement is the caller's job.
 *
 * SIZE.  Over 800 lines on purpose: a standalone tool (epoll client, the
 * three body formats, the JSON report) that links nothing of the project.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES (4u << 20)
#define MAX_HEADERS 16
#define MAX_RETRIES_KEPT 100000

enum state { ST_IDLE, ST_CONNECTING, ST_SENDING, ST_HEADERS, ST_BODY, ST_DONE };
enum chunk_state { CH_SIZE, CH_DATA, CH_CRLF, CH_TRAILER, CH_END };
enum outcome {
	OC_OPEN,
	OC_COMPLETE,
	OC_FAILURE,
	OC_RECONNECT,
	OC_ABRUPT,
	OC_REJECTED,
	OC_CONNECT_ERROR,
	OC_NO_RESPONSE,
	OC_CLIENT_CLOSED,
	OC_COUNT
};
static const char *outcome_names[OC_COUNT] = { "open",          "complete",     "failure",
					       "reconnect",     "abrupt_close", "rejected",
					       "connect_error", "no_response",  "client_closed" };

struct buf {
	char *p;
	size_t len, cap;
};

struct stream {
	int fd;
	enum state st;
	size_t sent;
	int status;
	int chunked;
	enum chunk_state ch;
	uint64_t chunk_left;
	struct buf hdr;  /* response head, then chunk-size lines */
	struct buf line; /* current SSE line */
	struct buf data; /* data of the current event */
	char id[32];
	int has_id;
	char event[32];
	long retry_field;
	/* results */
	uint64_t items, resyncs, heartbeats, bytes, regressions, missing_id, after_terminal;
	uint64_t last_id;
	int terminal; /* enum outcome of the terminal envelope, or OC_OPEN */
	char reason[32];
	long retry_ms;
	double t_connect, t_headers, t_terminal, t_end;
	enum outcome outcome;
	int parse_error;
	int err; /* errno of a connect error */
};

static struct {
	const char *host;
	int port;
	const char *path;
	int n;
	double rate;
	double stall_s;
	int rcvbuf;
	double timeout_s;
	double hold_s;
	const char *headers[MAX_HEADERS];
	int nheaders;
	const char *ready_file;
	int per_stream;
} opt = { "127.0.0.1", 0, NULL, 1, 500.0, 0.0, 0, 120.0, 0.0, { NULL }, 0, NULL, 0 };

static struct stream *streams;
static int epfd = -1;
static char request[8192];
static size_t request_len;
static double t_start;
static char rbuf[256 * 1024];

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
die_usage(const char *msg)
{
	fprintf(stderr,
		"streamload: %s\n"
		"usage: streamload --port P --path '/v1/stream?topic=t' [-n N] [--host 127.0.0.1]\n"
		"       [--rate CONNECTS_PER_S] [--stall-s S] [--rcvbuf BYTES] [--timeout-s S]\n"
		"       [--hold-s S] [--header 'K: V']... [--ready-file PATH] [--per-stream]\n",
		msg);
	exit(2);
}

static int
buf_add(struct buf *b, const char *p, size_t n, size_t cap_limit)
{
	if (b->len + n > cap_limit)
		return -1;
	if (b->len + n + 1 > b->cap) {
		size_t c = b->cap ? b->cap : 256;
		while (c < b->len + n + 1)
			c *= 2;
		char *q = realloc(b->p, c);
		if (q == NULL) {
			fprintf(stderr, "streamload: out of memory\n");
			exit(1);
		}
		b->p = q;
		b->cap = c;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

static void
buf_free(struct buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

/* Copies the string value of "key":"..." (compact JSON) into out. */
static int
json_str(const char *j, const char *key, char *out, size_t outsz)
{
	char pat[64];
	const char *p, *e;

	snprintf(pat, sizeof(pat), "\"%s\":\"", key);
	if ((p = strstr(j, pat)) == NULL)
		return -1;
	p += strlen(pat);
	if ((e = strchr(p, '"')) == NULL || (size_t)(e - p) >= outsz)
		return -1;
	memcpy(out, p, (size_t)(e - p));
	out[e - p] = '\0';
	return 0;
}

static int
json_num(const char *j, const char *key, long *out)
{
	char pat[64];
	const char *p;
	char *end;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	if ((p = strstr(j, pat)) == NULL)
		return -1;
	p += strlen(pat);
	errno = 0;
	*out = strtol(p, &end, 10);
	return (end == p || errno != 0) ? -1 : 0;
}

static void
stream_close(struct stream *s, enum outcome oc)
{
	if (s->st == ST_DONE)
		return;
	if (s->fd >= 0) {
		epoll_ctl(epfd, EPOLL_CTL_DEL, s->fd, NULL);
		close(s->fd);
		s->fd = -1;
	}
	s->outcome = oc;
	s->st = ST_DONE;
	s->t_end = now_s();
	buf_free(&s->hdr);
	buf_free(&s->line);
	buf_free(&s->data);
}

static void
dispatch(struct stream *s)
{
	char type[32], reason[32];

	if (s->data.len == 0) {
		/*
		 * An id without data: the stream position (docs/api.md), the
		 * first thing a stream without Last-Event-ID sends.  Every item
		 * after it must be above it.
		 */
		if (s->has_id) {
			char *end;
			uint64_t id = strtoull(s->id, &end, 10);

			if (*end != '\0' || end == s->id)
				s->parse_error++;
			else if (s->last_id != 0 && id <= s->last_id)
				s->regressions++;
			else
				s->last_id = id;
		}
		s->event[0] = '\0';
		s->has_id = 0;
		return;
	}
	if (s->terminal != OC_OPEN)
		s->after_terminal++;
	if (json_str(s->data.p, "type", type, sizeof(type)) != 0) {
		s->parse_error++;
	} else if (strcmp(type, "item") == 0 || strcmp(type, "resync") == 0) {
		char *end;
		uint64_t id;

		if (!s->has_id) {
			s->missing_id++;
		} else {
			id = strtoull(s->id, &end, 10);
			if (*end != '\0' || end == s->id)
				s->parse_error++;
			else if (s->last_id != 0 && id <= s->last_id)
				s->regressions++;
			else
				s->last_id = id;
		}
		if (type[0] == 'i')
			s->items++;
		else
			s->resyncs++;
	} else if (strcmp(type, "heartbeat") == 0) {
		s->heartbeats++;
	} else if (s->terminal == OC_OPEN &&
		   (strcmp(type, "reconnect") == 0 || strcmp(type, "complete") == 0 || strcmp(type, "failure") == 0)) {
		s->terminal = type[0] == 'r' ? OC_RECONNECT : type[0] == 'c' ? OC_COMPLETE : OC_FAILURE;
		s->t_terminal = now_s();
		if (s->terminal == OC_RECONNECT) {
			if (json_str(s->data.p, "reason", reason, sizeof(reason)) == 0)
				snprintf(s->reason, sizeof(s->reason), "%s", reason);
			if (json_num(s->data.p, "retry_ms", &s->retry_ms) != 0)
				s->retry_ms = -1;
		}
	}
	s->data.len = 0;
	s->event[0] = '\0';
	s->has_id = 0;
}

static void
sse_line(struct stream *s, char *l, size_t n)
{
	char *v;
	size_t vn;

	if (n > 0 && l[n - 1] == '\r')
		l[--n] = '\0';
	if (n == 0) {
		dispatch(s);
		return;
	}
	if (l[0] == ':') {
		if (strcmp(l, ": heartbeat") == 0 || strcmp(l, ":heartbeat") == 0)
			s->heartbeats++;
		return;
	}
	v = memchr(l, ':', n);
	if (v == NULL) {
		v = l + n;
		vn = 0;
	} else {
		*v++ = '\0';
		if (*v == ' ')
			v++;
		vn = (size_t)(l + n - v);
	}
	if (strcmp(l, "data") == 0) {
		if (s->data.len > 0 && buf_add(&s->data, "\n", 1, LINE_MAX_BYTES) != 0)
			s->parse_error++;
		if (buf_add(&s->data, v, vn, LINE_MAX_BYTES) != 0)
			s->parse_error++;
	} else if (strcmp(l, "id") == 0) {
		snprintf(s->id, sizeof(s->id), "%s", v);
		s->has_id = 1;
	} else if (strcmp(l, "event") == 0) {
		snprintf(s->event, sizeof(s->event), "%s", v);
	} else if (strcmp(l, "retry") == 0) {
		s->retry_field = strtol(v, NULL, 10);
	}
}

static void
sse_feed(struct stream *s, const char *p, size_t n)
{
	while (n > 0) {
		const char *nl = memchr(p, '\n', n);
		size_t take = nl ? (size_t)(nl - p) : n;

		if (buf_add(&s->line, p, take, LINE_MAX_BYTES) != 0) {
			s->parse_error++;
			s->line.len = 0;
		}
		if (nl == NULL)
			return;
		if (s->line.p == NULL)
			buf_add(&s->line, "", 0, LINE_MAX_BYTES);
		sse_line(s, s->line.p, s->line.len);
		s->line.len = 0;
		p += take + 1;
		n -= take + 1;
	}
}

/* De-chunks p[0..n) into the SSE parser; returns -1 on a framing error. */
static int
body_feed(struct stream *s, const char *p, size_t n)
{
	if (!s->chunked) {
		sse_feed(s, p, n);
		return 0;
	}
	while (n > 0 && s->ch != CH_END) {
		if (s->ch == CH_DATA) {
			size_t take = n < s->chunk_left ? n : (size_t)s->chunk_left;
			sse_feed(s, p, take);
			p += take;
			n -= take;
			s->chunk_left -= take;
			if (s->chunk_left == 0)
				s->ch = CH_CRLF;
			continue;
		}
		/* size, CRLF and trailer states are line based */
		const char *nl = memchr(p, '\n', n);
		size_t take = nl ? (size_t)(nl - p) : n;
		if (buf_add(&s->hdr, p, take, 1024) != 0)
			return -1;
		if (nl == NULL)
			return 0;
		p += take + 1;
		n -= take + 1;
		if (s->hdr.len > 0 && s->hdr.p[s->hdr.len - 1] == '\r')
			s->hdr.p[--s->hdr.len] = '\0';
		if (s->ch == CH_CRLF) {
			if (s->hdr.len != 0)
				return -1;
			s->ch = CH_SIZE;
		} else if (s->ch == CH_SIZE) {
			char *end;
			if (s->hdr.len == 0)
				return -1;
			s->chunk_left = strtoull(s->hdr.p, &end, 16);
			if (end == s->hdr.p)
				return -1;
			s->ch = s->chunk_left ? CH_DATA : CH_TRAILER;
		} else if (s->ch == CH_TRAILER) {
			if (s->hdr.len == 0)
				s->ch = CH_END;
		}
		s->hdr.len = 0;
	}
	return 0;
}

static void
stream_eof(struct stream *s)
{
	if (s->st == ST_HEADERS) {
		stream_close(s, OC_NO_RESPONSE);
		return;
	}
	if (s->line.len > 0 || s->data.len > 0)
		s->parse_error++; /* a frame cut in the middle */
	stream_close(s, s->terminal != OC_OPEN ? (enum outcome)s->terminal : OC_ABRUPT);
}

static int
parse_head(struct stream *s)
{
	char *p = s->hdr.p, *eol;

	if (strncmp(p, "HTTP/1.", 7) != 0 || strlen(p) < 12)
		return -1;
	s->status = atoi(p + 9);
	s->chunked = 0;
	for (p = strchr(p, '\n'); p != NULL; p = eol) {
		p++;
		eol = strchr(p, '\n');
		if (strncasecmp(p, "transfer-encoding:", 18) == 0) {
			char *v = p + 18;
			size_t vl = eol ? (size_t)(eol - v) : strlen(v);
			for (size_t i = 0; i + 7 <= vl; i++)
				if (strncasecmp(v + i, "chunked", 7) == 0)
					s->chunked = 1;
		}
	}
	return 0;
}

static void
stream_read(struct stream *s)
{
	for (int rounds = 0; rounds < 16; rounds++) {
		ssize_t r = recv(s->fd, rbuf, sizeof(rbuf), 0);
		size_t off = 0;

		if (r == 0) {
			stream_eof(s);
			return;
		}
		if (r < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				return;
			stream_eof(s);
			return;
		}
		s->bytes += (uint64_t)r;
		if (s->st == ST_HEADERS) {
			char *end;
			size_t before = s->hdr.len;

			if (buf_add(&s->hdr, rbuf, (size_t)r, 65536) != 0) {
				stream_close(s, OC_NO_RESPONSE);
				return;
			}
			if ((end = strstr(s->hdr.p, "\r\n\r\n")) == NULL)
				continue;
			*end = '\0';
			off = (size_t)(end + 4 - s->hdr.p) - before;
			if (parse_head(s) != 0) {
				stream_close(s, OC_NO_RESPONSE);
				return;
			}
			s->t_headers = now_s();
			s->hdr.len = 0;
			s->ch = CH_SIZE;
			if (s->status != 200) {
				stream_close(s, OC_REJECTED);
				return;
			}
			s->st = ST_BODY;
		}
		if (body_feed(s, rbuf + off, (size_t)r - off) != 0) {
			s->parse_error++;
			stream_close(s, OC_ABRUPT);
			return;
		}
		if (s->chunked && s->ch == CH_END) {
			stream_close(s, s->terminal != OC_OPEN ? (enum outcome)s->terminal : OC_ABRUPT);
			return;
		}
	}
}

static void
stream_open(struct stream *s)
{
	struct sockaddr_in a;
	struct epoll_event ev;
	int fd;

	s->t_connect = now_s();
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)opt.port);
	if (inet_pton(AF_INET, opt.host, &a.sin_addr) != 1)
		die_usage("--host must be an IPv4 address");
	if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) == -1) {
		s->err = errno;
		stream_close(s, OC_CONNECT_ERROR);
		return;
	}
	if (opt.rcvbuf > 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &opt.rcvbuf, sizeof(opt.rcvbuf));
	s->fd = fd;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == -1 && errno != EINPROGRESS) {
		s->err = errno;
		stream_close(s, OC_CONNECT_ERROR);
		return;
	}
	s->st = ST_CONNECTING;
	memset(&ev, 0, sizeof(ev));
	ev.events = EPOLLOUT;
	ev.data.ptr = s;
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == -1)
		stream_close(s, OC_CONNECT_ERROR);
}

static void
set_interest(struct stream *s, uint32_t events)
{
	struct epoll_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.events = events;
	ev.data.ptr = s;
	/* a parked (stalled) descriptor was taken out of the set */
	if (epoll_ctl(epfd, EPOLL_CTL_MOD, s->fd, &ev) == -1 && errno == ENOENT)
		epoll_ctl(epfd, EPOLL_CTL_ADD, s->fd, &ev);
}

static void
stream_write(struct stream *s, int reading)
{
	if (s->st == ST_CONNECTING) {
		int err = 0;
		socklen_t l = sizeof(err);

		getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &l);
		if (err != 0) {
			s->err = err;
			stream_close(s, OC_CONNECT_ERROR);
			return;
		}
		s->st = ST_SENDING;
	}
	while (s->sent < request_len) {
		ssize_t w = send(s->fd, request + s->sent, request_len - s->sent, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return;
			s->err = errno;
			stream_close(s, OC_CONNECT_ERROR);
			return;
		}
		s->sent += (size_t)w;
	}
	s->st = ST_HEADERS;
	/* A stalled stream is left out of the epoll set until it may read. */
	set_interest(s, reading ? EPOLLIN | EPOLLRDHUP : 0);
}

static void
print_json(void)
{
	uint64_t oc[OC_COUNT] = { 0 };
	uint64_t items = 0, resyncs = 0, hb = 0, reg = 0, miss = 0, after = 0, perr = 0, bytes = 0;
	uint64_t items_min = UINT64_MAX, items_max = 0, last_min = UINT64_MAX, last_max = 0;
	double term_min = 0, term_max = 0, end_max = 0, hdr_max = 0;
	int statuses[600] = { 0 };
	int sent = 0;

	/* reasons: small fixed table */
	char rnames[8][32];
	int rcount[8] = { 0 }, nr = 0;

	for (int i = 0; i < opt.n; i++) {
		struct stream *s = &streams[i];
		enum outcome o = s->st == ST_DONE ? s->outcome : OC_OPEN;

		oc[o]++;
		if (s->sent == request_len && request_len > 0)
			sent++;
		if (s->status > 0 && s->status < 600)
			statuses[s->status]++;
		items += s->items;
		resyncs += s->resyncs;
		hb += s->heartbeats;
		reg += s->regressions;
		miss += s->missing_id;
		after += s->after_terminal;
		perr += (uint64_t)s->parse_error;
		bytes += s->bytes;
		if (s->status == 200) {
			if (s->items < items_min)
				items_min = s->items;
			if (s->items > items_max)
				items_max = s->items;
			if (s->last_id < last_min)
				last_min = s->last_id;
			if (s->last_id > last_max)
				last_max = s->last_id;
			if (s->t_headers > hdr_max)
				hdr_max = s->t_headers;
		}
		if (s->terminal != OC_OPEN) {
			if (term_min == 0 || s->t_terminal < term_min)
				term_min = s->t_terminal;
			if (s->t_terminal > term_max)
				term_max = s->t_terminal;
		}
		if (s->st == ST_DONE && s->t_end > end_max)
			end_max = s->t_end;
		if (s->terminal == OC_RECONNECT) {
			int k;
			for (k = 0; k < nr; k++)
				if (strcmp(rnames[k], s->reason) == 0)
					break;
			if (k == nr && nr < 8)
				snprintf(rnames[nr++], sizeof(rnames[0]), "%s", s->reason);
			if (k < 8)
				rcount[k]++;
		}
	}
	if (items_min == UINT64_MAX)
		items_min = 0;
	if (last_min == UINT64_MAX)
		last_min = 0;
	printf("{\"streams\":%d,\"requests_sent\":%d,\"status\":{", opt.n, sent);
	for (int st = 0, first = 1; st < 600; st++)
		if (statuses[st]) {
			printf("%s\"%d\":%d", first ? "" : ",", st, statuses[st]);
			first = 0;
		}
	printf("},\"outcomes\":{");
	for (int o = 0; o < OC_COUNT; o++)
		printf("%s\"%s\":%llu", o ? "," : "", outcome_names[o], (unsigned long long)oc[o]);
	printf("},\"reasons\":{");
	for (int k = 0; k < nr; k++)
		printf("%s\"%s\":%d", k ? "," : "", rnames[k], rcount[k]);
	printf("},\"items\":%llu,\"items_min\":%llu,\"items_max\":%llu,\"resyncs\":%llu,"
	       "\"heartbeats\":%llu,\"last_id_min\":%llu,\"last_id_max\":%llu,"
	       "\"id_regressions\":%llu,\"missing_sse_id\":%llu,\"frames_after_terminal\":%llu,"
	       "\"parse_errors\":%llu,\"bytes\":%llu,",
	       (unsigned long long)items, (unsigned long long)items_min, (unsigned long long)items_max,
	       (unsigned long long)resyncs, (unsigned long long)hb, (unsigned long long)last_min,
	       (unsigned long long)last_max, (unsigned long long)reg, (unsigned long long)miss,
	       (unsigned long long)after, (unsigned long long)perr, (unsigned long long)bytes);
	printf("\"t_start\":%.6f,\"t_headers_max\":%.6f,\"t_terminal_min\":%.6f,"
	       "\"t_terminal_max\":%.6f,\"t_end_max\":%.6f,\"retry_ms\":[",
	       t_start, hdr_max, term_min, term_max, end_max);
	for (int i = 0, first = 1, kept = 0; i < opt.n && kept < MAX_RETRIES_KEPT; i++)
		if (streams[i].terminal == OC_RECONNECT) {
			printf("%s%ld", first ? "" : ",", streams[i].retry_ms);
			first = 0;
			kept++;
		}
	printf("],\"connect_errno\":{");
	{
		int cnt[256] = { 0 }, first = 1;
		for (int i = 0; i < opt.n; i++)
			if (streams[i].err > 0 && streams[i].err < 256)
				cnt[streams[i].err]++;
		for (int e = 1; e < 256; e++)
			if (cnt[e]) {
				printf("%s\"%s\":%d", first ? "" : ",", strerror(e), cnt[e]);
				first = 0;
			}
	}
	printf("}");
	if (opt.per_stream) {
		printf(",\"per_stream\":[");
		for (int i = 0; i < opt.n; i++) {
			struct stream *s = &streams[i];
			enum outcome o = s->st == ST_DONE ? s->outcome : OC_OPEN;
			printf("%s{\"status\":%d,\"outcome\":\"%s\",\"items\":%llu,\"resyncs\":%llu,"
			       "\"last_id\":%llu,\"regressions\":%llu,\"reason\":\"%s\",\"retry_ms\":%ld,"
			       "\"retry_field\":%ld,\"t_terminal\":%.6f,\"t_end\":%.6f,\"parse_errors\":%d}",
			       i ? "," : "", s->status, outcome_names[o], (unsigned long long)s->items,
			       (unsigned long long)s->resyncs, (unsigned long long)s->last_id,
			       (unsigned long long)s->regressions, s->reason, s->retry_ms, s->retry_field,
			       s->t_terminal, s->t_end, s->parse_error);
		}
		printf("]");
	}
	printf("}\n");
	fflush(stdout);
}

static volatile sig_atomic_t got_signal;

static void
on_signal(int sig)
{
	(void)sig;
	got_signal = 1;
}

static double
arg_num(int argc, char **argv, int *i)
{
	char *end;
	double v;

	if (*i + 1 >= argc)
		die_usage("missing value");
	v = strtod(argv[++*i], &end);
	if (*end != '\0' || end == argv[*i])
		die_usage("bad number");
	return v;
}

int
main(int argc, char **argv)
{
	struct rlimit rl;
	struct epoll_event evs[512];
	int opened = 0, ready_written = 0;
	double next_open, stall_until;
	int reading;
	size_t off;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--host") == 0 && i + 1 < argc)
			opt.host = argv[++i];
		else if (strcmp(argv[i], "--port") == 0)
			opt.port = (int)arg_num(argc, argv, &i);
		else if (strcmp(argv[i], "--path") == 0 && i + 1 < argc)
			opt.path = argv[++i];
		else if (strcmp(argv[i], "-n") == 0)
			opt.n = (int)arg_num(argc, argv, &i);
		else if (strcmp(argv[i], "--rate") == 0)
			opt.rate = arg_num(argc, argv, &i);
		else if (strcmp(argv[i], "--stall-s") == 0)
			opt.stall_s = arg_num(argc, argv, &i);
		else if (strcmp(argv[i], "--rcvbuf") == 0)
			opt.rcvbuf = (int)arg_num(argc, argv, &i);
		else if (strcmp(argv[i], "--timeout-s") == 0)
			opt.timeout_s = arg_num(argc, argv, &i);
		else if (strcmp(argv[i], "--hold-s") == 0)
			opt.hold_s = arg_num(argc, argv, &i);
		else if (strcmp(argv[i], "--header") == 0 && i + 1 < argc && opt.nheaders < MAX_HEADERS)
			opt.headers[opt.nheaders++] = argv[++i];
		else if (strcmp(argv[i], "--ready-file") == 0 && i + 1 < argc)
			opt.ready_file = argv[++i];
		else if (strcmp(argv[i], "--per-stream") == 0)
			opt.per_stream = 1;
		else
			die_usage("unknown argument");
	}
	if (opt.port <= 0 || opt.port > 65535 || opt.path == NULL || opt.path[0] != '/')
		die_usage("--port and --path are required");
	if (opt.n < 1 || opt.n > 100000 || opt.rate <= 0)
		die_usage("-n must be 1..100000 and --rate positive");

	off = (size_t)snprintf(request, sizeof(request),
			       "GET %s HTTP/1.1\r\nHost: %s:%d\r\nAccept: text/event-stream\r\n", opt.path, opt.host,
			       opt.port);
	for (int i = 0; i < opt.nheaders && off < sizeof(request); i++)
		off += (size_t)snprintf(request + off, sizeof(request) - off, "%s\r\n", opt.headers[i]);
	if (off + 3 >= sizeof(request))
		die_usage("request too long");
	off += (size_t)snprintf(request + off, sizeof(request) - off, "\r\n");
	request_len = off;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)opt.n + 64) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	signal(SIGPIPE, SIG_IGN);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	if ((streams = calloc((size_t)opt.n, sizeof(*streams))) == NULL)
		return 1;
	for (int i = 0; i < opt.n; i++) {
		streams[i].fd = -1;
		streams[i].terminal = OC_OPEN;
		streams[i].retry_ms = -1;
		streams[i].retry_field = -1;
	}
	if ((epfd = epoll_create1(EPOLL_CLOEXEC)) == -1)
		return 1;
	t_start = now_s();
	next_open = t_start;
	stall_until = t_start + opt.stall_s;
	reading = opt.stall_s <= 0;

	for (;;) {
		double t = now_s();
		int timeout_ms, nev, active = 0, settled = 0;

		if (got_signal)
			break;
		if (t - t_start >= opt.timeout_s)
			break;
		if (opt.hold_s > 0 && t - t_start >= opt.hold_s)
			break;
		while (opened < opt.n && t >= next_open) {
			stream_open(&streams[opened++]);
			next_open += 1.0 / opt.rate;
		}
		if (!reading && t >= stall_until) {
			reading = 1;
			for (int i = 0; i < opened; i++)
				if (streams[i].st == ST_HEADERS || streams[i].st == ST_BODY)
					set_interest(&streams[i], EPOLLIN | EPOLLRDHUP);
		}
		for (int i = 0; i < opened; i++) {
			enum state st = streams[i].st;
			if (st != ST_DONE)
				active++;
			if (st == ST_DONE || st == ST_BODY || (!reading && st == ST_HEADERS))
				settled++;
		}
		if (!ready_written && opened == opt.n && settled == opt.n) {
			ready_written = 1;
			fprintf(stderr, "streamload: READY %d streams %.3f s after start\n", opt.n, now_s() - t_start);
			if (opt.ready_file != NULL) {
				FILE *f = fopen(opt.ready_file, "w");
				if (f != NULL) {
					fprintf(f, "ready %.6f\n", now_s());
					fclose(f);
				}
			}
		}
		if (opened == opt.n && active == 0)
			break;
		timeout_ms = 100;
		if (opened < opt.n) {
			double d = (next_open - t) * 1000.0;
			timeout_ms = d < 1 ? 1 : d < 100 ? (int)d : 100;
		}
		nev = epoll_wait(epfd, evs, 512, timeout_ms);
		for (int k = 0; k < nev; k++) {
			struct stream *s = evs[k].data.ptr;
			if (s->st == ST_DONE)
				continue;
			if (s->st == ST_CONNECTING || s->st == ST_SENDING) {
				stream_write(s, reading);
				continue;
			}
			if (!reading) {
				/* EPOLLHUP/EPOLLERR arrive even with no events asked
				 * for: park the stalled descriptor until it may read. */
				epoll_ctl(epfd, EPOLL_CTL_DEL, s->fd, NULL);
				continue;
			}
			stream_read(s);
		}
	}
	for (int i = 0; i < opt.n; i++)
		if (streams[i].st != ST_DONE && streams[i].st != ST_IDLE && opt.hold_s > 0)
			stream_close(&streams[i], OC_CLIENT_CLOSED);
	print_json();
	return 0;
}
