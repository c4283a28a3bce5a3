/*
 * streams: the registry of an edge's streams - admission of GET and HEAD
 * /v1/stream, the list of open streams, the hub that fans the history out
 * to them, heartbeats, drain, flow control and the streams' metrics.  One
 * stream's life is stream.c (stream.h), which this calls and which calls
 * back only the hooks this gives it (stream_registry in its stream_env).
 *
 * DESIGN
 *
 * Admission decides everything that is answered before a stream exists:
 * the query (streamreq), access control, then the refusals retrying can
 * fix (draining, not ready), the client's share (--max-streams-per-ip) and
 * the edge's (--max-streams, one atomic slot in the shared gauge).  What
 * passes becomes a stream (stream_open), which links itself here.
 *
 * The registry keeps three intrusive lists of stream_reg (embedded in each
 * stream): every stream (newest first; the heartbeat sweep and drain walk
 * it), the bounded ones (until=: visited when the head moves, not the
 * whole registry), and the ones behind (flow control: visited by
 * streams_backpressure, not the whole registry).
 *
 * Heartbeats go to every started stream once per interval, in slices so
 * one callback stays bounded; a stream that unlinks itself mid-sweep moves
 * the sweep's cursor on.  Drain sends every stream reconnect with a hint
 * spread over the grace, aborts what is left after it, and calls done once
 * the list is empty (from an event, never from inside a stream's callback).
 *
 * Ownership: the registry owns the hub, the heartbeat frame and its events;
 * each stream owns itself from stream_open to its end (stream.c), the
 * registry only links it.  Threads: confined to the loop of its base; the
 * handles of streams_metrics are shared by every registry (atomic).
 */
#include "streams.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flow.h"
#include "hub.h"
#include "refusal.h"
#include "st_clock.h"
#include "st_dlist.h"
#include "st_log.h"
#include "st_util.h"
#include "stream.h"
#include "streamreq.h"
#include "subq.h"

/* Streams visited per heartbeat callback, so one callback stays bounded. */
#define STREAM_HEARTBEAT_SLICE 2000

static const char *const outcome_names[OUT_COUNT] = { "complete", "failure", "reconnect", "abrupt_close" };
static const char *const replay_result_names[RR_COUNT] = { "ok", "replay_cap", "cursor_expired", "future", "error" };

struct streams {
	stream_env env; /* what every stream borrows */
	streams_config cfg;
	st_dlink all;     /* every stream (stream_reg.link), newest first */
	size_t n_streams; /* streams in the registry (a started response or a pending check) */
	size_t n_until;   /* streams with an until bound */
	uint64_t head;    /* the history head (sequencer) */
	bool head_known;
	bool draining;
	void (*drain_done)(void *arg);
	void *drain_arg;
	struct event *ev_heartbeat;
	struct event *ev_grace;
	struct event *ev_drain_done;
	stream_reg *hb_cursor; /* where the heartbeat sweep goes on */
	st_dlink behind;       /* live streams holding the intake back, flow control (stream_reg.blink) */
	st_dlink untils;       /* streams with an until bound: visited when the head moves (stream_reg.ulink) */
	bool hb_sweeping;
	frame *heartbeat; /* one shared heartbeat frame, owned */
	st_gauge *m_open;
	refusals refusals; /* the retryable refusals' jitter and counters; streams borrow it (env) */
	st_counter *m_auth[ST_AUTH_RESULT_COUNT]; /* refusals by reason; [ST_AUTH_OK] unused */
};

/* Registered once per process; every registry (one per loop) copies the handles. */
struct streams_metrics {
	subq_counters dropped;
	st_gauge *open;
	st_counter *outcome[OUT_COUNT];
	st_counter *replay[RR_COUNT];
	st_counter *frames;
	st_counter *refused;
	st_counter *seam_overlap;
	st_counter *seam_gap;
	st_counter *refusal[REFUSAL_COUNT];
	st_counter *replay_rows;
	st_counter *auth[ST_AUTH_RESULT_COUNT];
	st_counter *ip_refused;
};

