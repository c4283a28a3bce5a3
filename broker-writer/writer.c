/*
 * writer: the broker-writer's parts and their life (writer.h).
 *
 * DESIGN.  One libevent loop owns everything but the ingest receivers' nng
 * callbacks, which decode and validate on nng threads and hand valid
 * requests over through ingest's one mailbox.  Accepted requests go to the
 * flush machine (flush.c: the batches, one broker_append4 transaction per
 * flush under the advisory lock, retries, splitting on data errors, then
 * publish and the replies); this file builds the writer's parts (main.c
 * configured them), answers the ops endpoints and runs the process's life:
 *     RUNNING --drain--> DRAINING --signal--> STOPPING --all flushed--> FINISHING
 *     RUNNING --signal--> STOPPING
 *
 * Unavailability: past 10 s of failed database round trips
 * (flush_db_unavailable) new requests are refused "unavailable", and so
 * are all requests while draining or stopping.  SIGTERM/SIGINT stop
 * accepting, flush what was accepted, publish, reply, close and exit 0; if
 * that has not happened 30 s later (database down) the process exits 1.
 * A flush that fails for 12 h (flush.h) also exits 1.
 *
 * The schema check runs before the loop with blocking libpq: a current schema
 * gets no DDL, a fresh database is created, an older one upgraded only
 * when that locks no table (schema.h); retried with backoff while the
 * database is unreachable or a lock times out (SIGTERM then exits 0 at
 * once); a database this writer must not use (not UTF8, an upgrade that
 * needs `broker-writer migrate`, a newer incompatible schema) exits 2.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "flush.h"
#include "ingest.h"
#include "ingest_http.h"
#include "publish.h"
#include "retention.h"
#include "schema.h"
#include "st_auth_store.h"
#include "st_buf.h"
#include "st_clock.h"
#include "st_config.h"
#include "st_control.h"
#include "st_http.h"
#include "st_keywatch.h"
#include "st_log.h"
#include "st_metrics.h"
#include "st_ops.h"
#include "st_pgconn.h"
#include "st_tls.h"
#include "st_tlsstat.h"
#include "st_util.h"
#include "writer.h"

/* Work slots: requests accepted and not yet answered (ingest.h). */
#define INGEST_CONTEXTS 1024
#define STOP_GIVE_UP_MS 30000
#define EXIT_LINGER_MS 300

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
static const st_pgconn_opts flush_db = { .name = "flush",
					 .application_name = WRITER_PROG,
					 .setup_sql = schema_session_sql,
					 .query_deadline_ms = DB_STATEMENT_DEADLINE_MS,
					 .writes = true };
static const st_pgconn_opts retention_db = { .name = "retention",
					     .application_name = WRITER_PROG,
					     .setup_sql = schema_session_sql,
					     .query_deadline_ms = DB_STATEMENT_DEADLINE_MS,
					     .writes = true };

/* Ordered: each state refuses what the ones before it refuse. */
enum writer_life {
	W_RUNNING,
	W_DRAINING,  /* `drain`: new requests refused unavailable, accepted ones flushed */
	W_STOPPING,  /* SIGTERM/SIGINT: the same, then exit once everything is flushed */
	W_FINISHING, /* everything flushed: exiting after EXIT_LINGER_MS */
};

struct writer {
	writer_config c; /* the strings are the caller's, c.auth is ours (see writer_new) */
	struct event_base *base;
	const st_clock *clock;
	st_pgconn *db, *db_ret;
	ingest *in;
	publish *pub;
	retention *ret;
	http_server *http;
	ingest_http *in_http; /* --ingest-http, or NULL */
	st_control *ctl;
	flush *flush;          /* the batches and the flush machine (flush.h) */
	enum writer_life life; /* see DESIGN */
	int exit_code;
	struct event *flush_timer, *give_up_timer, *exit_timer, *sig_term, *sig_int, *sig_hup;
	st_keywatch *keys; /* owned; NULL: no --ingest-keys */
	/* metrics */
	st_metrics *m;
	st_counter *committed, *rej_invalid, *rej_busy, *rej_unavail, *rej_unauth, *rej_forbidden, *flush_failures;
	st_histogram *flush_seconds;
	st_gauge *pending, *db_up;
	st_counter *conn_refused_global, *conn_refused_addr, *conn_closed_idle, *conn_displaced, *conn_closed_hs;
	st_gauge *conns;
	st_tlsstat *tlsstat; /* failed TLS handshakes per listener (nng's statistics) */
};

