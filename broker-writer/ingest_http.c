/*
 * ingest_http: one st_http server whose handler turns a POST into the
 * proto_request the nng ingest would have decoded, and an ingest_origin
 * that answers it over HTTP.
 *
 * A request (struct hreq) lives from its head to its answer: HEAD checks
 * (no allocation but the hreq), BODY (st_http reads it, at most
 * PROTO_MAX_REQUEST bytes, under the server's deadline), then PARSE, then
 * QUEUED (the loop's batch holds its origin) until ok/err answers it.  The
 * client may leave at any point: its http_req is then gone (close
 * callback); a queued hreq stays until the loop answers it, and the answer
 * is dropped.
 *
 * Memory: the worst case of the whole path (the body, the DOM, the nng
 * encoding and its decode) is charged to the nng ingest's budget before
 * the body is read, and shrinks to what the decoded request holds.
 *
 * Why re-encode: proto_request_decode is where every rule of an event
 * lives (bounds, topic charset, UTF-8, data compaction and strictness); an
 * HTTP body translated into its msgpack form gets exactly those checks and
 * words, and the loop gets the one request type it knows.
 */
#include "ingest_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "st_auth_store.h"
#include "st_buf.h"
#include "st_dlist.h"
#include "st_http.h"
#include "st_json.h"
#include "st_log.h"
#include "st_util.h"
#include "wire.h"

/* Nodes of a largest valid envelope: the array, then per event its object, 4 members, 64 about entries. */
#define MAX_NODES (1u + PROTO_MAX_BATCH * (5u + PROTO_MAX_ABOUT))
#define RETRY_BUSY "Retry-After: 1\r\n"
#define RETRY_UNAVAILABLE "Retry-After: 5\r\n"

struct ingest_http {
	ingest_http_config cfg;
	http_server *srv;
	st_dlink reqs; /* every hreq not yet freed */
};

typedef struct hreq {
	ingest_origin origin; /* first: what the loop batches */
	ingest_http *h;
	st_dlink link;
	http_req *r;          /* NULL once the client is gone */
	st_auth_grant *grant; /* --ingest-keys: the token's grant; owned */
	size_t charge;
	bool queued;                 /* the loop holds it: freed by its answer */
	char key[PROTO_MAX_KEY + 1]; /* the Idempotency-Key header, "" when none */
	st_buf mp;                   /* the request in its nng encoding; req points into it */
	proto_request *req;
} hreq;

static void
count(st_counter *c)
{
	if (c != NULL)
		st_counter_inc(c);
}

static void
hreq_free(hreq *q)
{
	st_dlink_unlink(&q->link);
	if (q->charge)
		ingest_budget_release(q->h->cfg.in, q->charge);
	st_auth_grant_free(q->grant);
	proto_request_free(q->req);
	st_buf_fini(&q->mp);
	free(q);
}

/* Answers and frees q (the answer is dropped when the client left). */
static void
answer_problem(hreq *q, int status, const char *detail, const char *extra)
{
	if (q->r != NULL)
		http_reply_problem(q->r, status, NULL, NULL, detail, extra);
	q->r = NULL;
	hreq_free(q);
}

static void
on_gone(void *arg)
{
	hreq *q = arg;

	q->r = NULL;
	if (!q->queued)
		hreq_free(q);
}

/* ---------------------------------------------------------------- answers */

static void
origin_ok(ingest_origin *o, const uint64_t *seqs, size_t n)
{
	hreq *q = (hreq *)o;
	st_buf b;

	if (q->r != NULL) {
		st_buf_init(&b);
		st_buf_puts(&b, "{\"seqs\":[");
		for (size_t i = 0; i < n; i++)
			st_buf_printf(&b, "%s%llu", i ? "," : "", (unsigned long long)seqs[i]);
		st_buf_puts(&b, "]}");
		http_reply(q->r, 200, "application/json", b.p, b.len, NULL);
		st_buf_fini(&b);
		q->r = NULL;
	}
	hreq_free(q);
}