/* The registry in order (newest first): NULL past the end. */
static stream_reg *
registry_first(streams *ss)
{
	st_dlink *n = st_dlist_first(&ss->all);

	return n ? ST_CONTAINER_OF(n, stream_reg, link) : NULL;
}

static stream_reg *
registry_after(streams *ss, stream_reg *r)
{
	st_dlink *n = st_dlist_after(&ss->all, &r->link);

	return n ? ST_CONTAINER_OF(n, stream_reg, link) : NULL;
}

/* ---- the hooks a stream calls back (stream_registry): head, the list --- */

static uint64_t
registry_head(void *arg)
{
	return ((const streams *)arg)->head;
}

static void
streams_check_drained(streams *ss)
{
	if (ss->draining && ss->n_streams == 0 && ss->drain_done)
		event_active(ss->ev_drain_done, 0, 0); /* done runs from the loop, after the caller returned */
}

static void
registry_link(void *arg, stream_reg *r)
{
	streams *ss = arg;

	st_dlist_push_front(&ss->all, &r->link);
	ss->n_streams++;
	if (r->bounded) {
		ss->n_until++;
		st_dlist_push_front(&ss->untils, &r->ulink);
	}
	/* The slot was reserved in the gauge by streams_slot_reserve; registry_unlink gives it back. */
}

/* One slot of --max-streams in the gauge every loop shares (deltas, not a set). */
static bool
streams_slot_reserve(streams *ss)
{
	if (ss->cfg.max_streams == 0) {
		st_gauge_add(ss->m_open, 1);
		return true;
	}
	return st_gauge_inc_below(ss->m_open, (int64_t)ss->cfg.max_streams);
}

static void
behind_leave(stream_reg *r, uint64_t now)
{
	if (flow_honour_leave(&r->honour, now))
		st_dlink_unlink(&r->blink);
}

static void
registry_unlink(void *arg, stream_reg *r)
{
	streams *ss = arg;

	behind_leave(r, st_clock_now(ss->env.clock));
	if (ss->hb_cursor == r)
		ss->hb_cursor = registry_after(ss, r);
	st_dlink_unlink(&r->link);
	ss->n_streams--;
	if (r->bounded) {
		ss->n_until--;
		st_dlink_unlink(&r->ulink);
	}
	st_gauge_add(ss->m_open, -1);
	streams_check_drained(ss);
}

/* ---- flow control (the rules are flow.h's) ----------------------------- */

/* The last hook: a stream pushed to may join the behind list. */
static void
registry_behind_check(void *arg, stream_reg *r)
{
	streams *ss = arg;

	if (r->honour.holding || !stream_burst_queued(r->s))
		return;
	if (flow_honour_join(&r->honour, st_clock_now(ss->env.clock)))
		st_dlist_push_front(&ss->behind, &r->blink);
}

bool
streams_backpressure(streams *ss)
{
	uint64_t now = st_clock_now(ss->env.clock);
	st_dlink *n, *next;

	for (n = st_dlist_first(&ss->behind); n != NULL; n = next) {
		stream_reg *r = ST_CONTAINER_OF(n, stream_reg, blink);

		next = st_dlist_after(&ss->behind, n);
		if (!stream_holds_intake(r->s, now) || flow_honour_spent(&r->honour, now))
			behind_leave(r, now);
	}
	return !st_dlist_empty(&ss->behind);
}

/* ---- admission --------------------------------------------------------- */

static void
head_noop_writable(void *arg)
{
	(void)arg;
}

static void
head_noop_close(void *arg, bool abrupt)
{
	(void)arg;
	(void)abrupt;
}

/*
 * Access control before the first byte (RFC 6750 3): no token is 401 with
 * a bare "Bearer" challenge; a token that fails any check is 401
 * invalid_token; a valid token missing a topic is 403 insufficient_scope.
 * The client learns nothing more (which check failed is logged at debug
 * level, without the token).  A token from the cookie with an Origin that
 * --cors-origins does not allow is 403 before it is looked at.  On success
 * *exp is the token's exp, kept for the stream's end, and *key_id its key's
 * (the stream ends if a reload removes it).  On refusal answers req and
 * returns false.
 */
