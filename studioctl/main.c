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
 *
 * SIZE.  Over 800 lines: about half is publish --file (the line parser,
 * the two passes, batching and the busy retry), the rest tail's frame
 * rendering, the control commands and the option table.  Each command is
 * a few functions that share only the options and the producer set-up;
 * if one more command arrives, publish moves to a publish.c of its own.
 */
#include "st_config.h"
#include "st_control.h"
#include "st_preflight.h"
#include "st_json.h"
#include "st_log.h"
#include "st_clock.h"
#include "st_tls.h"
#include "st_util.h"
#include "studio_producer.h"
#include "wire.h"
#include "wire_pub.h"

#include <errno.h>
#include <stdarg.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define PROG "studioctl"
#define FILE_BATCH_BYTES (8u * 1024 * 1024)
#define MAX_LINE (1024u * 1024) /* one NDJSON event line */
#define MAX_LINE_NODES 300000   /* 256 KiB of data is at most ~131k values */

enum {
	O_WRITER,
	O_CONTROL,
	O_TOPIC,
	O_ABOUT,
	O_DATA,
	O_KEY,
	O_KEY_BASE,
	O_FILE,
	O_TICKS,
	O_COUNT,
	O_TIMEOUT_S,
	O_TIMEOUT_MS,
	O_TLS_CERT,
	O_TLS_KEY,
	O_TLS_CA,
	O_TOKEN,
	O_N
};

static st_opt opts[O_N] = {
	[O_WRITER] = { .name = "writer",
		       .kind = ST_OPT_STR,
		       .help = "publish: the writer's ingest URL; tail: its publish URL",
		       .check = st_preflight_dial_urls },
	[O_CONTROL] = { .name = "control",
			.kind = ST_OPT_STR,
			.help = "stats, drain, reload: the control URL",
			.check = st_preflight_dial_urls },
	[O_TOPIC] = { .name = "topic", .kind = ST_OPT_STR, .help = "publish: the event's topic" },
	[O_ABOUT] = { .name = "about",
		      .kind = ST_OPT_LIST,
		      .help = "publish: what the event is about (values with commas: use --file)" },
	[O_DATA] = { .name = "data",
		     .kind = ST_OPT_STR,
		     .help = "publish: the event's data, a JSON text (absent: a change signal)" },
	[O_KEY] = { .name = "key", .kind = ST_OPT_STR, .help = "publish: idempotency key" },
	[O_KEY_BASE] = { .name = "key-base",
			 .kind = ST_OPT_STR,
			 .help = "publish: key base of the events without a key (a rerun after an unknown outcome "
				 "passes the one printed; default: a new random one)" },
	[O_FILE] = { .name = "file",
		     .kind = ST_OPT_STR,
		     .help = "publish: NDJSON file of events, one a line (- for stdin)" },
	[O_TICKS] = { .name = "ticks", .kind = ST_OPT_BOOL, .def = "false", .help = "tail: also print ticks" },
	[O_COUNT] = { .name = "count",
		      .kind = ST_OPT_INT,
		      .def = "0",
		      .min = 0,
		      .max = INT64_MAX,
		      .help = "tail: exit after N events (0: no limit)" },
	[O_TIMEOUT_S] = { .name = "timeout-s",
			  .kind = ST_OPT_INT,
			  .def = "0",
			  .min = 0,
			  .max = 31536000,
			  .help = "tail: exit 0 after S seconds (0: no limit)" },
	[O_TIMEOUT_MS] = { .name = "timeout-ms",
			   .kind = ST_OPT_INT,
			   .def = "10000",
			   .min = 1,
			   .max = 3600000,
			   .help = "publish, stats, drain: give up on a request after this long" },
	/* Mutual TLS on tls+tcp:// URLs (docs/security.md). */
	[O_TLS_CERT] = ST_OPT_TLS_CERT,
	[O_TLS_KEY] = ST_OPT_TLS_KEY,
	[O_TLS_CA] = ST_OPT_TLS_CA,
	/* Producer credentials (docs/security.md); STUDIO_TOKEN keeps it out of the process list. */
	[O_TOKEN] = { .name = "token",
		      .kind = ST_OPT_STR,
		      .def = "",
		      .help = "publish: the producer token (JWT) for a writer with --ingest-keys" },
};

static const char usage[] =
	PROG " publish --writer URL [--token JWT] --topic T [--about A]... [--data JSON] [--key K | --key-base B]\n"
	     "       " PROG " publish --writer URL [--token JWT] --file EVENTS.ndjson [--key-base B]\n"
	     "       " PROG " tail --writer URL [--ticks] [--count N] [--timeout-s S]\n"
	     "       " PROG " stats|drain|reload --control URL";

