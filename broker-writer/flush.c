/*
 * flush: the writer's flush state machine (flush.h).  See docs/writer.md,
 * "The flush".
 *
 * DESIGN.  Two batches hold what the machine has: `cur` accumulates
 * accepted requests, `fl` is the flush in progress (sent, or waiting for its
 * retry after a failure).  flush_start (the writer's flush timer) moves the
 * oldest requests of cur, at most FLUSH_MAX_EVENTS / FLUSH_MAX_BYTES (at
 * least one request), into an empty fl, names the flush
 * "<instance>:<counter>", encodes the binary text[] parameters once and
 * sends one broker_append4 statement.  When requests that were already due
 * are left in cur (the bound split them off, or a tick found the previous
 * flush in flight), the next flush starts as soon as this one committed,
 * not at the next tick: a backlog drains as back-to-back flushes, still one
 * at a time and in arrival order, while a light load keeps one flush per
 * interval (larger publish batches for the edges).  A whole flush
 * (FLUSH_MAX_EVENTS or FLUSH_MAX_BYTES) waiting in cur while nothing is in
 * flight does not wait for the tick either (flush_add kicks flush_start on
 * the next loop turn).  A failure (SQL error or
 * lost connection: the outcome is then unknown) keeps fl, its parameters
 * and its flush_id, and resends after a backoff of 100 ms doubling to 5 s;
 * broker_append returns the recorded result if the earlier attempt did
 * commit, so nothing is stored twice.  Meanwhile cur keeps accepting, up to
 * its own bounds (busy beyond).  After a commit: the test hook, the next
 * flush sent if one is due (the committed one moves to `done`), then the
 * committed one's publish (fresh rows, ascending seq), then its answers:
 * the database inserts the next flush while the loop publishes and answers.
 *
 * The states (enum flush_state) and their transitions, the table below:
 *     IDLE --flush_start: cur or iso into fl--> WAITING --flush_send--> SENT
 *     SENT --committed or refused--> IDLE     SENT --failed--> WAITING
 *     WAITING --retry timer, connection back--> SENT
 *     IDLE --flush_start, nothing to flush--> TICK --head or error--> IDLE
 * fl is non-empty exactly in WAITING and SENT.  A tick (the head for the
 * edges when nothing is flushed) and a flush share the connection, so at
 * most one of them is in flight.  Requests that become due while the
 * machine is not IDLE set `due`, and leave as soon as it is IDLE again.
 *
 * Failures are classified by SQLSTATE (pgerr_permanent): a lost
 * connection, a timeout, a lock, a serialisation failure and anything
 * unknown are transient and retried as above, for at most give_up_ms
 * (FLUSH_GIVE_UP_MS, 12 h) after the flush's first attempt; then the fatal
 * hook (the writer logs one line and exits 1: its producers resend to
 * another replica).  A data error (class 22 data exception, 23 integrity
 * violation but unique_violation, 54 program limit) would fail again
 * identically: the transaction rolled back, so nothing of the flush is
 * stored, and its requests move to `iso`, which is flushed one request per
 * transaction (new flush_ids) before anything of cur.  A request that fails
 * with a data error on its own is refused `invalid` with the database's
 * reason; the others are stored and answered as usual.
 *
 * Unavailability: from the first failed database round trip (or lost
 * connection) until the next successful one, fail_since holds the time;
 * past FLUSH_UNAVAILABLE_AFTER_MS flush_db_unavailable says so (the writer
 * then refuses new requests).
 */
#include "flush.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "pgerr.h"
#include "st_buf.h"
#include "st_log.h"
#include "st_pgarray.h"
#include "st_util.h"
#include "wire.h"
#include "wire_pub.h"

#define RETRY_MIN_MS 100
#define RETRY_MAX_MS 5000

static const char *const names[FLUSH_STATE_COUNT] = { "idle", "tick", "waiting", "sent" };