static bool
streams_authorize(streams *ss, http_req *req, const streamreq *rq, uint64_t *exp, uint64_t *key_id)
{
	const char *why = "", *tok;
	const char *authorization = http_req_header(req, "Authorization"), *cookie = http_req_header(req, "Cookie");
	size_t len;
	enum st_auth_result r;

	/*
	 * A cookie is ambient: the browser sends it with a request any page
	 * makes, so a token that came in one counts only from an origin the
	 * edge allows (or with no Origin: not a cross-origin browser request).
	 * The answer carries no CORS header, so the page cannot read even the
	 * refusal; the stream never opens (issue 25).
	 */
	if (http_req_header(req, "Origin") != NULL && !http_req_cors_allowed(req) &&
	    st_auth_token_extract(authorization, cookie, st_auth_store_cookie_name(ss->cfg.auth), rq->access_token,
				  st_auth_store_query_token(ss->cfg.auth), &tok, &len) == ST_AUTH_SRC_COOKIE) {
		st_counter_inc(ss->m_auth[ST_AUTH_FORBIDDEN]);
		st_debug("stream refused (forbidden): a cookie token from an origin not in --cors-origins");
		http_reply_problem(req, 403, NULL, "Forbidden", "a cookie is not accepted from this origin", NULL);
		return false;
	}
	r = st_auth_store_check(ss->cfg.auth, authorization, cookie, rq->access_token, (const char *const *)rq->topics,
				rq->topic_lens, rq->n_topics, exp, key_id, &why);
	if (r == ST_AUTH_OK)
		return true;
	st_counter_inc(ss->m_auth[r]);
	st_debug("stream refused (%s): %s", st_auth_result_name(r), why);
	switch (r) {
	case ST_AUTH_MISSING:
		http_reply_problem(req, 401, NULL, "Unauthorized", "this stream needs a bearer token",
				   "WWW-Authenticate: Bearer\r\n");
		break;
	case ST_AUTH_FORBIDDEN:
		http_reply_problem(req, 403, NULL, "Forbidden", "the token does not allow every requested topic",
				   "WWW-Authenticate: Bearer error=\"insufficient_scope\"\r\n");
		break;
	default:
		http_reply_problem(req, 401, NULL, "Unauthorized", "the bearer token is not valid",
				   "WWW-Authenticate: Bearer error=\"invalid_token\"\r\n");
		break;
	}
	return false;
}

