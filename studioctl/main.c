/*
 * studioctl: the ops CLI (docs/api.md "studioctl").
 *
 * DESIGN
 * One short-lived process per command, so blocking nng calls are fine here;
 * what matters is that nothing waits for ever: every request has a
 * deadline (--timeout-ms), dials are non-blocking so an absent peer is
 * retried until that deadline instead of failing on the first refused
 * connect, and exit codes say what happened: 0 done, 1 refused (ok:false)
 * or unreachable, 2 bad usage or bad input.
 *
 * publish --file validates the whole file before sending anything (a
 * mistake on line 90,000 must not leave 89,999 events stored), then reads
 * it a second time and sends it in batches of at most PROTO_MAX_BATCH
 * events and FILE_BATCH_BYTES bytes, so memory is bounded by one batch, not
 * by the file.  stdin ("-") is first copied to a temporary file so that it
 * can be read twice.  A batch refused with "busy" stores nothing, so it is
 * retried until the deadline; any other refusal stops with exit 1, after
 * the seqs of the batches already stored were printed.
 *
 * An NDJSON event is {"topic":T,"about":[..],"data":ANY,"key":K}; about,
 * data and key are optional, and null means absent (data null is a change
 * signal).  data goes to the writer as the exact text of the value.
 */
#include "st_config.h"
#include "st_control.h"
#include "st_preflight.h"
#include "st_json.h"
#include "st_log.h"
#include "st_clock.h"
#include "st_tls.h"
#include "st_util.h"
#include "wire.h"

#include <errno.h>
#include <stdarg.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROG "studioctl"
#define FILE_BATCH_BYTES (8u * 1024 * 1024)
#define MAX_LINE (1024u * 1024)        /* one NDJSON event line */
#define MAX_LINE_NODES 300000          /* 256 KiB of data is at most ~131k values */
#define MAX_REPLY (1024u * 1024)       /* 10,000 seqs fit many times over */
#define BUSY_RETRY_MS 200

enum { O_WRITER, O_CONTROL, O_TOPIC, O_ABOUT, O_DATA, O_KEY, O_FILE, O_TICKS, O_COUNT, O_TIMEOUT_S,
       O_TIMEOUT_MS, O_TLS_CERT, O_TLS_KEY, O_TLS_CA, O_N };

static st_opt opts[O_N] = {
	[O_WRITER] = { .name = "writer", .kind = ST_OPT_STR,
	               .help = "publish: the writer's ingest URL; tail: its publish URL",
	               .check = st_preflight_dial_urls },
	[O_CONTROL] = { .name = "control", .kind = ST_OPT_STR, .help = "stats, drain, reload: the control URL",
	                .check = st_preflight_dial_urls },
	[O_TOPIC] = { .name = "topic", .kind = ST_OPT_STR, .help = "publish: the event's topic" },
	[O_ABOUT] = { .name = "about", .kind = ST_OPT_LIST,
	              .help = "publish: what the event is about (values with commas: use --file)" },
	[O_DATA] = { .name = "data", .kind = ST_OPT_STR,
	             .help = "publish: the event's data, a JSON text (absent: a change signal)" },
	[O_KEY] = { .name = "key", .kind = ST_OPT_STR, .help = "publish: idempotency key" },
	[O_FILE] = { .name = "file", .kind = ST_OPT_STR,
	             .help = "publish: NDJSON file of events, one a line (- for stdin)" },
	[O_TICKS] = { .name = "ticks", .kind = ST_OPT_BOOL, .def = "false", .help = "tail: also print ticks" },
	[O_COUNT] = { .name = "count", .kind = ST_OPT_INT, .def = "0", .min = 0, .max = INT64_MAX,
	              .help = "tail: exit after N events (0: no limit)" },
	[O_TIMEOUT_S] = { .name = "timeout-s", .kind = ST_OPT_INT, .def = "0", .min = 0, .max = 31536000,
	                  .help = "tail: exit 0 after S seconds (0: no limit)" },
	[O_TIMEOUT_MS] = { .name = "timeout-ms", .kind = ST_OPT_INT, .def = "10000", .min = 1, .max = 3600000,
	                   .help = "publish, stats, drain: give up on a request after this long" },
	/* Mutual TLS on tls+tcp:// URLs (docs/security.md). */
	[O_TLS_CERT] = { .name = "tls-cert", .kind = ST_OPT_STR, .def = "", .help = "PEM certificate for tls+tcp:// URLs" },
	[O_TLS_KEY] = { .name = "tls-key", .kind = ST_OPT_STR, .def = "", .help = "PEM private key of --tls-cert",
	                .secret = true },
	[O_TLS_CA] = { .name = "tls-ca", .kind = ST_OPT_STR, .def = "", .help = "PEM CA that signs the writers and edges" },
};