static void
arm(struct event *ev, uint32_t ms)
{
	struct timeval tv = st_timeval_ms(ms);

	evtimer_add(ev, &tv);
}

/* ---------------------------------------------------------------- requests */

static void maybe_finish(writer *w);

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

	if (why == NULL && flush_db_unavailable(w->flush))
		why = "database unreachable";
	if (w->in)
		ingest_set_refusal(w->in, why);
}

static const proto_event *
request_at(const void *src, size_t i)
{
	return proto_request_event(src, i);
}

static void
on_request(ingest_origin *work, const proto_request *req, void *arg)
{
	writer *w = arg;
	st_err rv;

	refusal_update(w);
	if (life_refusal(w) != NULL) {
		st_counter_inc(w->rej_unavail);
		ingest_reply_err(work, "unavailable", life_refusal(w));
		return;
	}
	if (flush_db_unavailable(w->flush)) {
		st_counter_inc(w->rej_unavail);
		ingest_reply_err(work, "unavailable", "database unreachable");
		return;
	}
	rv = flush_add(w->flush, work, proto_request_count(req), proto_request_bytes(req), request_at, req);
	if (rv != ST_OK) {
		st_counter_inc(w->rej_busy);
		ingest_reply_err(work, "busy", "buffer full, retry later");
	}
}

/* ---------------------------------------------------------------- flush hooks */

static void
on_answer(void *owner, const uint64_t *seqs, size_t n)
{
	ingest_reply_ok(owner, seqs, n);
}

static void
on_refuse(void *owner, const char *code, const char *detail)
{
	ingest_reply_err(owner, code, detail);
}

static void
on_reachable(void *arg)
{
	refusal_update(arg);
}

static void
on_settled(void *arg)
{
	maybe_finish(arg);
}

static void
on_fatal(void *arg)
{
	writer *w = arg;

	w->exit_code = 1;
	event_base_loopbreak(w->base);
}

static void
on_flush_timer(evutil_socket_t fd, short what, void *arg)
{
	writer *w = arg;

	(void)fd;
	(void)what;
	refusal_update(w);
	flush_start(w->flush);
}

static void
on_db_state(void *arg, bool up)
{
	writer *w = arg;

	flush_db_state(w->flush, up);
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
	if (w->life != W_STOPPING || !flush_done(w->flush))
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
	flush_stats fs;

	(void)fd;
	(void)what;
	if (w->life == W_FINISHING)
		return;
	flush_stats_get(w->flush, &fs);
	st_error("shutdown: the database stayed unavailable for %d s; giving up with %zu accepted events not stored",
		 STOP_GIVE_UP_MS / 1000, fs.unstored_events);
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
	flush_set_stopping(w->flush);
	flush_start(w->flush);
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
	st_tlsstat_poll(w->tlsstat);
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
	flush_stats fs;

	flush_stats_get(w->flush, &fs);
	st_buf_printf(
		out,
		"\"pending_events\":%zu,\"inflight_flush\":%s,\"inflight_events\":%zu,\"committed_total\":%" PRIu64
		",\"db_up\":%s,\"last_flush_ms\":%" PRIu64 ",\"draining\":%s,\"stopping\":%s,\"instance\":\"%s\""
		",\"ingest_inflight_bytes\":%zu",
		fs.pending_events, fs.inflight ? "true" : "false", fs.inflight_events, st_counter_get(w->committed),
		st_pgconn_up(w->db) ? "true" : "false", fs.last_flush_ms, w->life != W_RUNNING ? "true" : "false",
		w->life >= W_STOPPING ? "true" : "false", w->c.instance, ingest_inflight_bytes(w->in));
}

/* Reloads --ingest-keys (st_keywatch); requests being checked on the receivers keep the set they took. */
static st_err
reload_keys(writer *w, char *why, size_t cap)
{
	if (w->keys == NULL) {
		snprintf(why, cap, "producer credentials are off (no --ingest-keys)");
		return ST_EINVAL;
	}
	return st_keywatch_reload(w->keys, why, cap);
}

static void
on_hup(evutil_socket_t sig, short what, void *arg)
{
	char why[256];

	(void)sig;
	(void)what;
	if (reload_keys(arg, why, sizeof(why)) != ST_OK && ((writer *)arg)->c.auth == NULL)
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
		flush_start(w->flush);
		put_stats(w, out);
		return ST_OK;
	}
	if (strcmp(cmd, "reload") == 0) {
		char reason[256];

		if (reload_keys(w, reason, sizeof(reason)) != ST_OK) {
			st_buf_puts(out, reason);
			return ST_EINVAL;
		}
		st_buf_printf(out, "\"keys\":%zu", st_auth_store_key_count(w->c.auth));
		return ST_OK;
	}
	return ST_ENOTFOUND;
}