void
streams_handle(streams *ss, http_req *req, bool ready, bool draining)
{
	streamreq rq = { 0 };
	streamreq_problem why;
	bool is_head = strcmp(http_req_method(req), "HEAD") == 0; /* headers only, not counted */
	bool ip_held = false;
	uint8_t ip[16];
	uint64_t exp = 0, key_id = 0;

	if (streamreq_parse(http_req_query(req), http_req_header(req, "Accept"), http_req_header(req, "Last-Event-ID"),
			    ss->cfg.auth != NULL && st_auth_store_query_token(ss->cfg.auth), &rq, &why) != ST_OK) {
		http_reply_problem(req, why.status, NULL, why.title, why.detail, NULL);
		goto out;
	}
	/* Before the retryable refusals: retrying cannot fix a missing or bad token. */
	if (ss->cfg.auth && !streams_authorize(ss, req, &rq, &exp, &key_id))
		goto out;
	/*
	 * The retryable refusals come after the query is read: what the client
	 * gets depends on the format it asked for, and a request that retrying
	 * cannot fix (400, 406) says so even while the edge drains.
	 */
	if (ss->draining || draining) {
		refusal_send_jittered(&ss->refusals, req, rq.fmt, REFUSAL_DRAINING, "this edge is draining; reconnect");
		goto out;
	}
	/* The same readiness as /readyz: the database, a known head, a recent writer tick. */
	if (!ready || !ss->head_known) {
		refusal_send_jittered(&ss->refusals, req, rq.fmt, REFUSAL_NOT_READY, "this edge is not ready yet");
		goto out;
	}
	/*
	 * One client's share (--max-streams-per-ip).  An EventSource takes a
	 * 429 as final and never comes back, even after the client's other
	 * streams end; so SSE gets 200 + reconnect (overloaded) with a hint of
	 * 10..15 s, long enough that a client holding its streams does not
	 * loop, and NDJSON/JSON-seq a 429 with that Retry-After (refusal.h).
	 * The stream gives the slot back at its end.
	 */
	if (!is_head && iplimit_enabled(ss->cfg.ip_limit)) {
		uint8_t peer[16];
		/* + 1: the NULL that ends each walk is stored too. */
		const char *xff[ST_HTTP_HEAD_FIELDS_MAX + 1], *fwd[ST_HTTP_HEAD_FIELDS_MAX + 1];
		size_t n_xff = 0, n_fwd = 0, cx = 0, cf = 0;

		http_req_peer_ip(req, peer);
		/* Every line, in order: a proxy's own line follows whatever the client sent. */
		while ((xff[n_xff] = http_req_header_next(req, "X-Forwarded-For", &cx)) != NULL)
			n_xff++;
		while ((fwd[n_fwd] = http_req_header_next(req, "Forwarded", &cf)) != NULL)
			n_fwd++;
		iplimit_client(ss->cfg.ip_limit, peer, xff, n_xff, fwd, n_fwd, ip);
		if (!iplimit_acquire(ss->cfg.ip_limit, ip)) {
			char text[64];

			st_debug("stream refused: %s holds its maximum of streams",
				 iplimit_addr_str(ip, text, sizeof(text)));
			refusal_send_jittered(&ss->refusals, req, rq.fmt, REFUSAL_IP_LIMIT,
					      "too many streams from this address");
			goto out;
		}
		ip_held = true;
	}
	/*
	 * The shared gauge: the bound is the edge's, whichever loop took the
	 * connection.  A GET reserves its slot in one atomic step (check and
	 * add), so loops accepting at the same moment cannot both take the
	 * last one; registry_link takes the reserved slot over.  A HEAD opens no
	 * stream: it only looks.
	 */
	if (is_head ? ss->cfg.max_streams && st_gauge_get(ss->m_open) >= (int64_t)ss->cfg.max_streams
		    : !streams_slot_reserve(ss)) {
		refusal_send_jittered(&ss->refusals, req, rq.fmt, REFUSAL_OVERLOADED,
				      "this edge serves its maximum of streams");
		goto out;
	}
	if (is_head) {
		/*
		 * The headers a GET would get after the same checks (the resume
		 * check against the database is not run for a HEAD); no body, so
		 * no stream to keep and no outcome to count.
		 */
		static const http_stream_cbs none = { head_noop_writable, head_noop_close };

		(void)http_stream_start(req, 200, refusal_content_type(rq.fmt), NULL, &none, NULL);
		goto out;
	}
	stream_open(&ss->env, req, &rq, exp, key_id, ip_held ? ip : NULL);
	ip_held = false; /* the stream's now */
out:
	if (ip_held)
		iplimit_release(ss->cfg.ip_limit, ip);
	streamreq_fini(&rq);
}

/* ---- fan-out and heartbeats -------------------------------------------- */

/* Only bounded streams are visited, not the registry. */
static void
streams_visit_until(streams *ss)
{
	st_dlink *n, *next;

	for (n = st_dlist_first(&ss->untils); n != NULL; n = next) {
		next = st_dlist_after(&ss->untils, n);
		stream_head_moved(ST_CONTAINER_OF(n, stream_reg, ulink)->s);
	}
}

void
streams_publish(streams *ss, frame *const *frames, size_t n, uint64_t head)
{
	ss->head = head;
	ss->head_known = true;
	hub_publish(ss->env.hub, frames, n);
	streams_visit_until(ss);
}