static const char usage[] =
	PROG " publish --writer URL --topic T [--about A]... [--data JSON] [--key K]\n"
	"       " PROG " publish --writer URL --file EVENTS.ndjson\n"
	"       " PROG " tail --writer URL [--ticks] [--count N] [--timeout-s S]\n"
	"       " PROG " stats|drain|reload --control URL";

static uint64_t
now_ms(void)
{
	return st_clock_now(st_clock_system());
}

static void
sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

/*
 * An event the writer would refuse as invalid, found before sending: the
 * same outcome as the writer's refusal (exit 1, nothing sent, so nothing
 * stored), with one line saying why.  Exit 2 stays for usage and input
 * that is not JSON at all.
 */
static void refuse(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void
refuse(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, PROG ": invalid event, not sent: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
	exit(1);
}

/* ---- event validation (the contract's bounds, checked before sending) ---- */

static bool
topic_ok(const char *s, size_t len)
{
	if (len < 1 || len > PROTO_MAX_TOPIC)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];

		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
		      c == '_' || c == ':' || c == '/' || c == '-'))
			return false;
	}
	return true;
}

static const char *
text_problem(const char *s, size_t len, size_t max)
{
	if (len < 1)
		return "is empty";
	if (len > max)
		return "is longer than 200 bytes";
	if (!st_utf8_valid(s, len))
		return "is not valid UTF-8 or holds a NUL byte";
	return NULL;
}

/*
 * NULL when s is a valid event data text, otherwise what is wrong ("is
 * longer than 256 KiB", "is not a valid JSON text"); *detail then gets the
 * JSON parser's reason when it has one (a static string), else NULL.
 */
static const char *
data_problem(const char *s, size_t len, const char **detail)
{
	char *tmp;
	size_t n = 0;
	st_err rv;

	*detail = NULL;
	if (len > PROTO_MAX_DATA)
		return "is longer than 256 KiB";
	tmp = st_xmalloc(len + 1);
	rv = st_json_compact(s, len, tmp, &n, detail);
	free(tmp);
	return rv == ST_OK ? NULL : "is not a valid JSON text";
}

/* Upper bound of one event's msgpack size, for the batch byte limit. */
static size_t
event_bytes(const proto_event *ev)
{
	size_t n = 64 + ev->topic.len + (ev->has_data ? ev->data.len : 0) + (ev->has_key ? ev->key.len : 0);

	for (uint32_t i = 0; i < ev->n_about; i++)
		n += 5 + ev->about[i].len;
	return n;
}

/* One parsed NDJSON line: the DOM owns every string the event points to. */
typedef struct ev_line {
	st_json *j;
	proto_str *about;
	proto_event ev;
} ev_line;

static void
ev_line_fini(ev_line *l)
{
	st_json_free(l->j);
	free(l->about);
	memset(l, 0, sizeof(*l));
}

/*
 * Parses and checks one line; on error err gets the reason.  ST_EPROTO: the
 * line is not JSON at all (bad input, exit 2); ST_EINVAL: it is JSON but
 * not an event the writer would accept (a refused request, exit 1).
 */
