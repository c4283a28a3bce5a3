/*
 * broker-writer: accepts events over nng rep0, stores them in PostgreSQL
 * once per flush interval in one transaction under pg_advisory_xact_lock,
 * answers the producers after the commit and publishes the committed events
 * in seq order on nng pub0.  See docs/writer.md.
 *
 * DESIGN.  One libevent loop owns everything but the ingest receivers' nng
 * callbacks, which decode and validate on nng threads and hand valid
 * requests over through ingest's one mailbox.  Two batches exist: `cur`
 * accumulates accepted requests, `fl` is the flush in progress (sent, or
 * waiting for its retry after a failure).  The flush timer moves the
 * oldest requests of cur, at most FLUSH_MAX_EVENTS / FLUSH_MAX_BYTES (at
 * least one request), into an empty fl, names the flush
 * "<instance>:<counter>", encodes the binary text[] parameters once and
 * sends one broker_append4 statement.  When requests that were already due
 * are left in cur (the bound split them off, or a tick found the previous
 * flush in flight), the next flush starts as soon as this one committed,
 * not at the next tick: a backlog drains as back-to-back flushes, still one
 * at a time and in arrival order, while a light load keeps one flush per
 * interval (larger publish batches for the edges).  A
 * failure (SQL error or lost connection: the outcome is then unknown) keeps
 * fl, its parameters and its flush_id, and resends after a backoff of
 * 100 ms doubling to 5 s; broker_append returns the recorded result if the
 * earlier attempt did commit, so nothing is stored twice.  Meanwhile cur
 * keeps accepting, up to its own bounds (busy beyond).  After a commit:
 * the test hook, then publish (fresh rows, ascending seq), then the replies.
 *
 * The flush is one state machine (enum flush_state, w->flush), and the
 * process's life another (enum writer_life, w->life):
 *     IDLE --flush_start: cur or iso into fl--> WAITING --flush_send--> SENT
 *     SENT --committed or refused--> IDLE     SENT --failed--> WAITING
 *     WAITING --retry timer, connection back--> SENT
 *     IDLE --flush_start, nothing to flush--> TICK --head or error--> IDLE
 * fl is non-empty exactly in WAITING and SENT.  A tick (the head for the
 * edges when nothing is flushed) and a flush share the connection, so at
 * most one of them is in flight.  Requests that become due while the
 * machine is not IDLE set `due`, and leave as soon as it is IDLE again.
 *     RUNNING --drain--> DRAINING --signal--> STOPPING --all flushed--> FINISHING
 *     RUNNING --signal--> STOPPING
 *
 * Failures are classified by SQLSTATE (pgerr_permanent): a lost
 * connection, a timeout, a lock, a serialisation failure and anything
 * unknown are transient and retried as above, for at most FLUSH_GIVE_UP_MS
 * (12 h) after the flush's first attempt; then the writer logs one line and
 * exits 1 (its producers resend to another replica).  A data error (class
 * 22 data exception, 23 integrity violation but unique_violation, 54
 * program limit) would fail again identically: the transaction rolled back,
 * so nothing of the flush is stored, and its requests move to `iso`, which
 * is flushed one request per transaction (new flush_ids) before anything of
 * cur.  A request that fails with a data error on its own is refused
 * `invalid` with the database's reason; the others are stored and answered
 * as usual.
 *
 * Unavailability: from the first failed database round trip (or lost
 * connection) until the next successful one, fail_since holds the time;
 * past 10 s new requests are refused "unavailable", and so are all requests
 * while draining or stopping.  SIGTERM/SIGINT stop accepting, flush what
 * was accepted, publish, reply, close and exit 0; if that has not happened
 * 30 s later (database down) the process exits 1.
 *
 * The schema check runs before the loop with blocking libpq: a current schema
 * gets no DDL, a fresh database is created, an older one upgraded only
 * when that locks no table (schema.h); retried with backoff while the
 * database is unreachable or a lock times out (SIGTERM then exits 0 at
 * once); a database this writer must not use (not UTF8, an upgrade that
 * needs `broker-writer migrate`, a newer incompatible schema) exits 2.
 *
 * SIZE.  Over 800 lines on purpose: the flush state machine, the life state
 * machine and the answers they give share one writer's batches, timers and
 * counters, and split across files they would need that struct in a header.
 * What stands alone is a module of its own (ingest, batch, pgerr, publish,
 * retention, schema, common/st_pgconn).
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>
#include <libpq-fe.h>
#include <nng/nng.h>

#include "batch.h"
#include "ingest.h"
#include "pgerr.h"
#include "publish.h"
#include "retention.h"
#include "schema.h"
#include "st_auth.h"
#include "st_buf.h"
#include "st_clock.h"
#include "st_config.h"
#include "st_control.h"
#include "st_http.h"
#include "st_log.h"
#include "st_metrics.h"
#include "st_pgarray.h"
#include "st_pgconn.h"
#include "st_ops.h"
#include "st_preflight.h"
#include "st_tls.h"
#include "st_util.h"
#include "wire.h"

#define PROG "broker-writer"
#define DEFAULT_LOCK_KEY "7450001"
/* Work slots: requests accepted and not yet answered (ingest.h). */
#define INGEST_CONTEXTS 1024
#define UNAVAILABLE_AFTER_MS 10000
#define STOP_GIVE_UP_MS 30000
#define RETRY_MIN_MS 100
#define RETRY_MAX_MS 5000
#define EXIT_LINGER_MS 300
/* One flush transaction: the first producers' wait and the statement's
 * memory stay bounded; a backlog goes out as back-to-back flushes. */
#define FLUSH_MAX_EVENTS 20000u
#define FLUSH_MAX_BYTES (32u * 1024 * 1024)
/* A flush is retried at most this long after its first attempt (then exit
 * 1).  broker_flush keeps its records longer (24 h), so a retry always finds
 * the record of an attempt that did commit.  Tests shorten it with
 * STUDIO_TEST_FLUSH_GIVE_UP_MS. */
#define FLUSH_GIVE_UP_MS (12u * 3600 * 1000)