/* ---------------------------------------------------------------- main */

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
	w->flush_seconds =
		st_metrics_histogram(w->m, "studio_writer_flush_seconds", NULL,
				     "Duration of successful flush transactions", bounds, ST_ARRAY_LEN(bounds));
	w->flush_failures = st_metrics_counter(w->m, "studio_writer_flush_failures_total", NULL,
					       "Flush attempts that failed and were retried");
	w->db_up = st_metrics_gauge(w->m, "studio_database_up", NULL, "1 when the flush connection is up, else 0.");
	w->pending = st_metrics_gauge(w->m, "studio_writer_pending_events", NULL, "Accepted events not yet committed");
	w->conn_refused_global =
		st_metrics_counter(w->m, "studio_writer_ingest_conns_refused_total", "reason=\"global_cap\"",
				   "Ingest connections closed as they arrived, by the cap they met");
	w->conn_refused_addr =
		st_metrics_counter(w->m, "studio_writer_ingest_conns_refused_total", "reason=\"address_cap\"",
				   "Ingest connections closed as they arrived, by the cap they met");
	w->conn_closed_idle = st_metrics_counter(w->m, "studio_writer_ingest_conns_closed_total", "reason=\"idle\"",
						 "Ingest connections closed before their first request");
	w->conn_displaced = st_metrics_counter(w->m, "studio_writer_ingest_conns_closed_total", "reason=\"displaced\"",
					       "Ingest connections closed before their first request");
	w->conn_closed_hs = st_metrics_counter(w->m, "studio_writer_ingest_conns_closed_total", "reason=\"handshake\"",
					       "Ingest connections closed before their first request");
	w->conns = st_metrics_gauge(w->m, "studio_writer_ingest_conns", NULL, "Open ingest connections (nng pipes)");
	{
		const char *const roles[] = { st_tls_role_name(ST_TLS_INGEST), st_tls_role_name(ST_TLS_PUBLISH),
					      st_tls_role_name(ST_TLS_CONTROL) };

		w->tlsstat = st_tlsstat_new(w->base, w->m, "studio_writer_tls_handshake_failures_total", roles,
					    ST_ARRAY_LEN(roles), ST_TLSSTAT_INTERVAL_MS);
	}
}

writer *
writer_new(const writer_config *c)
{
	writer *w = st_xcalloc(1, sizeof(*w));

	w->c = *c;
	w->clock = st_clock_system();
	return w;
}

