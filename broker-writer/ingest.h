/*
 * ingest: the writer's rep0 socket (--ingest), served by a fixed set of nng
 * contexts, each an aio state machine RECV -> (VALIDATE) -> WAIT -> SEND.
 *
 * On the nng thread: the request is received (NNG_OPT_RECVMAXSZ =
 * PROTO_MAX_REQUEST) and decoded with proto_request_decode.  An invalid one
 * is answered at once from there ({"ok":false,"error":"invalid",...},
 * counted in the given counter); a valid one is handed to the loop through
 * ONE st_mailbox, and the context waits (WAIT) until the loop answers it.
 * A context therefore holds at most one request; n_ctx bounds how many
 * requests are between the socket and their reply.  A REQ resend of a
 * request still waiting (same pipe, same request id) is dropped: the
 * original's reply answers it.
 *
 * On the loop thread: fn gets every valid request; the loop answers each
 * exactly once with ingest_reply_ok or ingest_reply_err (nng_ctx_send may be
 * called from any thread and never blocks).
 */
#ifndef BW_INGEST_H
#define BW_INGEST_H

#include <stddef.h>
#include <stdint.h>

#include "st_err.h"
#include "st_metrics.h"
#include "wire.h"

struct event_base;
typedef struct ingest ingest;
typedef struct ingest_work ingest_work;

/* Loop thread: a valid request arrived.  The work (and req) stay valid until answered. */
typedef void (*ingest_request_fn)(ingest_work *w, const proto_request *req, void *arg);

/*
 * Listens on url with n_ctx contexts (>= 1).  invalid is incremented (from
 * nng threads) for every request refused as invalid.  Loop thread, at start.
 * ST_EINVAL for a bad URL, ST_ESYS when it cannot listen (logged).
 */
st_err ingest_new(struct event_base *base, const char *url, size_t n_ctx, st_counter *invalid,
                  ingest_request_fn fn, void *arg, ingest **out);

/*
 * Loop thread.  Closes the socket, waits for the nng callbacks to finish
 * (nng_aio_stop) and frees everything; requests never answered are dropped
 * (their producers see a closed pipe and resend).  NULL-safe.
 */
void ingest_free(ingest *in);

/*
 * Contexts answer on the nng thread, without the loop, when every context
 * but INGEST_RESERVE waits for a commit ("busy"), or when the loop set a
 * refusal ("unavailable" with that detail: shutting down, draining, the
 * database gone).  So a producer always hears back.  detail must be a
 * static string; NULL accepts again.  Any thread.
 */
#define INGEST_RESERVE 16u
void ingest_set_refusal(ingest *in, const char *detail);
/* Counters for the refusals the contexts answer themselves (either may be NULL). Loop thread, at start. */
void ingest_set_counters(ingest *in, st_counter *busy, st_counter *unavailable);

/* Answers w: {"ok":true,"seqs":[...]}.  Frees w's request; w goes back to RECV. */
void ingest_reply_ok(ingest_work *w, const uint64_t *seqs, size_t n);
/* Answers w: {"ok":false,"error":code,"detail":detail}. */
void ingest_reply_err(ingest_work *w, const char *code, const char *detail);

#endif