static uint64_t
now_ms(void)
{
	return st_clock_now(st_clock_system());
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

/* ---- events ------------------------------------------------------------ */

/*
 * Checks one event by the writer's own rules and words (libstudio-producer,
 * which runs the writer's decoder): NULL when it is valid, else the reason
 * in buf without the "event 0: " of a one-event request.
 */
static const char *
event_problem(const studio_event *ev, char *buf, size_t cap)
{
	if (studio_events_check(ev, 1, buf, cap) == STUDIO_OK)
		return NULL;
	if (strncmp(buf, "event 0: ", 9) == 0)
		memmove(buf, buf + 9, strlen(buf + 9) + 1);
	return buf;
}

/* Upper bound of one event's msgpack size, for the batch byte limit. */
static size_t
event_bytes(const studio_event *ev)
{
	size_t n = 64 + ev->topic_len + (ev->data ? ev->data_len : 0) + (ev->key ? ev->key_len : 0);

	for (size_t i = 0; i < ev->n_about; i++)
		n += 5 + ev->about_lens[i];
	return n;
}

/* One parsed NDJSON line: the DOM owns every string the event points to. */
typedef struct ev_line {
	st_json *j;
	const char **about; /* owned array; the strings are the DOM's */
	size_t *about_lens; /* owned */
	studio_event ev;
} ev_line;

static void
ev_line_fini(ev_line *l)
{
	st_json_free(l->j);
	free(l->about);
	free(l->about_lens);
	memset(l, 0, sizeof(*l));
}

/*
 * Parses and checks one line; on error err gets the reason.  ST_EPROTO: the
 * line is not JSON at all (bad input, exit 2); ST_EINVAL: it is JSON but
 * not an event the writer would accept (a refused request, exit 1).  The
 * line's shape (an object of topic, about, data, key, each of its type) is
 * studioctl's input format; what the values may be is the writer's rule,
 * checked by event_problem.
 */
static st_err
ev_line_parse(ev_line *l, const char *line, size_t len, char *err, size_t cap)
{
	st_json *j = NULL;
	int n;
	const char *s;
	size_t slen;

	memset(l, 0, sizeof(*l));
	l->ev.size = sizeof(l->ev); /* STUDIO_EVENT_INIT */
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
	l->ev.topic = s;
	l->ev.topic_len = slen;
	if ((n = st_json_get(j, 0, "about")) >= 0 && st_json_type(j, n) != ST_JSON_NULL) {
		size_t na = st_json_count(j, n);

		if (st_json_type(j, n) != ST_JSON_ARRAY) {
			snprintf(err, cap, "\"about\" must be an array of strings");
			goto fail;
		}
		/* the writer's bound, before arrays are sized by the count */
		if (na > PROTO_MAX_ABOUT) {
			snprintf(err, cap, "about: too many entries (%zu, max %u)", na, PROTO_MAX_ABOUT);
			goto fail;
		}
		l->about = st_xcalloc(na ? na : 1, sizeof(*l->about));
		l->about_lens = st_xcalloc(na ? na : 1, sizeof(*l->about_lens));
		for (size_t i = 0; i < na; i++) {
			if ((s = st_json_str(j, st_json_at(j, n, i), &slen)) == NULL) {
				snprintf(err, cap, "\"about\" must be an array of strings");
				goto fail;
			}
			l->about[i] = s;
			l->about_lens[i] = slen;
		}
		l->ev.about = l->about;
		l->ev.about_lens = l->about_lens;
		l->ev.n_about = na;
	}
	if ((n = st_json_get(j, 0, "data")) >= 0 && st_json_type(j, n) != ST_JSON_NULL) {
		st_json_raw(j, n, &s, &slen);
		l->ev.data = s;
		l->ev.data_len = slen;
	}
	if ((n = st_json_get(j, 0, "key")) >= 0 && st_json_type(j, n) != ST_JSON_NULL) {
		if ((s = st_json_str(j, n, &slen)) == NULL) {
			snprintf(err, cap, "\"key\" must be a string");
			goto fail;
		}
		l->ev.key = s;
		l->ev.key_len = slen;
	}
	if (event_problem(&l->ev, err, cap) != NULL)
		goto fail;
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

/* ---- requests to the writer (libstudio-producer) ------------------------ */

/*
 * The writers of --writer (one or more URLs), with --timeout-ms for each
 * request, and this process's TLS files (the library reads them for its
 * producer: its TLS configuration is its own, not st_tls's).  Bad URLs
 * were refused by the option's check; what is left here is exit 2 too.
 */
static studio_producer *
producer_open(void)
{
	studio_options *o = studio_options_new();
	studio_producer *p = NULL;
	char err[512];

	if (o == NULL)
		st_config_fail(PROG, "out of memory");
	if ((opts[O_TLS_CA].sval[0] && studio_options_set(o, "tls_ca", opts[O_TLS_CA].sval, err, sizeof(err))) ||
	    (opts[O_TLS_CERT].sval[0] && studio_options_set(o, "tls_cert", opts[O_TLS_CERT].sval, err, sizeof(err))) ||
	    (opts[O_TLS_KEY].sval[0] && studio_options_set(o, "tls_key", opts[O_TLS_KEY].sval, err, sizeof(err))) ||
	    (opts[O_TOKEN].sval[0] && studio_options_set(o, "token", opts[O_TOKEN].sval, err, sizeof(err))) ||
	    studio_producer_new(opts[O_WRITER].sval, o, &p, err, sizeof(err)) != STUDIO_OK)
		st_config_fail(PROG, "--writer %s: %s", opts[O_WRITER].sval, err);
	studio_options_free(o);
	return p;
}

/*
 * The key base of this run: --key-base, or a new random one.  Events
 * without a key get BASE-INDEX (one event) or BASE-BATCH-INDEX (--file,
 * batch numbers from 0; the batches of a file are the same on every run),
 * so a rerun with the base printed after an unknown outcome sends the same
 * keys and stores nothing twice.
 */
static char run_base[STUDIO_KEY_BASE_MAX - 16];

static void
run_base_init(void)
{
	uint8_t r[16];
	char *o = run_base;

	if (opts[O_KEY_BASE].sval != NULL) {
		const char *b = opts[O_KEY_BASE].sval;
		size_t len = strlen(b);

		if (len == 0 || len >= sizeof(run_base))
			st_config_fail(PROG, "--key-base: 1..%zu characters", sizeof(run_base) - 1);
		for (size_t i = 0; i < len; i++)
			if ((unsigned char)b[i] <= 0x20 || (unsigned char)b[i] >= 0x7f)
				st_config_fail(PROG, "--key-base: printable ASCII without space only");
		memcpy(run_base, b, len + 1);
		return;
	}
	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		st_config_fail(PROG, "getrandom: %s", strerror(errno));
	o += sprintf(o, "sc1-");
	for (size_t i = 0; i < sizeof(r); i++)
		o += sprintf(o, "%02x", r[i]);
}

/*
 * Publishes ev[0..n) as one request with key base base (NULL: the events
 * carry their own keys) and prints the seqs, or exits 1: the library
 * retried busy, unavailable and silence until --timeout-ms with the same
 * keys.  An unknown outcome (some try unanswered) says how to rerun.
 */
static void
publish_request(studio_producer *p, const studio_event *ev, size_t n, char *base)
{
	uint64_t *seqs = st_xcalloc(n, sizeof(*seqs));
	char detail[600];
	studio_status st =
		studio_publish(p, ev, n, base, seqs, (uint32_t)opts[O_TIMEOUT_MS].ival, detail, sizeof(detail));

	switch (st) {
	case STUDIO_OK:
		for (size_t i = 0; i < n; i++)
			printf("%llu\n", (unsigned long long)seqs[i]);
		fflush(stdout);
		free(seqs);
		return;
	case STUDIO_INVALID:
	case STUDIO_BUSY:
	case STUDIO_UNAVAILABLE:
		/* the writer's answer, "code: detail", or no writer reached: nothing of this request was stored */
		fprintf(stderr, PROG ": %s: %s\n", strstr(detail, "nothing was sent") ? "not stored" : "refused",
			detail);
		break;
	case STUDIO_USAGE: st_config_fail(PROG, "%s", detail);
	case STUDIO_TIMEOUT: {
		/* one line: the library's reason (its own key advice cut: ours is the run's base) */
		char *cut = strstr(detail, "; it may be stored");

		if (cut != NULL)
			*cut = '\0';
		if (opts[O_KEY].sval == NULL)
			fprintf(stderr,
				PROG ": outcome unknown after %lld ms (%s): run the same command again with "
				     "--key-base %s, and nothing is stored twice\n",
				(long long)opts[O_TIMEOUT_MS].ival, detail, run_base);
		else
			fprintf(stderr,
				PROG ": outcome unknown after %lld ms (%s): run the same command again (same "
				     "--key), and it is stored once\n",
				(long long)opts[O_TIMEOUT_MS].ival, detail);
		break;
	}
	default: fprintf(stderr, PROG ": %s: %s\n", studio_status_str(st), detail); break;
	}
	exit(1);
}

static int
publish_one(void)
{
	studio_event ev = { STUDIO_EVENT_INIT };
	char **items = NULL, why[600];
	size_t n_items = 0, *lens = NULL;
	studio_producer *p;

	ev.topic = opts[O_TOPIC].sval;
	ev.topic_len = strlen(ev.topic);
	if (opts[O_ABOUT].sval) {
		n_items = st_config_split(opts[O_ABOUT].sval, &items, PROTO_MAX_ABOUT + 1);
		lens = st_xcalloc(n_items ? n_items : 1, sizeof(*lens));
		for (size_t i = 0; i < n_items; i++)
			lens[i] = strlen(items[i]);
		ev.about = (const char *const *)items;
		ev.about_lens = lens;
		ev.n_about = n_items;
	}
	if (opts[O_DATA].sval) {
		ev.data = opts[O_DATA].sval;
		ev.data_len = strlen(ev.data);
	}
	if (opts[O_KEY].sval) {
		ev.key = opts[O_KEY].sval;
		ev.key_len = strlen(ev.key);
	}
	if (event_problem(&ev, why, sizeof(why)) != NULL)
		refuse("%s", why);
	p = producer_open();
	{
		char base[STUDIO_KEY_BASE_MAX];

		snprintf(base, sizeof(base), "%s", run_base);
		publish_request(p, &ev, 1, ev.key ? NULL : base);
	}
	studio_producer_free(p);
	for (size_t i = 0; i < n_items; i++)
		free(items[i]);
	free(items);
	free(lens);
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

/* Sends batch[0..n) as one request, key base RUN-BATCH, and empties it. */
static void
events_send(studio_producer *p, ev_line *batch, studio_event *evs, size_t *n)
{
	static unsigned long batch_no;
	char base[STUDIO_KEY_BASE_MAX];

	if (*n == 0)
		return;
	snprintf(base, sizeof(base), "%s-%lu", run_base, batch_no++);
	publish_request(p, evs, *n, base);
	for (size_t i = 0; i < *n; i++)
		ev_line_fini(&batch[i]);
	*n = 0;
}

/* Validates every line (pass 1, p NULL) or sends them in batches (pass 2). */
static size_t
events_pass(FILE *f, const char *path, studio_producer *p)
{
	st_buf line;
	ev_line *batch = NULL;
	studio_event *evs = NULL;
	size_t lineno = 0, n = 0, bytes = 0, total = 0;
	char err[600];
	int r;
	st_err rv;

	st_buf_init(&line);
	if (p != NULL) {
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
			refuse("%s: line %zu: longer than %u bytes, larger than any valid event", path, lineno,
			       MAX_LINE);
		if (blank(&line))
			continue;
		if ((rv = ev_line_parse(&l, line.p, line.len, err, sizeof(err))) == ST_EPROTO)
			st_config_fail(PROG, "%s: line %zu: %s", path, lineno, err);
		if (rv != ST_OK)
			refuse("%s: line %zu: %s", path, lineno, err);
		total++;
		if (p == NULL) {
			ev_line_fini(&l);
			continue;
		}
		eb = event_bytes(&l.ev);
		if (n > 0 && (n == PROTO_MAX_BATCH || bytes + eb > FILE_BATCH_BYTES)) {
			events_send(p, batch, evs, &n);
			bytes = 0;
		}
		batch[n] = l;
		evs[n] = l.ev;
		n++;
		bytes += eb;
	}
	if (p != NULL)
		events_send(p, batch, evs, &n);
	free(batch);
	free(evs);
	st_buf_fini(&line);
	return total;
}

static int
publish_file(void)
{
	const char *path = opts[O_FILE].sval;
	FILE *f = events_open(path);
	studio_producer *p;

	/* Every line is checked before anything is sent: a bad line stores nothing. */
	if (events_pass(f, path, NULL) == 0) {
		fclose(f);
		return 0; /* nothing to send */
	}
	rewind(f);
	p = producer_open();
	events_pass(f, path, p);
	studio_producer_free(p);
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
	if (opts[O_KEY].sval && opts[O_KEY_BASE].sval)
		st_config_fail(PROG, "publish takes either --key or --key-base, not both");
	run_base_init();
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
	st_preflight_tls(
		PROG, opts, O_N,
		&(st_preflight_tls_opts){ .cert = &opts[O_TLS_CERT], .key = &opts[O_TLS_KEY], .ca = &opts[O_TLS_CA] });
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