/* [from][to]: the diagram of the DESIGN paragraph, a row per state in the order of the enum. */
static const bool edges[FLUSH_STATE_COUNT][FLUSH_STATE_COUNT] = {
	/* IDLE: a flush taken into fl, or the head query sent. */
	[FLUSH_IDLE] = { [FLUSH_TICK] = true, [FLUSH_WAITING] = true },
	/* TICK: the head query answered or failed (also when it could not be sent). */
	[FLUSH_TICK] = { [FLUSH_IDLE] = true },
	/* WAITING: the statement sent (first attempt, retry timer, connection back). */
	[FLUSH_WAITING] = { [FLUSH_SENT] = true },
	/* SENT: committed or refused (fl handed back), or failed (resend later). */
	[FLUSH_SENT] = { [FLUSH_IDLE] = true, [FLUSH_WAITING] = true },
};

bool
flush_state_can(enum flush_state from, enum flush_state to)
{
	return (unsigned)from < FLUSH_STATE_COUNT && (unsigned)to < FLUSH_STATE_COUNT && edges[from][to];
}

const char *
flush_state_name(enum flush_state s)
{
	return (unsigned)s < FLUSH_STATE_COUNT ? names[s] : "?";
}

void
flush_goto(enum flush_state *state, enum flush_state to)
{
	if (!flush_state_can(*state, to))
		st_error("flush: no transition %s -> %s", flush_state_name(*state), flush_state_name(to));
	ST_ASSERT(flush_state_can(*state, to));
	*state = to;
}

struct flush {
	const st_clock *clock; /* borrowed */
	st_pgconn *db;         /* borrowed: the writer's flush connection */
	publish *pub;          /* borrowed */
	flush_hooks hooks;
	flush_metrics m; /* borrowed counters */
	char instance[128];
	uint64_t flush_counter;
	char lock_key[24];
	batch *cur, *fl;
	batch *done; /* empty but inside on_flush_result: the committed flush, published and answered
		      * after the next one was sent (swapped with fl, so both keep their arrays) */
	batch *iso;  /* requests of a flush that failed with a data error: flushed one at a time */
	char flush_id[160];
	uint64_t fl_first_ms; /* first attempt of the flush in fl */
	uint64_t give_up_ms;
	st_buf p_topics, p_abouts, p_datas, p_keys;
	enum flush_state state; /* see DESIGN; changed by flush_goto only */
	bool due;               /* cur holds requests that were due at a flush tick already */
	bool stopping;          /* the writer stops: no ticks, no waiting for the timer */
	st_backoff retry;       /* between attempts of one flush: RETRY_MIN_MS doubling to RETRY_MAX_MS */
	uint64_t fail_since;    /* 0 = the database answered last time */
	uint64_t flush_start_ms;
	uint64_t last_flush_ms; /* duration of the last successful flush */
	uint64_t commits, crash_after;
	struct event *retry_timer;
	struct event *kick; /* flush_add found a whole flush waiting: flush_start on the next loop turn */
	uint64_t *seqs;     /* PROTO_MAX_BATCH entries, for answers */
};

static uint64_t
now_ms(const flush *f)
{
	return st_clock_now(f->clock);
}

static void
arm(struct event *ev, uint32_t ms)
{
	struct timeval tv = st_timeval_ms(ms);

	evtimer_add(ev, &tv);
}

static bool
parse_u64(const char *s, uint64_t *out)
{
	return st_parse_u64(s, strlen(s), out) == ST_OK;
}

static void flush_send(flush *f);

static void
db_failed(flush *f)
{
	if (f->fail_since == 0)
		f->fail_since = now_ms(f);
}

/* The database answered: it is reachable. */
static void
db_answered(flush *f)
{
	f->fail_since = 0;
	f->hooks.reachable(f->hooks.arg);
}

static void
update_pending(flush *f)
{
	st_gauge_set(f->m.pending, (int64_t)(batch_events(f->cur) + batch_events(f->fl) + batch_events(f->iso)));
}

static int
cmp_seq(const void *a, const void *b)
{
	uint64_t x = ((const proto_pub_event *)a)->seq, y = ((const proto_pub_event *)b)->seq;

	return x < y ? -1 : x > y;
}