static void
origin_err(ingest_origin *o, const char *code, const char *detail)
{
	hreq *q = (hreq *)o;

	if (strcmp(code, "busy") == 0)
		answer_problem(q, 429, detail, RETRY_BUSY);
	else if (strcmp(code, "unavailable") == 0)
		answer_problem(q, 503, detail, RETRY_UNAVAILABLE);
	else if (strcmp(code, "forbidden") == 0)
		answer_problem(q, 403, detail, NULL);
	else if (strcmp(code, "unauthorized") == 0)
		answer_problem(q, 401, detail, "WWW-Authenticate: Bearer\r\n");
	else
		answer_problem(q, 400, detail, NULL);
}

/* ---------------------------------------------------------------- body */

/* A string member into s; false (detail set) when it is not a string. */
static bool
member_str(const st_json *j, int node, size_t ev, const char *name, proto_str *s, char *detail, size_t cap)
{
	size_t len = 0;
	const char *p = st_json_str(j, node, &len);

	if (p == NULL) {
		snprintf(detail, cap, "event %zu: %s: not a string", ev, name);
		return false;
	}
	*s = (proto_str){ p, len };
	return true;
}

/*
 * The events of the envelope j into ev[0..n) (about entries in pool):
 * member names and JSON types only; every other rule is the decoder's.
 */
static bool
events_read(const st_json *j, proto_event *ev, size_t n, proto_str *pool, char *detail, size_t cap)
{
	bool batch = st_json_type(j, 0) == ST_JSON_ARRAY;

	for (size_t i = 0; i < n; i++) {
		int o = batch ? st_json_at(j, 0, i) : 0;
		bool seen[4] = { false, false, false, false };
		static const char *const names[4] = { "topic", "about", "data", "key" };

		if (st_json_type(j, o) != ST_JSON_OBJECT) {
			snprintf(detail, cap, "event %zu: not an object", i);
			return false;
		}
		memset(&ev[i], 0, sizeof(ev[i]));
		for (size_t m = 0; m < st_json_count(j, o); m++) {
			const char *name = st_json_key_at(j, o, m);
			int v = st_json_at(j, o, m);
			size_t k;

			for (k = 0; k < 4 && strcmp(name, names[k]) != 0; k++)
				;
			if (k == 4) {
				snprintf(detail, cap, "event %zu: unknown member \"%.40s\"", i, name);
				return false;
			}
			if (seen[k]) {
				snprintf(detail, cap, "event %zu: member \"%s\" given twice", i, name);
				return false;
			}
			seen[k] = true;
			if (k == 0 && !member_str(j, v, i, "topic", &ev[i].topic, detail, cap))
				return false;
			if (k == 3 && st_json_type(j, v) != ST_JSON_NULL) {
				if (!member_str(j, v, i, "key", &ev[i].key, detail, cap))
					return false;
				ev[i].has_key = true;
			}
			if (k == 2 && st_json_type(j, v) != ST_JSON_NULL) {
				const char *p;
				size_t len;

				st_json_raw(j, v, &p, &len);
				ev[i].data = (proto_str){ p, len };
				ev[i].has_data = true;
			}
			if (k == 1 && st_json_type(j, v) != ST_JSON_NULL) {
				size_t na = st_json_count(j, v);

				if (st_json_type(j, v) != ST_JSON_ARRAY) {
					snprintf(detail, cap, "event %zu: about: not an array", i);
					return false;
				}
				if (na > PROTO_MAX_ABOUT) {
					snprintf(detail, cap, "event %zu: about: more than %u entries", i,
						 PROTO_MAX_ABOUT);
					return false;
				}
				for (size_t a = 0; a < na; a++)
					if (!member_str(j, st_json_at(j, v, a), i, "about entry", &pool[a], detail,
							cap))
						return false;
				ev[i].about = pool;
				ev[i].n_about = (uint32_t)na;
				pool += na;
			}
		}
		if (!seen[0]) {
			snprintf(detail, cap, "event %zu: topic: missing", i);
			return false;
		}
	}
	return true;
}

/*
 * body[0..len) (valid JSON) into q->mp, the nng encoding of the same
 * request; false with detail when the envelope is not one.
 */