/*
 * The two database connections (flush and retention).  A statement's
 * client-side deadline is twice the session's statement_timeout
 * (schema_session_sql): past it the server or the path is gone, even if TCP
 * has not noticed yet.  Server notices (DDL chatter) are not logged.  Both
 * write, so a server in hot standby is passed over (st_pgconn_opts.writes):
 * after a failover, a host list or a name that still leads to the old
 * primary, now a standby, is not where they settle.
 */
#define DB_STATEMENT_DEADLINE_MS 60000u
static const st_pgconn_opts flush_db = {.name = "flush", .application_name = PROG, .setup_sql = schema_session_sql,
                                        .query_deadline_ms = DB_STATEMENT_DEADLINE_MS,
                                        .writes = true};
static const st_pgconn_opts retention_db = {.name = "retention", .application_name = PROG,
                                            .setup_sql = schema_session_sql,
                                            .query_deadline_ms = DB_STATEMENT_DEADLINE_MS,
                                            .writes = true};

/* A flush or retention key equal to the migration's session lock would wait on it. */
#define MIGRATION_LOCK_KEY ((int64_t)SCHEMA_MIGRATE_LOCK_KEY)
_Static_assert(SCHEMA_MIGRATE_LOCK_KEY == 7450000001, "update --lock-key's allowed text and docs/writer.md");
/* The cut is now() - retention in PostgreSQL: 100 years keeps it a valid timestamptz, in int64 ms and µs. */
#define RETENTION_MAX_MS (INT64_C(36500) * 86400000)

static bool
lock_key_check(const st_opt *o, char *why, size_t cap)
{
	/* the range (1..INT64_MAX - 1) is the table's: retention locks key + 1 */
	if (o->ival != MIGRATION_LOCK_KEY && o->ival + 1 != MIGRATION_LOCK_KEY)
		return true;
	snprintf(why, cap, "must be %s", o->allowed);
	return false;
}

/* The options, by index: a misspelt name is a compile error. */
enum {
	W_PG_DSN,
	W_INGEST,
	W_PUBLISH,
	W_CONTROL,
	W_HTTP,
	W_FLUSH_INTERVAL_MS,
	W_LOCK_KEY,
	W_RETENTION,
	W_TLS_CERT,
	W_TLS_KEY,
	W_TLS_CA,
	W_INGEST_KEYS,
	W_N
};

static st_opt opts[W_N] = {
	[W_PG_DSN] = ST_OPT_PG_DSN,
	[W_INGEST] = { .name = "ingest", .kind = ST_OPT_STR, .def = "tcp://0.0.0.0:7450", .help = "nng rep0 URL to listen on for producers",
	  .required = true, .check = st_preflight_listen_url },
	[W_PUBLISH] = { .name = "publish", .kind = ST_OPT_STR, .def = "tcp://0.0.0.0:7451", .help = "nng pub0 URL to listen on for edges",
	  .required = true, .check = st_preflight_listen_url },
	[W_CONTROL] = { .name = "control", .kind = ST_OPT_STR, .def = "", .help = "nng rep0 URL of the ops socket (stats, drain); empty = none",
	  .check = st_preflight_listen_url },
	[W_HTTP] = { .name = "http", .kind = ST_OPT_STR, .def = "0.0.0.0:9450", .help = "ADDR:PORT for /metrics, /healthz, /readyz; empty = none",
	  .check = st_preflight_http_addr },
	[W_FLUSH_INTERVAL_MS] = { .name = "flush-interval-ms", .kind = ST_OPT_INT, .def = "1000", .help = "milliseconds between flushes",
	  .min = 10, .max = 60000 },
	[W_LOCK_KEY] = { .name = "lock-key", .kind = ST_OPT_INT, .def = DEFAULT_LOCK_KEY,
	  .help = "advisory lock key of the flush (retention uses key + 1); same on every replica",
	  .min = 1, .max = INT64_MAX - 1, .allowed = "1..9223372036854775806 and not 7450000000/7450000001",
	  .check = lock_key_check },
	[W_RETENTION] = { .name = "retention", .kind = ST_OPT_DURATION, .def = "7d", .help = "delete events older than this; 0 keeps all",
	  .min = 0, .max = RETENTION_MAX_MS, .allowed = "0 (keep everything) or a duration up to 36500d (250ms, 30s, 15m, 12h, 7d)" },
	/* Mutual TLS on tls+tcp:// links (docs/security.md). */
	[W_TLS_CERT] = ST_OPT_TLS_CERT,
	[W_TLS_KEY] = ST_OPT_TLS_KEY,
	[W_TLS_CA] = ST_OPT_TLS_CA,
	/* Producer credentials (docs/security.md): the edge's JWKS rules, claim "publish". */
	[W_INGEST_KEYS] = { .name = "ingest-keys", .kind = ST_OPT_STR, .def = "",
	  .help = "JWKS file of the producers' token keys; empty = no producer credentials (reload: SIGHUP, reload)" },
};

enum flush_state {
	FLUSH_IDLE,    /* fl empty, nothing in flight */
	FLUSH_TICK,    /* fl empty, the head query in flight */
	FLUSH_WAITING, /* fl holds a flush not on the wire: retry timer, or the connection down or busy */
	FLUSH_SENT,    /* broker_append4 for fl in flight */
};

/* Ordered: each state refuses what the ones before it refuse. */
enum writer_life {
	W_RUNNING,
	W_DRAINING,  /* `drain`: new requests refused unavailable, accepted ones flushed */
	W_STOPPING,  /* SIGTERM/SIGINT: the same, then exit once everything is flushed */
	W_FINISHING, /* everything flushed: exiting after EXIT_LINGER_MS */
};