static st_err
ev_line_parse(ev_line *l, const char *line, size_t len, char *err, size_t cap)
{
	st_json *j = NULL;
	int n;
	const char *s, *why, *detail;
	size_t slen;

	memset(l, 0, sizeof(*l));
	if (st_json_parse(line, len, MAX_LINE_NODES, &j) != ST_OK) {
		char *tmp = st_xmalloc(len + 1);
		size_t clen = 0;
		bool json = st_json_compact(line, len, tmp, &clen, NULL) == ST_OK;

		free(tmp);
		if (json) {
			/* valid JSON beyond the DOM's bound: more values than any event has */
			snprintf(err, cap, "more than %d JSON values: larger than any valid event", MAX_LINE_NODES);
			goto fail;
		}
		snprintf(err, cap, "not a valid JSON text");
		ev_line_fini(l);
		return ST_EPROTO;
	}
	l->j = j;
	if (st_json_type(j, 0) != ST_JSON_OBJECT) {
		snprintf(err, cap, "not a JSON object");
		goto fail;
	}
	for (size_t i = 0; i < st_json_count(j, 0); i++) {
		const char *k = st_json_key_at(j, 0, i);

		if (strcmp(k, "topic") && strcmp(k, "about") && strcmp(k, "data") && strcmp(k, "key")) {
			snprintf(err, cap, "unknown member \"%.40s\"", k);
			goto fail;
		}
	}
	if ((n = st_json_get(j, 0, "topic")) < 0 || (s = st_json_str(j, n, &slen)) == NULL) {
		snprintf(err, cap, "\"topic\" must be a string");
		goto fail;
	}
	if (!topic_ok(s, slen)) {
		snprintf(err, cap, "\"topic\" must be 1..200 bytes of [A-Za-z0-9._:/-]");
		goto fail;
	}
	l->ev.topic = (proto_str){ s, slen };
	if ((n = st_json_get(j, 0, "about")) >= 0 && st_json_type(j, n) != ST_JSON_NULL) {
		size_t na = st_json_count(j, n);

		if (st_json_type(j, n) != ST_JSON_ARRAY) {
			snprintf(err, cap, "\"about\" must be an array of strings");
			goto fail;
		}
		if (na > PROTO_MAX_ABOUT) {
			snprintf(err, cap, "\"about\" has more than 64 entries");
			goto fail;
		}
		l->about = st_xcalloc(na ? na : 1, sizeof(proto_str));
		for (size_t i = 0; i < na; i++) {
			if ((s = st_json_str(j, st_json_at(j, n, i), &slen)) == NULL) {
				snprintf(err, cap, "\"about\" must be an array of strings");
				goto fail;
			}
			if ((why = text_problem(s, slen, PROTO_MAX_ABOUT_LEN)) != NULL) {
				snprintf(err, cap, "\"about\" entry %zu %s", i, why);
				goto fail;
			}
			l->about[i] = (proto_str){ s, slen };
		}
		l->ev.about = l->about;
		l->ev.n_about = (uint32_t)na;
	}
	if ((n = st_json_get(j, 0, "data")) >= 0 && st_json_type(j, n) != ST_JSON_NULL) {
		st_json_raw(j, n, &s, &slen);
		if ((why = data_problem(s, slen, &detail)) != NULL) {
			snprintf(err, cap, "\"data\" %s%s%.80s%s", why, detail ? " (" : "", detail ? detail : "",
			         detail ? ")" : "");
			goto fail;
		}
		l->ev.data = (proto_str){ s, slen };
		l->ev.has_data = true;
	}
	if ((n = st_json_get(j, 0, "key")) >= 0 && st_json_type(j, n) != ST_JSON_NULL) {
		if ((s = st_json_str(j, n, &slen)) == NULL) {
			snprintf(err, cap, "\"key\" must be a string");
			goto fail;
		}
		if ((why = text_problem(s, slen, PROTO_MAX_KEY)) != NULL) {
			snprintf(err, cap, "\"key\" %s", why);
			goto fail;
		}
		l->ev.key = (proto_str){ s, slen };
		l->ev.has_key = true;
	}
	return ST_OK;
fail:
	ev_line_fini(l);
	return ST_EINVAL;
}