static bool
envelope_encode(hreq *q, const st_json *j, char *detail, size_t cap)
{
	enum st_json_type t = st_json_type(j, 0);
	size_t n = t == ST_JSON_ARRAY ? st_json_count(j, 0) : 1, n_about = 0;
	proto_event *ev;
	proto_str *pool;
	bool ok = false;

	if (t != ST_JSON_ARRAY && t != ST_JSON_OBJECT) {
		snprintf(detail, cap, "the body is neither an event object nor an array of them");
		return false;
	}
	if (n < 1 || n > PROTO_MAX_BATCH) {
		snprintf(detail, cap, "batch of %zu events (1..%u)", n, PROTO_MAX_BATCH);
		return false;
	}
	if (q->key[0] != '\0' && t != ST_JSON_OBJECT) {
		snprintf(detail, cap, "Idempotency-Key is the key of a single event; the body is an array");
		return false;
	}
	/* the node bound makes this at most MAX_NODES */
	for (size_t i = 0; i < n; i++) {
		int o = t == ST_JSON_ARRAY ? st_json_at(j, 0, i) : 0;
		n_about += st_json_count(j, st_json_get(j, o, "about"));
	}
	ev = st_xcalloc(n, sizeof(*ev));
	pool = st_xcalloc(n_about ? n_about : 1, sizeof(*pool));
	if (!events_read(j, ev, n, pool, detail, cap))
		goto done;
	if (q->key[0] != '\0') {
		size_t kl = strlen(q->key);

		if (ev[0].has_key && (ev[0].key.len != kl || memcmp(ev[0].key.p, q->key, kl) != 0)) {
			snprintf(detail, cap, "Idempotency-Key and the event's key differ");
			goto done;
		}
		ev[0].key = (proto_str){ q->key, kl };
		ev[0].has_key = true;
	}
	proto_request_encode(&q->mp, ev, n, true);
	ok = true;
done:
	free(pool);
	free(ev);
	return ok;
}

static void
on_body(http_req *r, char *body, size_t len, void *arg)
{
	hreq *q = arg;
	ingest_http *h = q->h;
	st_json *j = NULL;
	char detail[256];
	size_t bad;

	(void)r;
	detail[0] = '\0';
	if (st_json_parse_opaque(body, len, ST_MIN(MAX_NODES, len / 2 + 2), "data", &j) != ST_OK) {
		snprintf(detail, sizeof(detail), "the body is not valid JSON (RFC 8259, UTF-8) or has too many values");
	} else if (envelope_encode(q, j, detail, sizeof(detail))) {
		detail[0] = '\0';
		if (proto_request_decode(q->mp.p, q->mp.len, &q->req, detail, sizeof(detail)) != ST_OK && !detail[0])
			snprintf(detail, sizeof(detail), "malformed request");
	}
	st_json_free(j);
	free(body);
	if (q->req == NULL) {
		count(h->cfg.invalid);
		answer_problem(q, 400, detail, NULL);
		return;
	}
	if (q->grant != NULL && (bad = ingest_grant_uncovered(q->grant, q->req)) < proto_request_count(q->req)) {
		ingest_forbidden_detail(q->req, bad, detail, sizeof(detail));
		count(h->cfg.forbidden);
		answer_problem(q, 403, detail, NULL);
		return;
	}
	/* what the decoded request really holds; never more than reserved */
	{
		size_t held = proto_request_bytes(q->req) + q->mp.cap + sizeof(*q);

		if (held < q->charge) {
			ingest_budget_release(h->cfg.in, q->charge - held);
			q->charge = held;
		}
	}
	q->queued = true;
	h->cfg.fn(&q->origin, q->req, h->cfg.arg);
}

/* ---------------------------------------------------------------- head */

static bool
json_type(const char *ct)
{
	static const char want[] = "application/json";
	size_t n = sizeof(want) - 1;

	if (ct == NULL || strncasecmp(ct, want, n) != 0)
		return false;
	return ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ' || ct[n] == '\t';
}

/* --ingest-keys: the Bearer token; NULL when it passes (grant in q), else the 401 detail. */
static const char *
auth_check(hreq *q, http_req *r, char *detail, size_t cap)
{
	const char *a = http_req_header(r, "Authorization"), *why = "no token";
	enum st_auth_result res;

	if (a == NULL || strncasecmp(a, "Bearer ", 7) != 0)
		return "a producer token is required: Authorization: Bearer JWT";
	a += 7;
	while (*a == ' ')
		a++;
	res = st_auth_store_verify(q->h->cfg.auth, a, strlen(a), &q->grant, &why);
	if (res == ST_AUTH_OK)
		return NULL;
	snprintf(detail, cap, "token %s: %s", st_auth_result_name(res), why);
	return detail;
}