void
streams_set_head(streams *ss, uint64_t head)
{
	if (head > ss->head || !ss->head_known) {
		ss->head = head;
		ss->head_known = true;
		streams_visit_until(ss);
	}
}

bool
streams_ready(const streams *ss)
{
	return ss->head_known;
}

/*
 * The heartbeat sweep visits every started stream twice per interval
 * (what each state does with a visit: stream_heartbeat; a stream silent
 * since the last visit gets a heartbeat, so an idle one gets one per
 * interval and none is silent for longer).  The sweep is sliced so one
 * callback stays bounded.
 */
static uint32_t
heartbeat_visit_ms(const streams *ss)
{
	return ss->cfg.heartbeat_ms / 2 > 0 ? ss->cfg.heartbeat_ms / 2 : 1;
}

static void
heartbeat_cb(evutil_socket_t fd, short what, void *arg)
{
	streams *ss = arg;
	uint64_t now = st_clock_now(ss->env.clock);
	size_t visited = 0;
	stream_reg *r;

	(void)fd;
	(void)what;
	if (!ss->hb_sweeping) {
		ss->hb_sweeping = true;
		ss->hb_cursor = registry_first(ss);
	}
	while ((r = ss->hb_cursor) != NULL && visited < STREAM_HEARTBEAT_SLICE) {
		ss->hb_cursor = registry_after(ss, r);
		visited++;
		stream_heartbeat(r->s, ss->heartbeat, now);
	}
	if (ss->hb_cursor != NULL) {
		struct timeval at_once = { 0, 0 };

		event_add(ss->ev_heartbeat, &at_once);
		return;
	}
	ss->hb_sweeping = false;
	{
		struct timeval tv = st_timeval_ms(heartbeat_visit_ms(ss));

		event_add(ss->ev_heartbeat, &tv);
	}
}

/* ---- drain ------------------------------------------------------------- */

static void
drain_done_cb(evutil_socket_t fd, short what, void *arg)
{
	streams *ss = arg;
	void (*done)(void *) = ss->drain_done;

	(void)fd;
	(void)what;
	ss->drain_done = NULL;
	if (done)
		done(ss->drain_arg);
}

static void
grace_cb(evutil_socket_t fd, short what, void *arg)
{
	streams *ss = arg;
	stream_reg *r, *next;

	(void)fd;
	(void)what;
	for (r = registry_first(ss); r; r = next) {
		next = registry_after(ss, r);
		stream_abort(r->s);
	}
}

void
streams_drain(streams *ss, void (*done)(void *arg), void *arg)
{
	struct timeval tv = st_timeval_ms(ss->cfg.drain_grace_ms);
	size_t n = ss->n_streams, i = 0;
	stream_reg *r, *next;

	if (ss->draining)
		return;
	ss->draining = true;
	ss->drain_done = done;
	ss->drain_arg = arg;
	/*
	 * ADR-WEB-ADV-001: ask clients to reconnect, with hints spread evenly
	 * over the grace period so they do not all come back at once.
	 */
	for (r = registry_first(ss); r; r = next) {
		uint32_t retry = n ? (uint32_t)(((uint64_t)ss->cfg.drain_grace_ms * (2 * i + 1)) / (2 * n)) : 0;

		next = registry_after(ss, r);
		i++;
		stream_reconnect(r->s, retry, "draining");
	}
	event_add(ss->ev_grace, &tv);
	streams_check_drained(ss);
}

void
streams_keys_changed(streams *ss)
{
	stream_reg *r, *next;
	size_t ended = 0;

	if (ss->cfg.auth == NULL)
		return;
	for (r = registry_first(ss); r; r = next) {
		next = registry_after(ss, r);
		ended += stream_key_check(r->s); /* may free r's stream, never another */
	}
	if (ended > 0)
		st_info("keys reloaded: %zu streams verified by a removed key told to reconnect (token_expired)",
			ended);
}

bool
streams_draining(const streams *ss)
{
	return ss->draining;
}