typedef struct writer {
	struct event_base *base;
	const st_clock *clock;
	char instance[128];
	uint64_t flush_counter;
	char lock_key[24];
	int interval_ms;
	st_pgconn *db, *db_ret;
	ingest *in;
	publish *pub;
	retention *ret;
	http_server *http;
	st_control *ctl;
	batch *cur, *fl;
	batch *iso;       /* requests of a flush that failed with a data error: flushed one at a time */
	char flush_id[160];
	uint64_t fl_first_ms; /* first attempt of the flush in fl */
	uint64_t give_up_ms;  /* FLUSH_GIVE_UP_MS, or the test hook's value */
	st_buf p_topics, p_abouts, p_datas, p_keys;
	enum flush_state flush; /* see DESIGN */
	bool due;               /* cur holds requests that were due at a flush tick already */
	st_backoff retry;   /* between attempts of one flush: RETRY_MIN_MS doubling to RETRY_MAX_MS */
	uint64_t fail_since; /* 0 = the database answered last time */
	uint64_t flush_start_ms;
	uint64_t last_flush_ms; /* duration of the last successful flush */
	enum writer_life life; /* see DESIGN */
	int exit_code;
	uint64_t commits, crash_after;
	struct event *flush_timer, *retry_timer, *give_up_timer, *exit_timer, *sig_term, *sig_int, *sig_hup;
	st_auth_store *auth;       /* NULL: --ingest-keys not set; read by the ingest receivers */
	const char *keys_path;
	uint64_t *seqs;          /* PROTO_MAX_BATCH entries, for replies */
	/* metrics */
	st_metrics *m;
	st_counter *committed, *rej_invalid, *rej_busy, *rej_unavail, *rej_unauth, *rej_forbidden, *flush_failures;
	st_histogram *flush_seconds;
	st_gauge *pending, *db_up;
} writer;

static volatile sig_atomic_t pre_loop_stop;

static void
pre_loop_signal(int sig)
{
	(void)sig;
	pre_loop_stop = 1;
}

static uint64_t
now_ms(const writer *w)
{
	return st_clock_now(w->clock);
}

static void
arm(struct event *ev, uint32_t ms)
{
	struct timeval tv = st_timeval_ms(ms);

	evtimer_add(ev, &tv);
}

/* ---------------------------------------------------------------- flush */

static void flush_start(writer *w);
static void flush_send(writer *w);
static void maybe_finish(writer *w);
static void refusal_update(writer *w);

static void
db_failed(writer *w)
{
	if (w->fail_since == 0)
		w->fail_since = now_ms(w);
}

static bool
db_unavailable(const writer *w)
{
	return w->fail_since != 0 && now_ms(w) - w->fail_since > UNAVAILABLE_AFTER_MS;
}

/*
 * What the ingest receivers answer by themselves while the loop would refuse
 * everything anyway; kept current on every request and flush tick, so even
 * a producer that finds every work slot taken hears "unavailable".
 */
/* Why the writer's life refuses new requests, or NULL while it runs. */
static const char *
life_refusal(const writer *w)
{
	return w->life >= W_STOPPING ? "shutting down" : w->life == W_DRAINING ? "draining" : NULL;
}

static void
refusal_update(writer *w)
{
	const char *why = life_refusal(w);

	if (why == NULL && db_unavailable(w))
		why = "database unreachable";
	if (w->in)
		ingest_set_refusal(w->in, why);
}

static void
update_pending(writer *w)
{
	st_gauge_set(w->pending,
	             (int64_t)(batch_events(w->cur) + batch_events(w->fl) + (w->iso ? batch_events(w->iso) : 0)));
}

static const proto_event *
request_at(const void *src, size_t i)
{
	return proto_request_event(src, i);
}

static void
on_request(ingest_work *work, const proto_request *req, void *arg)
{
	writer *w = arg;
	st_err rv;

	refusal_update(w);
	if (life_refusal(w) != NULL) {
		st_counter_inc(w->rej_unavail);
		ingest_reply_err(work, "unavailable", life_refusal(w));
		return;
	}
	if (db_unavailable(w)) {
		st_counter_inc(w->rej_unavail);
		ingest_reply_err(work, "unavailable", "database unreachable");
		return;
	}
	rv = batch_add(w->cur, work, proto_request_count(req), proto_request_bytes(req), request_at, req);
	if (rv != ST_OK) {
		st_counter_inc(w->rej_busy);
		ingest_reply_err(work, "busy", "buffer full, retry later");
		return;
	}
	update_pending(w);
}

static int
cmp_seq(const void *a, const void *b)
{
	uint64_t x = ((const proto_pub_event *)a)->seq, y = ((const proto_pub_event *)b)->seq;

	return x < y ? -1 : x > y;
}

static bool
parse_u64(const char *s, uint64_t *out)
{
	return st_parse_u64(s, strlen(s), out) == ST_OK;
}

/* Records broker_append2's one-row answer in fl; returns prev, or false on a malformed answer. */
static bool
read_result(writer *w, PGresult *res, uint64_t *prev)
{
	size_t n = batch_rows(w->fl), n_o = 0, n_s = 0;
	uint64_t first, n_fresh, *ords = NULL, *seqs = NULL;
	bool ok;

	if (PQntuples(res) != 1 || PQnfields(res) != 5)
		return false;
	ok = parse_u64(PQgetvalue(res, 0, 0), prev) && parse_u64(PQgetvalue(res, 0, 1), &first) &&
	     parse_u64(PQgetvalue(res, 0, 2), &n_fresh) &&
	     st_pgarray_parse_u64s(PQgetvalue(res, 0, 3), n, &ords, &n_o) == ST_OK &&
	     st_pgarray_parse_u64s(PQgetvalue(res, 0, 4), n, &seqs, &n_s) == ST_OK && n_o == n_s &&
	     batch_apply(w->fl, *prev, first, n_fresh, ords, seqs, n_o) == ST_OK;
	free(ords);
	free(seqs);
	return ok;
}

static void
committed(writer *w, uint64_t prev)
{
	batch *b = w->fl;
	size_t n = batch_rows(b), n_fresh = 0;
	proto_pub_event *pe = st_xcalloc(n ? n : 1, sizeof(*pe));

	w->commits++;
	if (w->crash_after != 0 && w->commits == w->crash_after) {
		st_error("STUDIO_TEST_CRASH_AFTER_COMMIT=%" PRIu64 ": killing myself after the commit", w->crash_after);
		raise(SIGKILL);
	}
	for (size_t i = 0; i < n; i++) {
		if (!batch_row_fresh(b, i))
			continue;
		const proto_event *ev = batch_row(b, i);
		pe[n_fresh++] = (proto_pub_event){ .seq = batch_row_seq(b, i), .topic = ev->topic, .about = ev->about,
			                           .n_about = ev->n_about, .data = ev->data, .has_data = ev->has_data };
	}
	/* already ascending (consecutive in row order); sorting keeps that a checked property */
	qsort(pe, n_fresh, sizeof(*pe), cmp_seq);
	/* A flush whose every event was stored already (a producer resending a
	 * key) still tells the edges the head: without it they see neither a
	 * batch nor a tick (the timer found cur non-empty) and go unready. */
	if (n_fresh > 0)
		publish_batch(w->pub, prev, pe, n_fresh);
	else
		publish_tick(w->pub, prev);
	free(pe);
	st_counter_add(w->committed, n_fresh);
	for (size_t i = 0; i < batch_requests(b); i++) {
		size_t k = batch_req_count(b, i);
		batch_req_seqs(b, i, w->seqs);
		ingest_reply_ok(batch_req_owner(b, i), w->seqs, k);
	}
	batch_reset(b);
	update_pending(w);
}