/* Records broker_append4's one-row answer in fl; returns prev, or false on a malformed answer. */
static bool
read_result(flush *f, PGresult *res, uint64_t *prev)
{
	size_t n = batch_rows(f->fl), n_o = 0, n_s = 0;
	uint64_t first, n_fresh, *ords = NULL, *seqs = NULL;
	bool ok;

	if (PQntuples(res) != 1 || PQnfields(res) != 5)
		return false;
	ok = parse_u64(PQgetvalue(res, 0, 0), prev) && parse_u64(PQgetvalue(res, 0, 1), &first) &&
	     parse_u64(PQgetvalue(res, 0, 2), &n_fresh) &&
	     st_pgarray_parse_u64s(PQgetvalue(res, 0, 3), n, &ords, &n_o) == ST_OK &&
	     st_pgarray_parse_u64s(PQgetvalue(res, 0, 4), n, &seqs, &n_s) == ST_OK && n_o == n_s &&
	     batch_apply(f->fl, *prev, first, n_fresh, ords, seqs, n_o) == ST_OK;
	free(ords);
	free(seqs);
	return ok;
}

/* b committed (prev: the head before it): its fresh rows published in seq order, its requests answered. */
static void
committed(flush *f, batch *b, uint64_t prev)
{
	size_t n = batch_rows(b), n_fresh = 0;
	proto_pub_event *pe = st_xcalloc(n ? n : 1, sizeof(*pe));

	for (size_t i = 0; i < n; i++) {
		if (!batch_row_fresh(b, i))
			continue;
		const proto_event *ev = batch_row(b, i);
		pe[n_fresh++] = (proto_pub_event){ .seq = batch_row_seq(b, i),
						   .topic = ev->topic,
						   .about = ev->about,
						   .n_about = ev->n_about,
						   .data = ev->data,
						   .has_data = ev->has_data };
	}
	/* already ascending (consecutive in row order); sorting keeps that a checked property */
	qsort(pe, n_fresh, sizeof(*pe), cmp_seq);
	/* A flush whose every event was stored already (a producer resending a
	 * key) still tells the edges the head: without it they see neither a
	 * batch nor a tick (the timer found cur non-empty) and go unready. */
	if (n_fresh > 0)
		publish_batch(f->pub, prev, pe, n_fresh);
	else
		publish_tick(f->pub, prev);
	free(pe);
	st_counter_add(f->m.committed, n_fresh);
	for (size_t i = 0; i < batch_requests(b); i++) {
		size_t k = batch_req_count(b, i);
		batch_req_seqs(b, i, f->seqs);
		f->hooks.answer(batch_req_owner(b, i), f->seqs, k);
	}
	batch_reset(b);
	update_pending(f);
}

/* Schedules the resend of fl, or calls the fatal hook once it has failed
 * for give_up_ms.  sent: an attempt failed (counted, logged); otherwise the
 * connection was down and nothing was sent (st_pgconn logged the loss). */
static void
flush_retry_later(flush *f, const char *msg, bool sent)
{
	uint64_t failing = now_ms(f) - f->fl_first_ms;
	uint32_t wait;

	db_failed(f);
	if (failing >= f->give_up_ms) {
		st_error("flush %s (%zu events) has failed for %" PRIu64 " s since its first attempt (limit %" PRIu64
			 " s), last error: %s; exiting so that its producers resend to another replica",
			 f->flush_id, batch_rows(f->fl), failing / 1000, f->give_up_ms / 1000, msg);
		f->hooks.fatal(f->hooks.arg);
		return;
	}
	wait = st_backoff_next(&f->retry);
	if (sent) {
		st_counter_inc(f->m.failures);
		st_warn("flush %s (%zu events) failed, retrying in %u ms: %s", f->flush_id, batch_rows(f->fl), wait,
			msg);
	}
	arm(f->retry_timer, wait);
}

/*
 * fl failed with a data error; nothing of it is stored (the statement's
 * transaction rolled back).  Several requests: all move to iso, to be
 * flushed one by one.  One request: it is what cannot be stored, refused.
 */