/* Reads one line of at most max bytes into b (without the newline).
 * Returns 1 for a line, 0 at the end, -1 for a line that is too long. */
static int
read_line(FILE *f, st_buf *b, size_t max)
{
	int c;

	st_buf_reset(b);
	while ((c = getc_unlocked(f)) != EOF && c != '\n') {
		if (b->len >= max)
			return -1;
		st_buf_putc(b, (char)c);
	}
	if (c == EOF && b->len == 0)
		return 0;
	return 1;
}

static bool
blank(const st_buf *b)
{
	for (size_t i = 0; i < b->len; i++)
		if (b->p[i] != ' ' && b->p[i] != '\t' && b->p[i] != '\r')
			return false;
	return true;
}

/* ---- requests to the writer ------------------------------------------ */

static nng_socket
req_open(const char *url)
{
	nng_socket s;
	int rv;

	if ((rv = nng_req0_open(&s)) != 0)
		st_config_fail(PROG, "cannot open a req0 socket: %s", nng_strerror(rv));
	nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, MAX_REPLY);
	nng_socket_set_ms(s, NNG_OPT_RECONNMINT, 100);
	nng_socket_set_ms(s, NNG_OPT_RECONNMAXT, 1000);
	if ((rv = st_tls_dial(s, url, NNG_FLAG_NONBLOCK)) != 0) {
		if (rv == NNG_EADDRINVAL || rv == NNG_ENOTSUP || rv == NNG_EINVAL)
			st_config_fail(PROG, "--writer: bad URL \"%s\": %s", url, nng_strerror(rv));
		fprintf(stderr, PROG ": cannot dial %s: %s\n", url, nng_strerror(rv));
		exit(1);
	}
	return s;
}

/*
 * Sends one encoded request and waits for its reply; returns the seqs
 * (expect of them) or exits 1.  "busy" stores nothing, so it is retried
 * until the deadline.
 */
static uint64_t *
request(nng_socket s, const char *url, const st_buf *req, size_t expect, int timeout_ms)
{
	uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
	proto_reply rep;

	for (;;) {
		uint64_t now = now_ms();
		nng_duration left = now < deadline ? (nng_duration)(deadline - now) : 1;
		nng_msg *msg = NULL;
		st_err err;
		int rv;

		nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, left);
		if ((rv = nng_send(s, req->p, req->len, 0)) == 0) {
			now = now_ms();
			left = now < deadline ? (nng_duration)(deadline - now) : 1;
			nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, left);
			rv = nng_recvmsg(s, &msg, 0);
		}
		if (rv == NNG_ETIMEDOUT) {
			fprintf(stderr, PROG ": no reply from %s within %d ms\n", url, timeout_ms);
			exit(1);
		}
		if (rv != 0) {
			fprintf(stderr, PROG ": %s: %s\n", url, nng_strerror(rv));
			exit(1);
		}
		memset(&rep, 0, sizeof(rep));
		err = proto_reply_decode(nng_msg_body(msg), nng_msg_len(msg), &rep);
		nng_msg_free(msg);
		if (err != ST_OK) {
			fprintf(stderr, PROG ": %s sent a reply that is not a valid ingest reply\n", url);
			exit(1);
		}
		if (rep.ok) {
			uint64_t *seqs = rep.seqs;

			if (rep.n_seqs != expect) {
				fprintf(stderr, PROG ": %s replied with %zu seqs for %zu events\n", url, rep.n_seqs,
				        expect);
				exit(1);
			}
			rep.seqs = NULL;
			proto_reply_fini(&rep);
			return seqs;
		}
		if (strcmp(rep.error, "busy") == 0 && now_ms() + BUSY_RETRY_MS < deadline) {
			proto_reply_fini(&rep);
			sleep_ms(BUSY_RETRY_MS);
			continue;
		}
		fprintf(stderr, PROG ": refused: %s: %s\n", rep.error, rep.detail);
		proto_reply_fini(&rep);
		exit(1);
	}
}