/* Schedules the resend of fl, or ends the process once it has failed for
 * give_up_ms.  sent: an attempt failed (counted, logged); otherwise the
 * connection was down and nothing was sent (st_pgconn logged the loss). */
static void
flush_retry_later(writer *w, const char *msg, bool sent)
{
	uint64_t failing = now_ms(w) - w->fl_first_ms;
	uint32_t wait;

	db_failed(w);
	if (failing >= w->give_up_ms) {
		st_error("flush %s (%zu events) has failed for %" PRIu64 " s since its first attempt (limit %" PRIu64
		         " s), last error: %s; exiting so that its producers resend to another replica",
		         w->flush_id, batch_rows(w->fl), failing / 1000, w->give_up_ms / 1000, msg);
		w->exit_code = 1;
		event_base_loopbreak(w->base);
		return;
	}
	wait = st_backoff_next(&w->retry);
	if (sent) {
		st_counter_inc(w->flush_failures);
		st_warn("flush %s (%zu events) failed, retrying in %u ms: %s", w->flush_id, batch_rows(w->fl), wait,
		        msg);
	}
	arm(w->retry_timer, wait);
}

/*
 * fl failed with a data error; nothing of it is stored (the statement's
 * transaction rolled back).  Several requests: all move to iso, to be
 * flushed one by one.  One request: it is what cannot be stored, refused.
 */
static void
flush_failed_permanently(writer *w, const PGresult *res, const char *msg)
{
	const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	char detail[400];

	st_counter_inc(w->flush_failures);
	if (batch_requests(w->fl) > 1) {
		st_warn("flush %s (%zu requests) failed with a data error (%s); flushing its requests one at a time",
		        w->flush_id, batch_requests(w->fl), msg);
		/* iso is empty: a split flush holds one request, and never reaches here */
		batch_take(w->iso, w->fl, BATCH_MAX_EVENTS, BATCH_MAX_BYTES);
	} else {
		/* the primary message names the constraint or the reason, without the SQL context */
		snprintf(detail, sizeof(detail), "the database cannot store it (SQLSTATE %.5s): %.300s", st,
		         primary != NULL ? primary : msg);
		st_one_line(detail);
		st_warn("flush %s: request of %zu events refused: %s", w->flush_id, batch_events(w->fl), detail);
		st_counter_inc(w->rej_invalid);
		ingest_reply_err(batch_req_owner(w->fl, 0), "invalid", detail);
		batch_reset(w->fl);
	}
	w->flush = FLUSH_IDLE;
	update_pending(w);
	/* the database answered: it is reachable */
	w->fail_since = 0;
	refusal_update(w);
	st_backoff_reset(&w->retry);
	flush_start(w);
	maybe_finish(w);
}

static void
on_flush_result(void *arg, PGresult *res, const char *err)
{
	writer *w = arg;
	uint64_t prev = 0;

	ST_ASSERT(w->flush == FLUSH_SENT);
	w->flush = FLUSH_WAITING;
	if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK || !read_result(w, res, &prev)) {
		char msg[512];
		/* the result's primary message only: its DETAIL and CONTEXT can repeat an event's data */
		if (res == NULL)
			snprintf(msg, sizeof(msg), "%s", err);
		else if (PQresultStatus(res) != PGRES_TUPLES_OK)
			st_pgconn_result_text(res, msg, sizeof(msg));
		else
			snprintf(msg, sizeof(msg), "malformed broker_append result");
		st_one_line(msg);
		if (res != NULL && PQresultStatus(res) == PGRES_FATAL_ERROR &&
		    pgerr_permanent(PQresultErrorField(res, PG_DIAG_SQLSTATE)))
			flush_failed_permanently(w, res, msg);
		else
			flush_retry_later(w, msg, true);
		return;
	}
	w->fail_since = 0;
	refusal_update(w);
	st_backoff_reset(&w->retry);
	w->last_flush_ms = now_ms(w) - w->flush_start_ms;
	st_histogram_observe(w->flush_seconds, (double)w->last_flush_ms / 1000.0);
	committed(w, prev);
	w->flush = FLUSH_IDLE;
	/* do not wait for the timer when stopping (drain what is left), when
	 * what is left was due already (a split, or a tick that found this
	 * flush in flight), when requests wait to be flushed one at a time, or
	 * when a whole flush is waiting anyway */
	if (w->life >= W_STOPPING || w->due || !batch_empty(w->iso) || batch_events(w->cur) >= FLUSH_MAX_EVENTS ||
	    batch_bytes(w->cur) >= FLUSH_MAX_BYTES)
		flush_start(w);
	maybe_finish(w);
}

static void
flush_send(writer *w)
{
	bool keys = batch_has_keys(w->fl);
	/* no key at all (the common case): NULL, broker_append2's join-free path */
	const char *vals[6] = { w->lock_key, w->flush_id, w->p_topics.p, w->p_abouts.p, w->p_datas.p,
		                keys ? w->p_keys.p : NULL };
	int lens[6] = { 0, 0, (int)w->p_topics.len, (int)w->p_abouts.len, (int)w->p_datas.len, (int)w->p_keys.len };
	int fmts[6] = { 0, 0, 1, 1, 1, 1 };
	Oid types[6] = { ST_PG_INT8_OID, ST_PG_TEXT_OID, ST_PG_TEXT_ARRAY_OID, ST_PG_TEXT_ARRAY_OID, ST_PG_TEXT_ARRAY_OID,
	                 ST_PG_TEXT_ARRAY_OID };

	if (w->flush != FLUSH_WAITING)
		return;
	w->flush_start_ms = now_ms(w);
	w->flush = FLUSH_SENT; /* before the call: a broken connection calls back from inside it */
	if (st_pgconn_send(w->db,
	                   "SELECT prev, first_seq, n_fresh, dup_ords, dup_seqs FROM broker_append4($1, $2, $3, $4, $5, $6)",
	                   6, types, vals, lens, fmts, 0, on_flush_result, w) != ST_OK &&
	    w->flush == FLUSH_SENT) { /* else the callback ran from inside and moved on */
		w->flush = FLUSH_WAITING;
		if (!st_pgconn_up(w->db))
			flush_retry_later(w, "database not connected", false);
		else
			arm(w->retry_timer, 10); /* busy (no tick is in flight here, see flush_start): try again */
	}
}