size_t
streams_count(const streams *ss)
{
	return ss->n_streams;
}

/* ---- metrics, life ----------------------------------------------------- */

/* One counter per label value, values[from..n): one family, its help on the first. */
static void
counter_family(st_metrics *m, const char *name, const char *key, const char *const *values, int from, int n,
	       const char *help, st_counter **out)
{
	char labels[64];

	for (int i = from; i < n; i++) {
		snprintf(labels, sizeof(labels), "%s=\"%s\"", key, values[i]);
		out[i] = st_metrics_counter(m, name, labels, i == from ? help : NULL);
	}
}

streams_metrics *
streams_metrics_new(st_metrics *m)
{
	streams_metrics *sm = st_xcalloc(1, sizeof(*sm));
	const char *auth_names[ST_AUTH_RESULT_COUNT];
	const char *refusal_names[REFUSAL_RETRY_COUNT];

	sm->dropped.coalesced = st_metrics_counter(m, "studio_sse_dropped_total", "reason=\"coalesced\"",
						   "Frames dropped from stream queues, by reason (ADR-0197).");
	sm->dropped.overflow = st_metrics_counter(m, "studio_sse_dropped_total", "reason=\"overflow\"", NULL);
	sm->dropped.replay = st_metrics_counter(m, "studio_sse_dropped_total", "reason=\"replay\"", NULL);
	sm->dropped.blocked = st_metrics_counter(m, "studio_sse_dropped_total", "reason=\"blocked\"", NULL);
	sm->dropped.cut_slow = st_metrics_counter(m, "studio_sse_cut_total", "reason=\"slow_consumer\"",
						  "Streams cut by ADR-0197 (reconnect queued), by reason.");
	sm->dropped.cut_blocked = st_metrics_counter(m, "studio_sse_cut_total", "reason=\"blocked\"", NULL);
	sm->open = st_metrics_gauge(m, "studio_streams_open", NULL, "Streams open now.");
	counter_family(m, "studio_stream_outcomes_total", "outcome", outcome_names, 0, OUT_COUNT,
		       "Streams ended, by outcome (ADR-WEB-ADV-001).", sm->outcome);
	counter_family(m, "studio_replay_total", "result", replay_result_names, 0, RR_COUNT,
		       "Resume requests, by result.", sm->replay);
	sm->frames =
		st_metrics_counter(m, "studio_frames_delivered_total", NULL, "Frames handed to client connections.");
	sm->refused = st_metrics_counter(m, "studio_ids_refused_total", NULL,
					 "Frames refused because their id would repeat or regress.");
	sm->seam_overlap = st_metrics_counter(m, "studio_seam_overlap_total", NULL,
					      "Live frames dropped at the resume seam because the replay sent them.");
	sm->seam_gap = st_metrics_counter(m, "studio_seam_gaps_total", NULL,
					  "Resume seams that would have left a hole (answered with resync gap).");
	for (int i = 0; i < REFUSAL_RETRY_COUNT; i++)
		refusal_names[i] = refusal_name((enum refusal)i);
	counter_family(m, "studio_stream_refusals_total", "reason", refusal_names, 0, REFUSAL_RETRY_COUNT,
		       "Stream requests refused with a retry hint, by reason.", sm->refusal);
	sm->replay_rows = st_metrics_counter(m, "studio_replay_rows_total", NULL,
					     "Rows replays received from the database (each row once).");
	for (int i = 0; i < ST_AUTH_RESULT_COUNT; i++)
		auth_names[i] = st_auth_result_name((enum st_auth_result)i);
	counter_family(m, "studio_auth_refused_total", "reason", auth_names, ST_AUTH_MISSING, ST_AUTH_RESULT_COUNT,
		       "Stream requests refused by access control, by reason.", sm->auth);
	sm->ip_refused = st_metrics_counter(m, "studio_ip_limit_refused_total", NULL,
					    "Stream requests refused by --max-streams-per-ip "
					    "(SSE: reconnect overloaded; NDJSON, JSON-seq: 429).");
	/* The per-address refusal is answered like the others (refusal.h), counted in its own family. */
	sm->refusal[REFUSAL_IP_LIMIT] = sm->ip_refused;
	return sm;
}

