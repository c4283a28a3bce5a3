/*
 * ingest: the writer's rep0 socket (--ingest), in nng's raw mode, so that
 * every request's header (its REQ request id) is seen: that id is what
 * makes a resend recognisable (reqcache.h).  docs/writer.md "Ingest, buffer
 * bounds, refusals", "Request slots, resends" and "Memory bound".
 *
 * INGEST_RECEIVERS receive aios take requests off the socket.  On that nng
 * thread each request is, in this order:
 *   1. checked for size: a body above PROTO_MAX_REQUEST (and up to the
 *      ceiling, above which nng closes the connection) is `invalid`;
 *   2. looked up (reqcache): a resend of a pending request only re-routes
 *      the coming reply (to the connection it came on) and is dropped; a
 *      resend of an answered one gets the stored reply again;
 *   3. refused `unavailable` while the loop refuses everything anyway;
 *   3a. with --ingest-keys (ingest_new's auth): the request map's token,
 *      peeked without decoding the events, is verified HERE, on the nng
 *      thread (the key set is reference counted and swapped whole on
 *      reload, so the loop never waits for crypto): `unauthorized` when
 *      absent or not valid, before any memory is charged;
 *   4. charged against the in-flight byte budget BEFORE decoding
 *      (proto_request_bytes_max of its length, atomically): `busy` past it,
 *      and `busy` when every work slot is taken;
 *   5. decoded: `invalid` answered at once; with keys, an event whose
 *      topic the token's `publish` claim does not cover makes the whole
 *      request `forbidden` (nothing of it stored); else the charge shrinks to
 *      proto_request_bytes and the request goes to the loop through ONE
 *      st_mailbox, in a work slot that owns it until the loop answers.
 * The charge is released when the reply has been handed to nng.  Receivers
 * never wait for the loop, so a producer always hears back, even while the
 * database is down.  Connections are capped at INGEST_MAX_PIPES, and at
 * INGEST_MAX_PIPES_PER_ADDR from one address, and closed when they
 * complete no request within INGEST_IDLE_MS (pipe notification and a
 * sweep; nothing read from the refused ones; conntab.h), or that are not
 * pipes yet (SP header, TLS handshake) INGEST_IDLE_MS after the sweep
 * first sees them (prepipe.h).
 *
 * On the loop thread: fn gets every valid request; the loop answers each
 * exactly once with ingest_reply_ok or ingest_reply_err (any thread may
 * send; sending never blocks).
 */
#ifndef BW_INGEST_H
#define BW_INGEST_H

#include <stddef.h>
#include <stdint.h>

#include "st_err.h"
#include "st_metrics.h"
#include "wire.h"

/* Receive aios: how many requests are checked and decoded at once. */
#define INGEST_RECEIVERS 8u
/* Bodies above PROTO_MAX_REQUEST up to this get `invalid`; above it the
 * connection is closed (nng cannot answer what it did not read). */
#define INGEST_CEILING (PROTO_MAX_REQUEST + 1024u * 1024)
/* nng counts the REQ backtrace in the frame it checks against
 * NNG_OPT_RECVMAXSZ: 4 bytes (the request id) from a producer's own REQ
 * socket, 4 more per device hop (NNG_OPT_MAXTTL: 8 hops at most). */
#define INGEST_BACKTRACE_MAX 32u
#define INGEST_RECV_LIMIT (INGEST_CEILING + 4u)
/* Bytes reserved by the requests between their receipt and their reply. */
#define INGEST_BUDGET (256u * 1024 * 1024)
/*
 * Producer connections, in all and from one address (IPv6: one /64): a new
 * one past either cap displaces the oldest that has completed no request
 * yet and is INGEST_DISPLACE_MS old, or is closed as it arrives when there
 * is none (conntab.h).
 */
#define INGEST_MAX_PIPES 256u
#define INGEST_MAX_PIPES_PER_ADDR 64u
/* A connection that completes no request within this is closed (the contract's 10 s). */
#define INGEST_IDLE_MS 10000u
/* A connection younger than this is not displaced (its request may be on its way). */
#define INGEST_DISPLACE_MS 1000u
/* Answered requests kept for late resends: count, bytes, age. */
#define INGEST_CACHE_ENTRIES 65536u
#define INGEST_CACHE_BYTES (16u * 1024 * 1024)
#define INGEST_CACHE_TTL_MS 120000u
/* Per request beyond proto_request_bytes: the nng message and its header. */
#define INGEST_MSG_OVERHEAD 256u