static void
on_retry(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	flush_send(arg);
}

static void
on_tick_result(void *arg, PGresult *res, const char *err)
{
	writer *w = arg;
	uint64_t head;

	ST_ASSERT(w->flush == FLUSH_TICK);
	w->flush = FLUSH_IDLE;
	if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
	    !parse_u64(PQgetvalue(res, 0, 0), &head)) {
		char msg[512];

		if (res != NULL)
			st_pgconn_result_text(res, msg, sizeof(msg));
		st_debug("tick query failed: %s", res == NULL ? err : msg);
		db_failed(w);
	} else {
		w->fail_since = 0;
		refusal_update(w);
		publish_tick(w->pub, head);
	}
	/* requests that came due while the tick was in flight (or a stop) go now;
	 * never recursion: flush_start sends a tick only when cur is empty */
	if (!batch_empty(w->cur) && (w->due || w->life >= W_STOPPING))
		flush_start(w);
	maybe_finish(w);
}

static void
flush_start(writer *w)
{
	if (w->give_up_ms == 0) {
		const char *env = getenv("STUDIO_TEST_FLUSH_GIVE_UP_MS");
		w->give_up_ms = FLUSH_GIVE_UP_MS;
		if (env != NULL && env[0] != '\0' && (!parse_u64(env, &w->give_up_ms) || w->give_up_ms == 0)) {
			st_error("STUDIO_TEST_FLUSH_GIVE_UP_MS: not a positive number: %s", env);
			w->give_up_ms = FLUSH_GIVE_UP_MS;
		}
	}
	if (w->flush != FLUSH_IDLE) {
		/* at most one flush or tick in flight (or a flush waiting for its
		 * retry); what this tick would have sent goes right after it */
		if (!batch_empty(w->cur))
			w->due = true;
		return;
	}
	ST_ASSERT(batch_empty(w->fl));
	if (!batch_empty(w->iso)) {
		/* one request per transaction, before anything newer (arrival order) */
		batch_take(w->fl, w->iso, 1, 1);
		w->due = w->due || !batch_empty(w->cur);
		goto send;
	}
	if (batch_empty(w->cur)) {
		if (w->life < W_STOPPING && st_pgconn_idle(w->db)) {
			w->flush = FLUSH_TICK;
			if (st_pgconn_send(w->db, "SELECT coalesce(max(seq), 0) FROM broker_event", 0, NULL, NULL, NULL,
			                   NULL, 0, on_tick_result, w) != ST_OK && w->flush == FLUSH_TICK)
				w->flush = FLUSH_IDLE;
		}
		return;
	}
	batch_take(w->fl, w->cur, FLUSH_MAX_EVENTS, FLUSH_MAX_BYTES);
	w->due = !batch_empty(w->cur);
send:
	w->flush = FLUSH_WAITING;
	w->fl_first_ms = now_ms(w);
	snprintf(w->flush_id, sizeof(w->flush_id), "%s:%" PRIu64, w->instance, ++w->flush_counter);
	st_buf_reset(&w->p_topics);
	st_buf_reset(&w->p_abouts);
	st_buf_reset(&w->p_datas);
	st_buf_reset(&w->p_keys);
	batch_encode(w->fl, &w->p_topics, &w->p_abouts, &w->p_datas, &w->p_keys);
	st_backoff_reset(&w->retry);
	flush_send(w);
}

static void
on_flush_timer(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	refusal_update(arg);
	flush_start(arg);
}

static void
on_db_state(void *arg, bool up)
{
	writer *w = arg;

	if (!up) {
		db_failed(w);
		return;
	}
	/*
	 * Reachable again: resend a waiting flush now instead of at the end of
	 * its (up to 5 s) backoff.  fail_since is cleared by the next flush or
	 * tick that succeeds, not here: a connection that drops during every
	 * flush must still end in "unavailable".
	 */
	if (w->flush == FLUSH_WAITING) {
		evtimer_del(w->retry_timer);
		flush_send(w);
	}
}

/* ---------------------------------------------------------------- stop */

static void
on_exit_timer(evutil_socket_t fd, short what, void *arg)
{
	writer *w = arg;

	(void)fd;
	(void)what;
	event_base_loopbreak(w->base);
}

static void
maybe_finish(writer *w)
{
	if (w->life != W_STOPPING || w->flush != FLUSH_IDLE || !batch_empty(w->cur) || !batch_empty(w->iso))
		return;
	w->life = W_FINISHING;
	st_info("everything accepted is committed, published and answered; exiting");
	/* the replies and published messages are queued in nng: give them a moment */
	arm(w->exit_timer, EXIT_LINGER_MS);
}

static void
on_give_up(evutil_socket_t fd, short what, void *arg)
{
	writer *w = arg;

	(void)fd;
	(void)what;
	if (w->life == W_FINISHING)
		return;
	st_error("shutdown: the database stayed unavailable for %d s; giving up with %zu accepted events not stored",
	         STOP_GIVE_UP_MS / 1000, batch_events(w->cur) + batch_events(w->fl) + batch_events(w->iso));
	w->exit_code = 1;
	event_base_loopbreak(w->base);
}

static void
on_signal(evutil_socket_t sig, short what, void *arg)
{
	writer *w = arg;

	(void)what;
	if (w->life >= W_STOPPING)
		return;
	st_info("signal %d: stopping (new requests get unavailable), flushing what was accepted", (int)sig);
	w->life = W_STOPPING;
	refusal_update(w);
	arm(w->give_up_timer, STOP_GIVE_UP_MS);
	flush_start(w);
	maybe_finish(w);
}