static void
print_seqs(const uint64_t *seqs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf("%llu\n", (unsigned long long)seqs[i]);
	fflush(stdout);
}

static int
publish_one(void)
{
	proto_event ev = { 0 };
	proto_str *about = NULL;
	char **items = NULL;
	size_t n_items = 0;
	const char *t = opts[O_TOPIC].sval, *why, *detail;
	st_buf req;
	nng_socket s;
	uint64_t *seqs;

	if (!topic_ok(t, strlen(t)))
		refuse("--topic \"%.220s\" is not 1..200 bytes of [A-Za-z0-9._:/-]", t);
	ev.topic = (proto_str){ t, strlen(t) };
	if (opts[O_ABOUT].sval) {
		n_items = st_config_split(opts[O_ABOUT].sval, &items, PROTO_MAX_ABOUT + 1);
		if (n_items > PROTO_MAX_ABOUT)
			refuse("--about: more than 64 entries");
		about = st_xcalloc(n_items ? n_items : 1, sizeof(*about));
		for (size_t i = 0; i < n_items; i++) {
			if ((why = text_problem(items[i], strlen(items[i]), PROTO_MAX_ABOUT_LEN)) != NULL)
				refuse("--about \"%.40s\" %s", items[i], why);
			about[i] = (proto_str){ items[i], strlen(items[i]) };
		}
		ev.about = about;
		ev.n_about = (uint32_t)n_items;
	}
	if (opts[O_DATA].sval) {
		const char *d = opts[O_DATA].sval;

		if ((why = data_problem(d, strlen(d), &detail)) != NULL)
			refuse("--data %s%s%.80s%s", why, detail ? " (" : "", detail ? detail : "", detail ? ")" : "");
		ev.data = (proto_str){ d, strlen(d) };
		ev.has_data = true;
	}
	if (opts[O_KEY].sval) {
		const char *k = opts[O_KEY].sval;

		if ((why = text_problem(k, strlen(k), PROTO_MAX_KEY)) != NULL)
			refuse("--key %s", why);
		ev.key = (proto_str){ k, strlen(k) };
		ev.has_key = true;
	}
	st_buf_init(&req);
	proto_request_encode(&req, &ev, 1, false);
	s = req_open(opts[O_WRITER].sval);
	seqs = request(s, opts[O_WRITER].sval, &req, 1, (int)opts[O_TIMEOUT_MS].ival);
	print_seqs(seqs, 1);
	free(seqs);
	nng_close(s);
	st_buf_fini(&req);
	for (size_t i = 0; i < n_items; i++)
		free(items[i]);
	free(items);
	free(about);
	return 0;
}

/* Opens the events file; stdin is copied to a temporary file so it can be read twice. */
static FILE *
events_open(const char *path)
{
	FILE *f, *tmp;
	char buf[65536];
	size_t n;

	if (strcmp(path, "-") != 0) {
		if ((f = fopen(path, "r")) == NULL)
			st_config_fail(PROG, "--file: cannot open \"%s\": %s", path, strerror(errno));
		return f;
	}
	if ((tmp = tmpfile()) == NULL)
		st_config_fail(PROG, "--file -: cannot create a temporary file: %s", strerror(errno));
	while ((n = fread(buf, 1, sizeof(buf), stdin)) > 0)
		if (fwrite(buf, 1, n, tmp) != n)
			st_config_fail(PROG, "--file -: cannot buffer stdin: %s", strerror(errno));
	rewind(tmp);
	return tmp;
}