static void
flush_failed_permanently(flush *f, const PGresult *res, const char *msg)
{
	const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	char detail[400];

	st_counter_inc(f->m.failures);
	if (batch_requests(f->fl) > 1) {
		st_warn("flush %s (%zu requests) failed with a data error (%s); flushing its requests one at a time",
			f->flush_id, batch_requests(f->fl), msg);
		/* iso is empty: a split flush holds one request, and never reaches here */
		batch_take(f->iso, f->fl, BATCH_MAX_EVENTS, BATCH_MAX_BYTES);
	} else {
		/* the primary message names the constraint or the reason, without the SQL context */
		snprintf(detail, sizeof(detail), "the database cannot store it (SQLSTATE %.5s): %.300s", st,
			 primary != NULL ? primary : msg);
		st_one_line(detail);
		st_warn("flush %s: request of %zu events refused: %s", f->flush_id, batch_events(f->fl), detail);
		st_counter_inc(f->m.rej_invalid);
		f->hooks.refuse(batch_req_owner(f->fl, 0), "invalid", detail);
		batch_reset(f->fl);
	}
	flush_goto(&f->state, FLUSH_IDLE);
	update_pending(f);
	db_answered(f);
	st_backoff_reset(&f->retry);
	flush_start(f);
	f->hooks.settled(f->hooks.arg);
}

/* A whole flush is waiting in cur: it need not wait for the tick. */
static bool
whole_flush_waiting(const flush *f)
{
	return batch_events(f->cur) >= FLUSH_MAX_EVENTS || batch_bytes(f->cur) >= FLUSH_MAX_BYTES;
}

static void
on_flush_result(void *arg, PGresult *res, const char *err)
{
	flush *f = arg;
	uint64_t prev = 0;
	batch *done;

	ST_ASSERT(f->state == FLUSH_SENT);
	if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK || !read_result(f, res, &prev)) {
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
		    pgerr_permanent(PQresultErrorField(res, PG_DIAG_SQLSTATE))) {
			flush_failed_permanently(f, res, msg);
		} else {
			flush_goto(&f->state, FLUSH_WAITING);
			flush_retry_later(f, msg, true);
		}
		return;
	}
	db_answered(f);
	st_backoff_reset(&f->retry);
	f->last_flush_ms = now_ms(f) - f->flush_start_ms;
	st_histogram_observe(f->m.seconds, (double)f->last_flush_ms / 1000.0);
	f->commits++;
	if (f->crash_after != 0 && f->commits == f->crash_after) {
		st_error("STUDIO_TEST_CRASH_AFTER_COMMIT=%" PRIu64 ": killing myself after the commit", f->crash_after);
		raise(SIGKILL);
	}
	done = f->fl;
	f->fl = f->done;
	f->done = done;
	flush_goto(&f->state, FLUSH_IDLE);
	/*
	 * The next flush goes before this one's publish and answers, so the
	 * database inserts while the loop publishes and answers (a backlog's
	 * flushes no longer wait for that work, issue 27).  Order holds: the
	 * next result is read in a later loop turn, after this publish; a send
	 * that fails at once only schedules its retry.  Do not wait for the
	 * timer when stopping (drain what is left), when what is left was due
	 * already (a split, or a tick that found this flush in flight), when
	 * requests wait to be flushed one at a time, or when a whole flush is
	 * waiting anyway.
	 */
	if (f->stopping || f->due || !batch_empty(f->iso) || whole_flush_waiting(f))
		flush_start(f);
	committed(f, done, prev);
	f->hooks.settled(f->hooks.arg);
}