/* ---------------------------------------------------------------- ops */

static bool
writer_ready(void *arg, const char **why)
{
	writer *w = arg;

	if (w->life >= W_STOPPING)
		return *why = "shutting down", false;
	if (w->life == W_DRAINING)
		return *why = "draining", false;
	if (!st_pgconn_up(w->db))
		return *why = "database not connected", false;
	return true;
}

/* Read only when scraped. */
static void
writer_refresh(void *arg)
{
	writer *w = arg;

	st_gauge_set(w->db_up, st_pgconn_up(w->db));
}

static void
on_http(http_req *req, void *arg)
{
	writer *w = arg;
	const st_ops ops = { .metrics = w->m, .ready = writer_ready, .refresh = writer_refresh, .arg = w };

	if (!st_ops_handle(req, &ops) && !st_ops_refuse_method(req))
		http_reply_problem(req, 404, NULL, "Not Found", "no such endpoint", NULL);
}

static void
put_stats(writer *w, st_buf *out)
{
	st_buf_printf(out,
	              "\"pending_events\":%zu,\"inflight_flush\":%s,\"inflight_events\":%zu,\"committed_total\":%" PRIu64
	              ",\"db_up\":%s,\"last_flush_ms\":%" PRIu64 ",\"draining\":%s,\"stopping\":%s,\"instance\":\"%s\""
	              ",\"ingest_inflight_bytes\":%zu",
	              batch_events(w->cur), batch_empty(w->fl) ? "false" : "true", batch_events(w->fl),
	              st_counter_get(w->committed), st_pgconn_up(w->db) ? "true" : "false", w->last_flush_ms,
	              w->life != W_RUNNING ? "true" : "false", w->life >= W_STOPPING ? "true" : "false", w->instance,
	              ingest_inflight_bytes(w->in));
}

/*
 * Reloads --ingest-keys into a new key set and swaps it in; requests being
 * checked on the receivers keep the set they took.  A file that does not
 * parse changes nothing.  Loop thread: one read of a local file of at most
 * 1 MiB, as the edge does.
 */
static st_err
reload_keys(writer *w, char *why, size_t cap)
{
	st_auth_keys *ks = NULL;

	if (w->auth == NULL) {
		snprintf(why, cap, "producer credentials are off (no --ingest-keys)");
		return ST_EINVAL;
	}
	if (st_auth_keys_load(w->keys_path, &ks, why, cap) != ST_OK) {
		st_warn("--ingest-keys %s: reload failed, keeping the %zu keys in use: %s", w->keys_path,
		        st_auth_store_key_count(w->auth), why);
		return ST_EINVAL;
	}
	st_info("--ingest-keys %s: reloaded, %zu keys", w->keys_path, st_auth_keys_count(ks));
	st_auth_store_swap(w->auth, ks);
	return ST_OK;
}

static void
on_hup(evutil_socket_t sig, short what, void *arg)
{
	char why[256];

	(void)sig;
	(void)what;
	if (reload_keys(arg, why, sizeof(why)) != ST_OK && ((writer *)arg)->auth == NULL)
		st_info("SIGHUP: %s, nothing to reload", why);
}

static st_err
on_control(const char *cmd, const st_json *req, st_buf *out, void *arg)
{
	writer *w = arg;

	(void)req;
	if (strcmp(cmd, "stats") == 0) {
		put_stats(w, out);
		return ST_OK;
	}
	if (strcmp(cmd, "drain") == 0) {
		if (w->life == W_RUNNING) {
			st_info("drain: refusing new requests (unavailable), flushing what was accepted");
			w->life = W_DRAINING;
		}
		refusal_update(w);
		flush_start(w);
		put_stats(w, out);
		return ST_OK;
	}
	if (strcmp(cmd, "reload") == 0) {
		char reason[256];

		if (reload_keys(w, reason, sizeof(reason)) != ST_OK) {
			st_buf_puts(out, reason);
			return ST_EINVAL;
		}
		st_buf_printf(out, "\"keys\":%zu", st_auth_store_key_count(w->auth));
		return ST_OK;
	}
	return ST_ENOTFOUND;
}

/* ---------------------------------------------------------------- main */

/* Clock skew tolerated on a producer token's exp/nbf/iat: the edge's default. */
#define INGEST_KEYS_LEEWAY_S 30u

/*
 * True when url is plain TCP (tcp://, tcp4://, tcp6://, ws://: no TLS) on
 * an address other than loopback: anyone on the network who reaches it is
 * served.  127.0.0.0/8, ::1 and localhost are loopback; a wildcard
 * (0.0.0.0, ::, *, empty) or any other name is not.
 */
static bool
url_open_tcp(const char *url)
{
	static const char *const schemes[] = { "tcp://", "tcp4://", "tcp6://", "ws://" };
	const char *host = NULL, *end;
	size_t n;

	for (size_t i = 0; i < ST_ARRAY_LEN(schemes) && host == NULL; i++)
		if (strncmp(url, schemes[i], strlen(schemes[i])) == 0)
			host = url + strlen(schemes[i]);
	if (host == NULL)
		return false;
	n = strcspn(host, "/"); /* the authority: ws:// has a path */
	if (host[0] == '[') {
		host++;
		end = memchr(host, ']', n - 1);
	} else {
		end = n > 0 ? memrchr(host, ':', n) : NULL;
	}
	if (end != NULL)
		n = (size_t)(end - host);
	if ((n == 3 && memcmp(host, "::1", 3) == 0) || (n == 9 && memcmp(host, "localhost", 9) == 0) ||
	    (n >= 4 && memcmp(host, "127.", 4) == 0))
		return false;
	return true;
}