/* Validates every line (pass 1) or sends them in batches (pass 2). */
static size_t
events_pass(FILE *f, const char *path, bool send, nng_socket s)
{
	st_buf line, req;
	ev_line *batch = NULL;
	proto_event *evs = NULL;
	size_t lineno = 0, n = 0, bytes = 0, total = 0;
	char err[256];
	int r;
	st_err rv;

	st_buf_init(&line);
	st_buf_init(&req);
	if (send) {
		batch = st_xcalloc(PROTO_MAX_BATCH, sizeof(*batch));
		evs = st_xcalloc(PROTO_MAX_BATCH, sizeof(*evs));
	}
	for (;;) {
		ev_line l;
		size_t eb;

		r = read_line(f, &line, MAX_LINE);
		if (r == 0 && ferror(f))
			st_config_fail(PROG, "%s: read error: %s", path, strerror(errno));
		if (r == 0)
			break;
		lineno++;
		/* a line is bounded to read it; an event's data is at most 256 KiB */
		if (r < 0)
			refuse("%s: line %zu: longer than %u bytes, larger than any valid event", path, lineno, MAX_LINE);
		if (blank(&line))
			continue;
		if ((rv = ev_line_parse(&l, line.p, line.len, err, sizeof(err))) == ST_EPROTO)
			st_config_fail(PROG, "%s: line %zu: %s", path, lineno, err);
		if (rv != ST_OK)
			refuse("%s: line %zu: %s", path, lineno, err);
		total++;
		if (!send) {
			ev_line_fini(&l);
			continue;
		}
		eb = event_bytes(&l.ev);
		if (n > 0 && (n == PROTO_MAX_BATCH || bytes + eb > FILE_BATCH_BYTES)) {
			uint64_t *seqs;

			st_buf_reset(&req);
			proto_request_encode(&req, evs, n, true);
			seqs = request(s, opts[O_WRITER].sval, &req, n, (int)opts[O_TIMEOUT_MS].ival);
			print_seqs(seqs, n);
			free(seqs);
			for (size_t i = 0; i < n; i++)
				ev_line_fini(&batch[i]);
			n = 0;
			bytes = 0;
		}
		batch[n] = l;
		evs[n] = l.ev;
		n++;
		bytes += eb;
	}
	if (send && n > 0) {
		uint64_t *seqs;

		st_buf_reset(&req);
		proto_request_encode(&req, evs, n, true);
		seqs = request(s, opts[O_WRITER].sval, &req, n, (int)opts[O_TIMEOUT_MS].ival);
		print_seqs(seqs, n);
		free(seqs);
		for (size_t i = 0; i < n; i++)
			ev_line_fini(&batch[i]);
	}
	free(batch);
	free(evs);
	st_buf_fini(&line);
	st_buf_fini(&req);
	return total;
}

static int
publish_file(void)
{
	const char *path = opts[O_FILE].sval;
	FILE *f = events_open(path);
	nng_socket s = NNG_SOCKET_INITIALIZER;

	if (events_pass(f, path, false, s) == 0) {
		fclose(f);
		return 0; /* nothing to send */
	}
	rewind(f);
	s = req_open(opts[O_WRITER].sval);
	events_pass(f, path, true, s);
	nng_close(s);
	fclose(f);
	return 0;
}

static int
cmd_publish(void)
{
	if (opts[O_WRITER].sval == NULL || opts[O_WRITER].sval[0] == '\0')
		st_config_fail(PROG, "publish needs --writer URL (or STUDIO_WRITER)");
	if (opts[O_FILE].sval && opts[O_TOPIC].sval)
		st_config_fail(PROG, "publish takes either --topic or --file, not both");
	if (opts[O_FILE].sval) {
		if (opts[O_ABOUT].sval || opts[O_DATA].sval || opts[O_KEY].sval)
			st_config_fail(PROG, "--about, --data and --key go in the file's lines with --file");
		return publish_file();
	}
	if (opts[O_TOPIC].sval == NULL)
		st_config_fail(PROG, "publish needs --topic T or --file EVENTS.ndjson");
	return publish_one();
}

/* ---- tail -------------------------------------------------------------- */