struct event_base;
struct st_auth_store;
struct st_auth_grant;
typedef struct ingest ingest;

/*
 * Who answers an accepted request on the loop: an nng work slot (here) or
 * an HTTP request (ingest_http.h).  The loop batches requests by this
 * pointer and answers each exactly once with ingest_reply_ok or
 * ingest_reply_err, whichever ingest it came from.  Hands off the layout
 * but for the two functions' owners.
 */
typedef struct ingest_origin ingest_origin;
struct ingest_origin {
	void (*ok)(ingest_origin *o, const uint64_t *seqs, size_t n);
	void (*err)(ingest_origin *o, const char *code, const char *detail);
};

/* Loop thread: a valid request arrived.  The origin (and req) stay valid until answered. */
typedef void (*ingest_request_fn)(ingest_origin *o, const proto_request *req, void *arg);

/*
 * Producer credentials (docs/security.md): every request must carry a token
 * of store's keys covering each event's topic.  store is borrowed (freed
 * after ingest_free); the counters may be NULL.
 */
typedef struct ingest_auth {
	struct st_auth_store *store;
	st_counter *unauthorized, *forbidden;
} ingest_auth;

/*
 * Listens on url with n_works work slots (>= 1: requests accepted and not yet
 * answered).  invalid is incremented (from nng threads) for every request
 * refused as invalid.  auth: NULL, or producer credentials checked on
 * every request from the first one on.  Loop thread, at start.  ST_EINVAL for a bad URL,
 * ST_ESYS when it cannot listen (logged).
 */
st_err ingest_new(struct event_base *base, const char *url, size_t n_works, st_counter *invalid,
		  const ingest_auth *auth, ingest_request_fn fn, void *arg, ingest **out);

/*
 * Loop thread.  Stops the nng callbacks (nng_aio_stop, so none re-arms),
 * closes the socket and frees everything; requests never answered are dropped
 * (their producers see a closed pipe and resend).  NULL-safe.
 */
void ingest_free(ingest *in);

/*
 * The loop refuses everything ("unavailable" with that detail: shutting
 * down, draining, the database gone): the receivers answer so themselves.
 * detail must be a static string; NULL accepts again.  Any thread.
 */
void ingest_set_refusal(ingest *in, const char *detail);
/* Counters for the refusals the receivers answer themselves (either may be NULL). Loop thread, at start. */
void ingest_set_counters(ingest *in, st_counter *busy, st_counter *unavailable);

/*
 * Where the connection rules are counted (each may be NULL): refusals at the
 * global and the per-address cap, closes for idling, for displacement and
 * for not finishing the SP/TLS handshake in time (prepipe.h), and the gauge
 * of open connections (pipes).  Loop thread, at start.
 */
void ingest_set_conn_metrics(ingest *in, st_counter *refused_global, st_counter *refused_addr, st_counter *closed_idle,
			     st_counter *displaced, st_counter *closed_handshake, st_gauge *open_conns);

/* Bytes charged to the budget now (any thread; for stats and tests). */
size_t ingest_inflight_bytes(const ingest *in);
/*
 * The in-flight byte budget, shared with the HTTP ingest: true when n bytes
 * were charged (never past INGEST_BUDGET), false (nothing charged) when
 * they do not fit: the request is `busy`.  Any thread.
 */
bool ingest_budget_charge(ingest *in, size_t n);
void ingest_budget_release(ingest *in, size_t n);
/* The loop's current "unavailable" detail (ingest_set_refusal), or NULL. Any thread. */
const char *ingest_refusal(const ingest *in);

/*
 * The index of the first event of req whose topic the producer grant does
 * not cover, or proto_request_count(req) when it covers them all; and the
 * `forbidden` detail for index i into detail.  Pure.
 */
size_t ingest_grant_uncovered(const struct st_auth_grant *g, const proto_request *req);
void ingest_forbidden_detail(const proto_request *req, size_t i, char *detail, size_t cap);

/* Answers o: {"ok":true,"seqs":[...]}.  For the nng ingest: frees the request; the slot goes back. */
static inline void
ingest_reply_ok(ingest_origin *o, const uint64_t *seqs, size_t n)
{
	o->ok(o, seqs, n);
}
/* Answers o: {"ok":false,"error":code,"detail":detail} (over HTTP: the matching problem). */
static inline void
ingest_reply_err(ingest_origin *o, const char *code, const char *detail)
{
	o->err(o, code, detail);
}

#endif