/* Without --ingest-keys: one warning at start when a socket is open to the network (the issue 24 finding). */
static void
open_warning(const char *ingest_url, const char *publish_url)
{
	bool in = url_open_tcp(ingest_url), pub = url_open_tcp(publish_url);

	if (!in && !pub)
		return;
	st_warn("no producer credentials (--ingest-keys) and plain tcp:// or ws:// on a non-loopback address:%s%s%s%s%s%s%s; "
	        "set --ingest-keys, use tls+tcp:// (mutual TLS) or listen on loopback (docs/security.md)",
	        in ? " anyone who reaches --ingest " : "", in ? ingest_url : "", in ? " can publish to any topic" : "",
	        in && pub ? ", and" : "", pub ? " anyone who reaches --publish " : "", pub ? publish_url : "",
	        pub ? " reads every topic, including those the edges guard with tokens" : "");
}

static void
make_instance(char *out, size_t len)
{
	char host[64] = "host";
	unsigned char r[4] = { 0 };

	if (gethostname(host, sizeof(host)) == -1)
		snprintf(host, sizeof(host), "host");
	host[sizeof(host) - 1] = '\0';
	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
		uint64_t t = st_clock_wall_ms();
		memcpy(r, &t, sizeof(r));
	}
	snprintf(out, len, "%s-%ld-%02x%02x%02x%02x", host, (long)getpid(), r[0], r[1], r[2], r[3]);
}

static void
metrics_init(writer *w)
{
	static const double bounds[] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30 };

	w->m = st_metrics_new();
	w->committed = st_metrics_counter(w->m, "studio_writer_events_committed_total", NULL,
	                                  "Events stored by this writer (fresh, not already stored by key)");
	w->rej_invalid = st_metrics_counter(w->m, "studio_writer_rejected_total", "error=\"invalid\"",
	                                    "Requests refused, by error code");
	w->rej_busy = st_metrics_counter(w->m, "studio_writer_rejected_total", "error=\"busy\"",
	                                 "Requests refused, by error code");
	w->rej_unavail = st_metrics_counter(w->m, "studio_writer_rejected_total", "error=\"unavailable\"",
	                                    "Requests refused, by error code");
	w->rej_unauth = st_metrics_counter(w->m, "studio_writer_rejected_total", "error=\"unauthorized\"",
	                                   "Requests refused, by error code");
	w->rej_forbidden = st_metrics_counter(w->m, "studio_writer_rejected_total", "error=\"forbidden\"",
	                                      "Requests refused, by error code");
	w->flush_seconds = st_metrics_histogram(w->m, "studio_writer_flush_seconds", NULL,
	                                        "Duration of successful flush transactions", bounds,
	                                        ST_ARRAY_LEN(bounds));
	w->flush_failures = st_metrics_counter(w->m, "studio_writer_flush_failures_total", NULL,
	                                       "Flush attempts that failed and were retried");
	w->db_up = st_metrics_gauge(w->m, "studio_database_up", NULL, "1 when the flush connection is up, else 0.");
	w->pending = st_metrics_gauge(w->m, "studio_writer_pending_events", NULL,
	                              "Accepted events not yet committed");
}

static int
run(writer *w)
{
	const char *dsn = opts[W_PG_DSN].sval;
	const char *ctl_url = opts[W_CONTROL].sval;
	const char *http_addr = opts[W_HTTP].sval;
	int64_t retention_ms = opts[W_RETENTION].ival;
	const char *env = getenv("STUDIO_TEST_CRASH_AFTER_COMMIT");
	struct timeval iv;
	st_err rv;
	int mig;

	if (env != NULL && env[0] != '\0' && st_parse_u64(env, strlen(env), &w->crash_after) != ST_OK)
		st_config_fail(PROG, "STUDIO_TEST_CRASH_AFTER_COMMIT: not a number: %s", env);
	/* until the loop's own signal events exist, SIGTERM only ends the migration wait */
	signal(SIGTERM, pre_loop_signal);
	signal(SIGINT, pre_loop_signal);
	signal(SIGPIPE, SIG_IGN);
	if ((mig = schema_migrate_retry(dsn, SCHEMA_ONLINE, &pre_loop_stop)) == 2)
		return 2;
	if (mig != 0) {
		st_info("stopped before the schema was in place");
		return 0;
	}
	if (pre_loop_stop)
		return 0;

	evthread_use_pthreads();
	if ((w->base = event_base_new()) == NULL) {
		st_error("event_base_new failed");
		return 1;
	}
	metrics_init(w);
	w->cur = batch_new(BATCH_MAX_EVENTS, BATCH_MAX_BYTES);
	w->fl = batch_new(BATCH_MAX_EVENTS, BATCH_MAX_BYTES);
	w->iso = batch_new(BATCH_MAX_EVENTS, BATCH_MAX_BYTES);
	w->seqs = st_xcalloc(PROTO_MAX_BATCH, sizeof(*w->seqs));
	st_backoff_init(&w->retry, RETRY_MIN_MS, RETRY_MAX_MS);
	w->flush_timer = event_new(w->base, -1, EV_PERSIST, on_flush_timer, w);
	w->retry_timer = evtimer_new(w->base, on_retry, w);
	w->give_up_timer = evtimer_new(w->base, on_give_up, w);
	w->exit_timer = evtimer_new(w->base, on_exit_timer, w);
	w->sig_term = evsignal_new(w->base, SIGTERM, on_signal, w);
	w->sig_int = evsignal_new(w->base, SIGINT, on_signal, w);
	w->sig_hup = evsignal_new(w->base, SIGHUP, on_hup, w);
	ST_ASSERT(w->flush_timer && w->retry_timer && w->give_up_timer && w->exit_timer && w->sig_term && w->sig_int &&
	          w->sig_hup);
	evsignal_add(w->sig_term, NULL);
	evsignal_add(w->sig_int, NULL);
	evsignal_add(w->sig_hup, NULL);
	if (pre_loop_stop)
		return 0;

	if (st_pgconn_new(w->base, dsn, &flush_db, on_db_state, w, &w->db) != ST_OK ||
	    st_pgconn_new(w->base, dsn, &retention_db, NULL, NULL, &w->db_ret) != ST_OK) {
		st_error("cannot create the database connections");
		return 1;
	}
	if ((rv = publish_new(opts[W_PUBLISH].sval, w->instance, &w->pub)) !=
	    ST_OK)
		st_config_fail(PROG, "--publish: cannot listen (%s)", st_err_str(rv));
	ingest_auth ia = { .store = w->auth, .unauthorized = w->rej_unauth, .forbidden = w->rej_forbidden };
	if ((rv = ingest_new(w->base, opts[W_INGEST].sval, INGEST_CONTEXTS,
	                     w->rej_invalid, w->auth ? &ia : NULL, on_request, w, &w->in)) != ST_OK)
		st_config_fail(PROG, "--ingest: cannot listen (%s)", st_err_str(rv));
	ingest_set_counters(w->in, w->rej_busy, w->rej_unavail);
	if (ctl_url != NULL && ctl_url[0] != '\0' &&
	    (rv = st_control_new(w->base, ctl_url, on_control, w, &w->ctl)) != ST_OK)
		st_config_fail(PROG, "--control: cannot listen (%s)", st_err_str(rv));
	if (http_addr != NULL && http_addr[0] != '\0' &&
	    (rv = http_server_new(w->base, http_addr, NULL, on_http, w, &w->http)) != ST_OK)
		st_config_fail(PROG, "--http: cannot listen on %s (%s)", http_addr, st_err_str(rv));
	if (retention_new(w->base, w->db_ret, strtoll(w->lock_key, NULL, 10), retention_ms, w->m, &w->ret) !=
	    ST_OK) {
		st_error("cannot start retention");
		return 1;
	}
	iv = st_timeval_ms((uint64_t)w->interval_ms);
	evtimer_add(w->flush_timer, &iv);
	st_info("writer %s: ingest, publish and flush every %d ms with lock key %s", w->instance, w->interval_ms,
	        w->lock_key);
	event_base_dispatch(w->base);
	return w->exit_code;
}