/* Appends one published event as an NDJSON line; false if it is not printable. */
static bool
render_event(st_buf *out, const proto_pub_event *e, char **scratch, size_t *scratch_cap)
{
	size_t clen = 0;

	if (!st_utf8_valid(e->topic.p, e->topic.len))
		return false;
	for (uint32_t i = 0; i < e->n_about; i++)
		if (!st_utf8_valid(e->about[i].p, e->about[i].len))
			return false;
	if (e->has_data) {
		/* Compacting proves it is one valid JSON text on one line. */
		if (e->data.len > *scratch_cap) {
			*scratch = st_xrealloc(*scratch, e->data.len);
			*scratch_cap = e->data.len;
		}
		if (st_json_compact(e->data.p, e->data.len, *scratch, &clen, NULL) != ST_OK)
			return false;
	}
	st_buf_puts(out, "{\"seq\":");
	st_buf_put_u64(out, e->seq);
	st_buf_puts(out, ",\"topic\":");
	st_json_escape(out, e->topic.p, e->topic.len);
	st_buf_puts(out, ",\"about\":[");
	for (uint32_t i = 0; i < e->n_about; i++) {
		if (i)
			st_buf_putc(out, ',');
		st_json_escape(out, e->about[i].p, e->about[i].len);
	}
	st_buf_putc(out, ']');
	if (e->has_data) {
		st_buf_puts(out, ",\"data\":");
		st_buf_append(out, *scratch, clen);
	}
	st_buf_puts(out, "}\n");
	return true;
}

static int
cmd_tail(void)
{
	const char *url = opts[O_WRITER].sval;
	int64_t want = opts[O_COUNT].ival, got = 0;
	uint64_t deadline = opts[O_TIMEOUT_S].ival ? now_ms() + (uint64_t)opts[O_TIMEOUT_S].ival * 1000 : 0;
	bool ticks = opts[O_TICKS].ival != 0;
	char *scratch = NULL;
	size_t scratch_cap = 0;
	nng_socket s;
	st_buf out;
	int rv, status = 0;

	if (url == NULL || url[0] == '\0')
		st_config_fail(PROG, "tail needs --writer URL (the writer's publish URL)");
	if ((rv = nng_sub0_open(&s)) != 0)
		st_config_fail(PROG, "cannot open a sub0 socket: %s", nng_strerror(rv));
	nng_socket_set(s, NNG_OPT_SUB_SUBSCRIBE, "", 0);
	nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, PROTO_MAX_PUB);
	nng_socket_set_ms(s, NNG_OPT_RECONNMINT, 100);
	nng_socket_set_ms(s, NNG_OPT_RECONNMAXT, 2000);
	if ((rv = st_tls_dial(s, url, NNG_FLAG_NONBLOCK)) != 0) {
		if (rv == NNG_EADDRINVAL || rv == NNG_ENOTSUP || rv == NNG_EINVAL)
			st_config_fail(PROG, "--writer: bad URL \"%s\": %s", url, nng_strerror(rv));
		fprintf(stderr, PROG ": cannot dial %s: %s\n", url, nng_strerror(rv));
		return 1;
	}
	st_buf_init(&out);
	while (want == 0 || got < want) {
		nng_msg *msg = NULL;
		proto_pub *m = NULL;
		nng_duration wait = NNG_DURATION_INFINITE;

		if (deadline) {
			uint64_t now = now_ms();

			if (now >= deadline)
				break;
			wait = (nng_duration)(deadline - now);
		}
		nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, wait);
		if ((rv = nng_recvmsg(s, &msg, 0)) == NNG_ETIMEDOUT)
			break;
		if (rv != 0) {
			fprintf(stderr, PROG ": %s: %s\n", url, nng_strerror(rv));
			status = 1;
			break;
		}
		if (proto_pub_decode(nng_msg_body(msg), nng_msg_len(msg), &m) != ST_OK) {
			fprintf(stderr, PROG ": %s: skipped a message that is not a published batch or tick\n", url);
			nng_msg_free(msg);
			continue;
		}
		st_buf_reset(&out);
		if (proto_pub_kind(m) == PROTO_PUB_TICK) {
			if (ticks) {
				st_buf_puts(&out, "{\"tick\":");
				st_buf_put_u64(&out, proto_pub_head(m));
				st_buf_puts(&out, "}\n");
			}
		} else {
			for (size_t i = 0; i < proto_pub_count(m) && (want == 0 || got < want); i++) {
				const proto_pub_event *e = proto_pub_event_at(m, i);

				if (!render_event(&out, e, &scratch, &scratch_cap)) {
					fprintf(stderr, PROG ": %s: skipped seq %llu: not printable\n", url,
					        (unsigned long long)e->seq);
					continue;
				}
				got++;
			}
		}
		fwrite(out.p ? out.p : "", 1, out.len, stdout);
		fflush(stdout);
		proto_pub_free(m);
		nng_msg_free(msg);
	}
	free(scratch);
	st_buf_fini(&out);
	nng_close(s);
	return status;
}