static void
flush_send(flush *f)
{
	bool keys = batch_has_keys(f->fl);
	/* no key at all (the common case): NULL, broker_append's join-free path */
	const char *vals[6] = { f->lock_key,   f->flush_id,  f->p_topics.p,
				f->p_abouts.p, f->p_datas.p, keys ? f->p_keys.p : NULL };
	int lens[6] = { 0, 0, (int)f->p_topics.len, (int)f->p_abouts.len, (int)f->p_datas.len, (int)f->p_keys.len };
	int fmts[6] = { 0, 0, 1, 1, 1, 1 };
	Oid types[6] = { ST_PG_INT8_OID,       ST_PG_TEXT_OID,       ST_PG_TEXT_ARRAY_OID,
			 ST_PG_TEXT_ARRAY_OID, ST_PG_TEXT_ARRAY_OID, ST_PG_TEXT_ARRAY_OID };

	if (f->state != FLUSH_WAITING)
		return;
	f->flush_start_ms = now_ms(f);
	flush_goto(&f->state, FLUSH_SENT); /* before the call: a broken connection calls back from inside it */
	if (st_pgconn_send(
		    f->db,
		    "SELECT prev, first_seq, n_fresh, dup_ords, dup_seqs FROM broker_append4($1, $2, $3, $4, $5, $6)",
		    6, types, vals, lens, fmts, 0, on_flush_result, f) != ST_OK &&
	    f->state == FLUSH_SENT) { /* else the callback ran from inside and moved on */
		flush_goto(&f->state, FLUSH_WAITING);
		if (!st_pgconn_up(f->db))
			flush_retry_later(f, "database not connected", false);
		else
			arm(f->retry_timer, 10); /* busy (no tick is in flight here, see flush_start): try again */
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
on_kick(evutil_socket_t fd, short what, void *arg)
{
	flush *f = arg;

	(void)fd;
	(void)what;
	if (f->state == FLUSH_IDLE && whole_flush_waiting(f))
		flush_start(f);
}

static void
on_tick_result(void *arg, PGresult *res, const char *err)
{
	flush *f = arg;
	uint64_t head;

	ST_ASSERT(f->state == FLUSH_TICK);
	flush_goto(&f->state, FLUSH_IDLE);
	if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
	    !parse_u64(PQgetvalue(res, 0, 0), &head)) {
		char msg[512];

		if (res != NULL)
			st_pgconn_result_text(res, msg, sizeof(msg));
		st_debug("tick query failed: %s", res == NULL ? err : msg);
		db_failed(f);
	} else {
		db_answered(f);
		publish_tick(f->pub, head);
	}
	/* requests that came due while the tick was in flight (or a stop) go now;
	 * never recursion: flush_start sends a tick only when cur is empty */
	if (!batch_empty(f->cur) && (f->due || f->stopping))
		flush_start(f);
	f->hooks.settled(f->hooks.arg);
}

void
flush_start(flush *f)
{
	if (f->state != FLUSH_IDLE) {
		/* at most one flush or tick in flight (or a flush waiting for its
		 * retry); what this tick would have sent goes right after it */
		if (!batch_empty(f->cur))
			f->due = true;
		return;
	}
	ST_ASSERT(batch_empty(f->fl));
	if (!batch_empty(f->iso)) {
		/* one request per transaction, before anything newer (arrival order) */
		batch_take(f->fl, f->iso, 1, 1);
		f->due = f->due || !batch_empty(f->cur);
		goto send;
	}
	if (batch_empty(f->cur)) {
		if (!f->stopping && st_pgconn_idle(f->db)) {
			flush_goto(&f->state, FLUSH_TICK);
			if (st_pgconn_send(f->db, "SELECT coalesce(max(seq), 0) FROM broker_event", 0, NULL, NULL, NULL,
					   NULL, 0, on_tick_result, f) != ST_OK &&
			    f->state == FLUSH_TICK)
				flush_goto(&f->state, FLUSH_IDLE);
		}
		return;
	}
	batch_take(f->fl, f->cur, FLUSH_MAX_EVENTS, FLUSH_MAX_BYTES);
	f->due = !batch_empty(f->cur);
send:
	flush_goto(&f->state, FLUSH_WAITING);
	f->fl_first_ms = now_ms(f);
	snprintf(f->flush_id, sizeof(f->flush_id), "%s:%" PRIu64, f->instance, ++f->flush_counter);
	st_buf_reset(&f->p_topics);
	st_buf_reset(&f->p_abouts);
	st_buf_reset(&f->p_datas);
	st_buf_reset(&f->p_keys);
	batch_encode(f->fl, &f->p_topics, &f->p_abouts, &f->p_datas, &f->p_keys);
	st_backoff_reset(&f->retry);
	flush_send(f);
}

void
flush_set_stopping(flush *f)
{
	f->stopping = true;
}

void
flush_db_state(flush *f, bool up)
{
	if (!up) {
		db_failed(f);
		return;
	}
	/*
	 * Reachable again: resend a waiting flush now instead of at the end of
	 * its (up to 5 s) backoff.  fail_since is cleared by the next flush or
	 * tick that succeeds, not here: a connection that drops during every
	 * flush must still end in "unavailable".
	 */
	if (f->state == FLUSH_WAITING) {
		evtimer_del(f->retry_timer);
		flush_send(f);
	}
}

st_err
flush_add(flush *f, void *owner, size_t n, size_t bytes, batch_event_fn at, const void *src)
{
	st_err rv = batch_add(f->cur, owner, n, bytes, at, src);

	if (rv != ST_OK)
		return rv;
	update_pending(f);
	/*
	 * A whole flush waiting goes now instead of at the next tick (up to a
	 * flush interval later): under a burst the database is not left idle
	 * for that interval.  Not from here: from its own callback, so that
	 * no hook of the machine runs inside the caller's flush_add.
	 */
	if (f->state == FLUSH_IDLE && whole_flush_waiting(f))
		event_active(f->kick, EV_TIMEOUT, 0);
	return ST_OK;
}

bool
flush_db_unavailable(const flush *f)
{
	return f->fail_since != 0 && now_ms(f) - f->fail_since > FLUSH_UNAVAILABLE_AFTER_MS;
}

bool
flush_done(const flush *f)
{
	return f->state == FLUSH_IDLE && batch_empty(f->cur) && batch_empty(f->iso);
}

enum flush_state
flush_get_state(const flush *f)
{
	return f->state;
}

void
flush_stats_get(const flush *f, flush_stats *out)
{
	out->pending_events = batch_events(f->cur);
	out->inflight = !batch_empty(f->fl);
	out->inflight_events = batch_events(f->fl);
	out->unstored_events = batch_events(f->cur) + batch_events(f->fl) + batch_events(f->iso);
	out->last_flush_ms = f->last_flush_ms;
}

st_err
flush_new(struct event_base *base, const st_clock *clock, st_pgconn *db, publish *pub, const flush_config *cfg,
	  const flush_metrics *m, const flush_hooks *hooks, flush **out)
{
	flush *f = st_xcalloc(1, sizeof(*f));
	const char *env = getenv("STUDIO_TEST_FLUSH_GIVE_UP_MS");

	f->clock = clock;
	f->db = db;
	f->pub = pub;
	f->hooks = *hooks;
	f->m = *m;
	f->state = FLUSH_IDLE;
	snprintf(f->instance, sizeof(f->instance), "%s", cfg->instance);
	snprintf(f->lock_key, sizeof(f->lock_key), "%" PRId64, cfg->lock_key);
	f->crash_after = cfg->crash_after;
	f->give_up_ms = cfg->give_up_ms;
	if (f->give_up_ms == 0) {
		f->give_up_ms = FLUSH_GIVE_UP_MS;
		if (env != NULL && env[0] != '\0' && (!parse_u64(env, &f->give_up_ms) || f->give_up_ms == 0)) {
			st_error("STUDIO_TEST_FLUSH_GIVE_UP_MS: not a positive number: %s", env);
			f->give_up_ms = FLUSH_GIVE_UP_MS;
		}
	}
	f->cur = batch_new(BATCH_MAX_EVENTS, BATCH_MAX_BYTES);
	f->fl = batch_new(BATCH_MAX_EVENTS, BATCH_MAX_BYTES);
	f->done = batch_new(BATCH_MAX_EVENTS, BATCH_MAX_BYTES);
	f->iso = batch_new(BATCH_MAX_EVENTS, BATCH_MAX_BYTES);
	f->seqs = st_xcalloc(PROTO_MAX_BATCH, sizeof(*f->seqs));
	st_buf_init(&f->p_topics);
	st_buf_init(&f->p_abouts);
	st_buf_init(&f->p_datas);
	st_buf_init(&f->p_keys);
	st_backoff_init(&f->retry, RETRY_MIN_MS, RETRY_MAX_MS);
	f->retry_timer = evtimer_new(base, on_retry, f);
	f->kick = event_new(base, -1, 0, on_kick, f);
	ST_ASSERT(f->retry_timer != NULL && f->kick != NULL);
	*out = f;
	return ST_OK;
}

void
flush_free(flush *f)
{
	if (f == NULL)
		return;
	batch_free(f->cur);
	batch_free(f->fl);
	batch_free(f->done);
	batch_free(f->iso);
	free(f->seqs);
	st_buf_fini(&f->p_topics);
	st_buf_fini(&f->p_abouts);
	st_buf_fini(&f->p_datas);
	st_buf_fini(&f->p_keys);
	event_free(f->retry_timer);
	event_free(f->kick);
	free(f);
}