static void
on_request(http_req *r, void *arg)
{
	ingest_http *h = arg;
	hreq *q;
	const char *why, *key;
	char detail[256];
	uint64_t len;
	size_t need;

	if (strcmp(http_req_path(r), "/v1/events") != 0) {
		http_reply_problem(r, 404, NULL, NULL, "no such endpoint (POST /v1/events)", NULL);
		return;
	}
	if (strcmp(http_req_method(r), "POST") != 0) {
		http_reply_problem(r, 405, NULL, NULL, "POST /v1/events", "Allow: POST\r\n");
		return;
	}
	if ((why = ingest_refusal(h->cfg.in)) != NULL) {
		count(h->cfg.unavailable);
		http_reply_problem(r, 503, NULL, NULL, why, RETRY_UNAVAILABLE);
		return;
	}
	if (!json_type(http_req_header(r, "Content-Type"))) {
		count(h->cfg.invalid);
		http_reply_problem(r, 415, NULL, NULL, "Content-Type must be application/json", NULL);
		return;
	}
	q = st_xcalloc(1, sizeof(*q));
	q->origin.ok = origin_ok;
	q->origin.err = origin_err;
	q->h = h;
	q->r = r;
	st_buf_init(&q->mp);
	st_dlist_push_back(&h->reqs, &q->link);
	if (h->cfg.auth != NULL && (why = auth_check(q, r, detail, sizeof(detail))) != NULL) {
		count(h->cfg.unauthorized);
		answer_problem(q, 401, why, "WWW-Authenticate: Bearer\r\n");
		return;
	}
	if ((key = http_req_header(r, "Idempotency-Key")) != NULL) {
		if (strlen(key) < 1 || strlen(key) > PROTO_MAX_KEY) {
			count(h->cfg.invalid);
			answer_problem(q, 400, "Idempotency-Key: 1..200 bytes", NULL);
			return;
		}
		memcpy(q->key, key, strlen(key) + 1);
	}
	len = http_req_body_length(r);
	if (len == 0) {
		count(h->cfg.invalid);
		answer_problem(q, 400, "empty body: one event object or an array of them", NULL);
		return;
	}
	if (len > PROTO_MAX_REQUEST) {
		count(h->cfg.invalid);
		snprintf(detail, sizeof(detail), "request too large (%llu bytes, max %u)", (unsigned long long)len,
			 PROTO_MAX_REQUEST);
		answer_problem(q, 413, detail, NULL);
		return;
	}
	/* the body, its DOM, the nng encoding (never longer than the body plus a few bytes an event) and its decode */
	need = (size_t)len + st_json_parse_cost((size_t)len, ST_MIN(MAX_NODES, (size_t)len / 2 + 2)) +
	       proto_request_bytes_max((size_t)len + 16u * PROTO_MAX_BATCH) + sizeof(*q);
	if (!ingest_budget_charge(h->cfg.in, need)) {
		count(h->cfg.busy);
		answer_problem(q, 429, "the writer's in-flight memory is full; retry later", RETRY_BUSY);
		return;
	}
	q->charge = need;
	http_req_set_close_cb(r, on_gone, q);
	http_req_read_body(r, on_body, q);
}

/* ---------------------------------------------------------------- life */

st_err
ingest_http_new(struct event_base *base, const char *addr, const ingest_http_config *cfg, ingest_http **out)
{
	ingest_http *h = st_xcalloc(1, sizeof(*h));
	http_server_config sc = { .max_conns = INGEST_HTTP_MAX_CONNS, .max_body_bytes = PROTO_MAX_REQUEST };
	st_err rv;

	h->cfg = *cfg;
	st_dlist_init(&h->reqs);
	if ((rv = http_server_new(base, addr, &sc, on_request, h, &h->srv)) != ST_OK) {
		free(h);
		return rv;
	}
	*out = h;
	return ST_OK;
}

void
ingest_http_free(ingest_http *h)
{
	st_dlink *n;

	if (h == NULL)
		return;
	http_server_free(h->srv); /* gone callbacks free the requests not queued */
	while ((n = st_dlist_first(&h->reqs)) != NULL) {
		hreq *q = ST_CONTAINER_OF(n, hreq, link);
		q->r = NULL;
		hreq_free(q);
	}
	free(h);
}