/* ---- stats, drain ------------------------------------------------------ */

static int
cmd_control(const char *cmd)
{
	const char *url = opts[O_CONTROL].sval;
	char req[64], *reply = NULL;
	st_json *j = NULL;
	int ok, status = 1;
	st_err rv;

	if (url == NULL || url[0] == '\0')
		st_config_fail(PROG, "%s needs --control URL (or STUDIO_CONTROL)", cmd);
	snprintf(req, sizeof(req), "{\"cmd\":\"%s\"}", cmd);
	rv = st_control_call(url, req, (int)opts[O_TIMEOUT_MS].ival, &reply);
	if (rv == ST_EINVAL)
		st_config_fail(PROG, "--control: bad URL \"%s\"", url);
	if (rv == ST_ETIMEDOUT) {
		fprintf(stderr, PROG ": no reply from %s within %lld ms\n", url, (long long)opts[O_TIMEOUT_MS].ival);
		return 1;
	}
	if (rv != ST_OK) {
		fprintf(stderr, PROG ": %s: %s\n", url, st_err_str(rv));
		return 1;
	}
	printf("%s\n", reply);
	fflush(stdout);
	if (st_json_parse(reply, strlen(reply), 100000, &j) == ST_OK && st_json_type(j, 0) == ST_JSON_OBJECT &&
	    (ok = st_json_get(j, 0, "ok")) >= 0 && st_json_type(j, ok) == ST_JSON_TRUE)
		status = 0;
	else
		fprintf(stderr, PROG ": %s refused\n", cmd);
	st_json_free(j);
	free(reply);
	return status;
}

int
main(int argc, char **argv)
{
	int first = argc, rc;
	const char *cmd;

	st_log_init(PROG);
	st_config_parse_or_exit(opts, O_N, argc, argv, PROG, usage, &first);
	st_preflight_tls(PROG, opts, O_N, &opts[O_TLS_CERT], &opts[O_TLS_KEY], &opts[O_TLS_CA]);
	if (first >= argc)
		st_config_fail(PROG, "missing command: publish, tail, stats, drain or reload (see --help)");
	if (first + 1 < argc)
		st_config_fail(PROG, "unexpected argument \"%s\" (see --help)", argv[first + 1]);
	cmd = argv[first];
	if (strcmp(cmd, "publish") == 0)
		rc = cmd_publish();
	else if (strcmp(cmd, "tail") == 0)
		rc = cmd_tail();
	else if (strcmp(cmd, "stats") == 0 || strcmp(cmd, "drain") == 0 || strcmp(cmd, "reload") == 0)
		rc = cmd_control(cmd);
	else
		st_config_fail(PROG, "unknown command \"%s\": publish, tail, stats, drain or reload", cmd);
	/* nng reaps closed sockets on its own threads; let it finish so a
	 * sanitizer build does not report what is merely in flight. */
	st_tls_unload();
	nng_fini();
	return rc;
}