int
writer_run(writer *w)
{
	const char *dsn = w->c.pg_dsn;
	flush_config fc = { .instance = w->c.instance, .lock_key = w->c.lock_key, .crash_after = w->c.crash_after };
	flush_metrics fm;
	const flush_hooks fh = { .answer = on_answer,
				 .refuse = on_refuse,
				 .reachable = on_reachable,
				 .settled = on_settled,
				 .fatal = on_fatal,
				 .arg = w };
	struct timeval iv;
	st_err rv;
	int mig;

	if ((mig = schema_migrate_retry(dsn, SCHEMA_ONLINE, 0, w->c.stop)) == 2)
		return 2;
	if (mig != 0) {
		st_info("stopped before the schema was in place");
		return 0;
	}
	if (*w->c.stop)
		return 0;

	evthread_use_pthreads();
	if ((w->base = event_base_new()) == NULL) {
		st_error("event_base_new failed");
		return 1;
	}
	metrics_init(w);
	fm = (flush_metrics){ .committed = w->committed,
			      .rej_invalid = w->rej_invalid,
			      .failures = w->flush_failures,
			      .seconds = w->flush_seconds,
			      .pending = w->pending };
	w->flush_timer = event_new(w->base, -1, EV_PERSIST, on_flush_timer, w);
	w->give_up_timer = evtimer_new(w->base, on_give_up, w);
	w->exit_timer = evtimer_new(w->base, on_exit_timer, w);
	w->sig_term = evsignal_new(w->base, SIGTERM, on_signal, w);
	w->sig_int = evsignal_new(w->base, SIGINT, on_signal, w);
	w->sig_hup = evsignal_new(w->base, SIGHUP, on_hup, w);
	ST_ASSERT(w->flush_timer && w->give_up_timer && w->exit_timer && w->sig_term && w->sig_int && w->sig_hup);
	evsignal_add(w->sig_term, NULL);
	evsignal_add(w->sig_int, NULL);
	evsignal_add(w->sig_hup, NULL);
	if (w->c.auth != NULL && (w->keys = st_keywatch_new(w->base, w->c.auth, w->c.keys_path, "--ingest-keys",
							    w->c.keys_watch_ms)) == NULL) {
		st_error("cannot watch the --ingest-keys file");
		return 1;
	}
	if (*w->c.stop)
		return 0;

	if (st_pgconn_new(w->base, dsn, &flush_db, on_db_state, w, &w->db) != ST_OK ||
	    st_pgconn_new(w->base, dsn, &retention_db, NULL, NULL, &w->db_ret) != ST_OK) {
		st_error("cannot create the database connections");
		return 1;
	}
	if ((rv = publish_new(w->c.publish_url, w->c.instance, &w->pub)) != ST_OK)
		st_config_fail(WRITER_PROG, "--publish: cannot listen (%s)", st_err_str(rv));
	if (flush_new(w->base, w->clock, w->db, w->pub, &fc, &fm, &fh, &w->flush) != ST_OK) {
		st_error("cannot create the flush");
		return 1;
	}
	ingest_auth ia = { .store = w->c.auth, .unauthorized = w->rej_unauth, .forbidden = w->rej_forbidden };
	if ((rv = ingest_new(w->base, w->c.ingest_url, INGEST_CONTEXTS, w->rej_invalid, w->c.auth ? &ia : NULL,
			     on_request, w, &w->in)) != ST_OK)
		st_config_fail(WRITER_PROG, "--ingest: cannot listen (%s)", st_err_str(rv));
	ingest_set_counters(w->in, w->rej_busy, w->rej_unavail);
	ingest_set_conn_metrics(w->in, w->conn_refused_global, w->conn_refused_addr, w->conn_closed_idle,
				w->conn_displaced, w->conn_closed_hs, w->conns);
	if (w->c.ingest_http_addr != NULL && w->c.ingest_http_addr[0] != '\0') {
		ingest_http_config hc = { .in = w->in,
					  .auth = w->c.auth,
					  .invalid = w->rej_invalid,
					  .busy = w->rej_busy,
					  .unavailable = w->rej_unavail,
					  .unauthorized = w->rej_unauth,
					  .forbidden = w->rej_forbidden,
					  .fn = on_request,
					  .arg = w };
		if ((rv = ingest_http_new(w->base, w->c.ingest_http_addr, &hc, &w->in_http)) != ST_OK)
			st_config_fail(WRITER_PROG, "--ingest-http: cannot listen on %s (%s)", w->c.ingest_http_addr,
				       st_err_str(rv));
	}
	if (w->c.control_url != NULL && w->c.control_url[0] != '\0' &&
	    (rv = st_control_new(w->base, w->c.control_url, on_control, w, &w->ctl)) != ST_OK)
		st_config_fail(WRITER_PROG, "--control: cannot listen (%s)", st_err_str(rv));
	if (w->c.http_addr != NULL && w->c.http_addr[0] != '\0' &&
	    (rv = http_server_new(w->base, w->c.http_addr, NULL, on_http, w, &w->http)) != ST_OK)
		st_config_fail(WRITER_PROG, "--http: cannot listen on %s (%s)", w->c.http_addr, st_err_str(rv));
	if (retention_new(w->base, w->db_ret, w->c.lock_key, w->c.retention_ms, w->m, &w->ret) != ST_OK) {
		st_error("cannot start retention");
		return 1;
	}
	iv = st_timeval_ms((uint64_t)w->c.flush_interval_ms);
	evtimer_add(w->flush_timer, &iv);
	st_info("writer %s: ingest, publish and flush every %d ms with lock key %" PRId64, w->c.instance,
		w->c.flush_interval_ms, w->c.lock_key);
	event_base_dispatch(w->base);
	return w->exit_code;
}

void
writer_free(writer *w)
{
	if (w == NULL)
		return;
	/* nng first: its threads must stop posting before the loop objects go */
	ingest_http_free(w->in_http); /* before the ingest whose budget it charges */
	ingest_free(w->in);
	st_control_free(w->ctl);
	http_server_free(w->http);
	publish_free(w->pub);
	retention_free(w->ret);
	st_pgconn_free(w->db_ret);
	st_pgconn_free(w->db);
	flush_free(w->flush);
	if (w->flush_timer)
		event_free(w->flush_timer);
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
	st_keywatch_free(w->keys);
	st_auth_store_free(w->c.auth);
	st_tlsstat_free(w->tlsstat);
	st_metrics_free(w->m);
	if (w->base)
		event_base_free(w->base);
	free(w);
}