void
streams_metrics_free(streams_metrics *sm)
{
	free(sm); /* the handles belong to the registry */
}

size_t
streams_metrics_open(const streams_metrics *sm)
{
	int64_t v = st_gauge_get(sm->open);

	return v > 0 ? (size_t)v : 0;
}

streams *
streams_new(struct event_base *base, pgpool *pool, const streams_metrics *sm, const st_clock *clock,
	    const streams_config *cfg)
{
	streams *ss = st_xcalloc(1, sizeof(*ss));
	stream_env *env = &ss->env;
	struct timeval tv;

	ss->cfg = *cfg;
	if (ss->cfg.heartbeat_ms == 0)
		ss->cfg.heartbeat_ms = 15000;
	env->registry = (stream_registry){ ss, registry_head, registry_link, registry_unlink, registry_behind_check };
	env->base = base;
	env->pool = pool;
	env->clock = clock;
	env->hub = hub_new(stream_hub_deliver, stream_hub_flush, stream_hub_take);
	env->streams = st_slab_new(stream_size());
	env->queues = st_slab_new(subq_size());
	env->replay_cap = ss->cfg.replay_cap;
	env->auth = ss->cfg.auth;
	env->ip_limit = ss->cfg.ip_limit;
	env->dropped = sm->dropped;
	for (int i = 0; i < OUT_COUNT; i++)
		env->m_outcome[i] = sm->outcome[i];
	for (int i = 0; i < RR_COUNT; i++)
		env->m_replay[i] = sm->replay[i];
	env->m_frames = sm->frames;
	env->m_refused = sm->refused;
	env->m_seam_overlap = sm->seam_overlap;
	env->m_seam_gap = sm->seam_gap;
	env->m_replay_rows = sm->replay_rows;
	ss->heartbeat = frame_heartbeat_new();
	ss->m_open = sm->open;
	for (int i = 0; i < ST_AUTH_RESULT_COUNT; i++)
		ss->m_auth[i] = sm->auth[i];
	st_dlist_init(&ss->all);
	st_dlist_init(&ss->behind);
	st_dlist_init(&ss->untils);
	/* Jitter only spreads retries; any seed that differs between registries will do. */
	refusal_init(&ss->refusals, (st_clock_now(clock) << 20) ^ (uint64_t)(uintptr_t)ss ^ 0x9e3779b97f4a7c15u,
		     sm->refusal);
	env->refusals = &ss->refusals;
	env->runs = frame_run_cache_new();
	ss->ev_heartbeat = event_new(base, -1, 0, heartbeat_cb, ss);
	ss->ev_grace = event_new(base, -1, 0, grace_cb, ss);
	ss->ev_drain_done = event_new(base, -1, 0, drain_done_cb, ss);
	ST_ASSERT(ss->ev_heartbeat && ss->ev_grace && ss->ev_drain_done);
	tv = st_timeval_ms(heartbeat_visit_ms(ss));
	event_add(ss->ev_heartbeat, &tv);
	return ss;
}

void
streams_free(streams *ss)
{
	stream_reg *r, *next;

	if (ss == NULL)
		return;
	ss->drain_done = NULL; /* going away: no drain is told any more */
	for (r = registry_first(ss); r; r = next) {
		next = registry_after(ss, r);
		stream_shutdown(r->s);
	}
	hub_free(ss->env.hub);
	st_slab_free(ss->env.streams); /* every stream and its queue ended above */
	st_slab_free(ss->env.queues);
	frame_run_cache_free(ss->env.runs); /* copies still queued on a connection keep their own reference */
	frame_unref(ss->heartbeat);
	event_free(ss->ev_heartbeat);
	event_free(ss->ev_grace);
	event_free(ss->ev_drain_done);
	free(ss);
}