static void
writer_fini(writer *w)
{
	/* nng first: its threads must stop posting before the loop objects go */
	ingest_free(w->in);
	st_control_free(w->ctl);
	http_server_free(w->http);
	publish_free(w->pub);
	retention_free(w->ret);
	st_pgconn_free(w->db_ret);
	st_pgconn_free(w->db);
	batch_free(w->cur);
	batch_free(w->fl);
	batch_free(w->iso);
	free(w->seqs);
	st_buf_fini(&w->p_topics);
	st_buf_fini(&w->p_abouts);
	st_buf_fini(&w->p_datas);
	st_buf_fini(&w->p_keys);
	if (w->flush_timer)
		event_free(w->flush_timer);
	if (w->retry_timer)
		event_free(w->retry_timer);
	if (w->give_up_timer)
		event_free(w->give_up_timer);
	if (w->exit_timer)
		event_free(w->exit_timer);
	if (w->sig_term)
		event_free(w->sig_term);
	if (w->sig_int)
		event_free(w->sig_int);
	if (w->sig_hup)
		event_free(w->sig_hup);
	st_auth_store_free(w->auth);
	st_metrics_free(w->m);
	if (w->base)
		event_base_free(w->base);
}

int
main(int argc, char **argv)
{
	writer w;
	int first = argc, rc;

	memset(&w, 0, sizeof(w));
	st_log_init(PROG);
	st_config_parse_or_exit(opts, W_N, argc, argv, PROG,
	                "broker-writer [migrate] --pg-dsn DSN [--ingest URL] [--publish URL] [--control URL] "
	                "[--http ADDR:PORT] [--flush-interval-ms 1000] [--lock-key N] [--retention DURATION]",
	                &first);
	if (first < argc && strcmp(argv[first], "migrate") == 0) {
		if (first + 1 < argc)
			st_config_fail(PROG, "unexpected argument after migrate: %s", argv[first + 1]);
		return schema_migrate_retry(opts[W_PG_DSN].sval, SCHEMA_ALL, &pre_loop_stop);
	}
	if (first < argc)
		st_config_fail(PROG, "unknown command: %s (the only command is migrate)", argv[first]);
	st_preflight_tls(PROG, opts, W_N, &opts[W_TLS_CERT], &opts[W_TLS_KEY], &opts[W_TLS_CA]);
	{
		/* Before the database: an address that cannot listen is bad configuration, not an outage. */
		const st_preflight_addr addrs[] = {
			{ "ingest", opts[W_INGEST].sval, ST_PREFLIGHT_NNG },
			{ "publish", opts[W_PUBLISH].sval, ST_PREFLIGHT_NNG },
			{ "control", opts[W_CONTROL].sval, ST_PREFLIGHT_NNG },
			{ "http", opts[W_HTTP].sval, ST_PREFLIGHT_HTTP },
		};
		st_preflight_listen(PROG, addrs, ST_ARRAY_LEN(addrs));
	}
	if (opts[W_INGEST_KEYS].sval[0] != '\0') {
		/* Producer credentials: a local check, before the database (a bad file is bad configuration). */
		st_auth_config acfg = { .policy = { .leeway_s = INGEST_KEYS_LEEWAY_S, .topics_claim = "publish" },
		                        .wall = st_clock_realtime() };
		st_auth_keys *ks = NULL;
		char why[256];

		if (st_auth_keys_load(opts[W_INGEST_KEYS].sval, &ks, why, sizeof(why)) != ST_OK)
			st_config_fail(PROG, "--ingest-keys %s: %s", opts[W_INGEST_KEYS].sval, why);
		w.auth = st_auth_store_new(ks, &acfg);
		w.keys_path = opts[W_INGEST_KEYS].sval;
		st_info("--ingest-keys %s: %zu keys; every request needs a producer token", w.keys_path,
		        st_auth_keys_count(ks));
	} else {
		open_warning(opts[W_INGEST].sval, opts[W_PUBLISH].sval);
	}
	w.clock = st_clock_system();
	w.interval_ms = (int)opts[W_FLUSH_INTERVAL_MS].ival;
	snprintf(w.lock_key, sizeof(w.lock_key), "%" PRId64, opts[W_LOCK_KEY].ival);
	st_buf_init(&w.p_topics);
	st_buf_init(&w.p_abouts);
	st_buf_init(&w.p_datas);
	st_buf_init(&w.p_keys);
	make_instance(w.instance, sizeof(w.instance));
	rc = run(&w);
	/* Everything accepted is flushed and answered; closing must not hold a restart (st_util.h). */
	st_exit_watchdog(PROG, 5, rc);
	writer_fini(&w);
	st_tls_unload();
	/* nng's own threads and buffers end here; without it ASan counts them as leaks. */
	nng_fini();
	return rc;
}
