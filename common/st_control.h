/*
 * st_control: the ops socket of both programs - nng rep0, one JSON object
 * per request, one JSON object per reply, served on the event loop.
 *
 * The rep0 socket is used without contexts: its NNG_OPT_RECVFD is watched by
 * libevent, requests are read with NNG_FLAG_NONBLOCK and answered at once
 * (handlers are synchronous and bounded), so no nng thread ever touches the
 * loop.  Requests are capped at 64 KiB (NNG_OPT_RECVMAXSZ).
 *
 * Protocol (documented in docs/control.md):
 *   request  {"cmd":"NAME", ...}
 *   reply    {"ok":true, ...handler members...}
 *            {"ok":false,"error":"invalid|unknown_command","detail":"..."}
 */
#ifndef ST_CONTROL_H
#define ST_CONTROL_H

#include "st_buf.h"
#include "st_err.h"
#include "st_json.h"

struct event_base;
typedef struct st_control st_control;

/*
 * Called on the loop thread for each well-formed request.  Append the
 * members of a successful reply to out WITHOUT braces and without a leading
 * comma, e.g. "\"streams\":3,\"draining\":false"; or return ST_ENOTFOUND for
 * an unknown command (reply unknown_command), ST_EINVAL for bad arguments
 * (detail = out's text, which the handler set).
 */
typedef st_err (*st_control_fn)(const char *cmd, const st_json *req, st_buf *out, void *arg);

/*
 * Listens on url.  ST_EINVAL for a bad URL, ST_ESYS when it cannot listen
 * (logged).  An ipc:// socket file is made mode 0600 (owner only) and
 * checked; ST_ESYS when that fails.  Which tcp:// addresses are allowed is
 * checked before, at start (st_preflight_tls: loopback, or tls+tcp).
 */
st_err st_control_new(struct event_base *base, const char *url, st_control_fn fn, void *arg, st_control **out);
void st_control_free(st_control *c); /* NULL-safe; closes the socket */

/*
 * Client side, for studioctl: sends one request and waits up to timeout_ms
 * for the reply (blocking; never used inside an event loop).  *reply is
 * malloc'd and NUL-terminated.
 */
st_err st_control_call(const char *url, const char *request_json, int timeout_ms, char **reply);

#endif
