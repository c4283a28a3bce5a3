/*
 * st_tlsstat: failed TLS handshakes on the programs' tls+tcp listeners,
 * counted per listener and summarised in the log.  Three kinds:
 *
 *   refused  reported by the programs' TLS engine (st_tls_engine), once
 *            per refused handshake, with its reason: a certificate refused
 *            (none, wrong CA, revoked, expired; or ours refused by the
 *            peer), no common version, suite or curve, bytes that are not
 *            TLS;
 *   timeout  nng 1.5's listener statistic: no handshake and SP header
 *            within nng's 10 s (public API: nng_stats_get, the listener
 *            found by its id);
 *   proto    nng's too: a bad SP header after the handshake.
 *
 * Their sum is the listener's count, name{listener="LABEL"}.  Not counted:
 * a connection closed before its handshake ended (a port probe, a peer
 * that gave up), which nng files with every established pipe's end
 * ("other", "disconnect"), and nng's "auth", which holds the same
 * refusals as the engine's, minus those that ended while nng was not
 * accepting.  The reason carries the peer's address where the engine
 * could read it (nng 1.5, docs/security.md).
 *
 * Reading nng's statistics snapshots every socket, listener, dialer and
 * pipe of the process (about 1 ms per 1000 pipes, measured on Debian 12's
 * libnng): done every interval on the loop and when /metrics is scraped,
 * never per connection.  The interval also limits the log: at most one
 * summary line per listener per interval, when its count rose, with the
 * latest refusal's reason.  A dialer's refused handshake (label NULL) is
 * written at once, at most one line per interval for all dialers.
 */
#ifndef ST_TLSSTAT_H
#define ST_TLSSTAT_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <nng/nng.h>

#include "st_metrics.h"

/* Listeners remembered at once (a process has at most one per role, and st_preflight's closed ones until polled). */
#define ST_TLSSTAT_MAX 16
/* The programs' interval: polling and the summary log. */
#define ST_TLSSTAT_INTERVAL_MS 10000u

/* Longest reason kept (the engine's, st_tls_engine.h). */
#define ST_TLSSTAT_REASON_MAX 400

typedef struct st_tlsstat st_tlsstat;

/*
 * One refused handshake of a listener labelled label (a static string, a
 * label given to st_tlsstat_new; another is kept until polled by none),
 * or of a dialer (label NULL: logged here, at most one line per
 * ST_TLSSTAT_INTERVAL_MS).  reason: one line.  Any thread, never blocks on
 * more than a short mutex, calls nothing of nng: st_tls_engine's hook.
 */
void st_tlsstat_refused(const char *label, const char *reason);

/*
 * Remembers l, a started tls+tcp listener, under label (a static string:
 * "ingest", "publish", "control").  Any thread.  A listener closed later
 * is forgotten when next polled; with ST_TLSSTAT_MAX open ones, l is not
 * counted (a warning says so).
 */
void st_tlsstat_track(const char *label, nng_listener l);

/*
 * The counters name{listener="LABEL"} in m for each of the n labels, and a
 * timer on base every interval_ms that polls and logs, per label whose
 * count rose, "tls: LABEL listener: N failed handshakes in the last S s
 * (...)".  One per process (polls take what nng counted since the last
 * poll).  When nng has no statistics (built without them) it warns once
 * and registers nothing.  Main thread; never NULL (allocation failure
 * ends the process, st_util.h).
 */
st_tlsstat *st_tlsstat_new(struct event_base *base, st_metrics *m, const char *name, const char *const *labels,
			   size_t n, uint64_t interval_ms);

/* Reads nng's statistics into the counters now (before /metrics renders).  Any thread. */
void st_tlsstat_poll(st_tlsstat *s);

/* Before the base and m are freed (NULL-safe). */
void st_tlsstat_free(st_tlsstat *s);

#endif
