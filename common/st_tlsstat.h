/*
 * st_tlsstat: failed TLS handshakes on the programs' tls+tcp listeners,
 * counted from nng's own per-listener statistics (public API:
 * nng_stats_get, nng_stat_find_listener).  nng 1.5 says nothing else
 * about a failed handshake: the connection never becomes a pipe, so no
 * pipe event sees it, and its TLS engine has no hook or log
 * (docs/security.md "nng links").
 *
 * nng counts, per listener, the errors of the connections it accepted, by
 * kind (nni_listener_bump_error in nng 1.5.2's src/core/listener.c): those
 * that failed before they were a pipe and, through nni_pipe_bump_error,
 * those of its pipes.  Three kinds are failed handshakes:
 *
 *   auth     NNG_EPEERAUTH, NNG_ECRYPTO: a certificate refused (none, wrong
 *            CA, revoked, expired; or ours refused by the peer), no common
 *            protocol version or cipher suite, bytes that are not TLS;
 *   timeout  no handshake and SP header within nng's 10 s;
 *   proto    a bad SP header after the handshake.
 *
 * Their sum is the listener's count, name{listener="LABEL"}.  Not counted:
 * "other" and "disconnect", which hold every established pipe's end (a
 * peer that closes, a reset) as well as a connection closed before its
 * handshake, so a port probe cannot be told from a producer that left.
 * What nng does not give: the peer's address or certificate.  And a
 * failure that ends while the listener is not waiting for a connection is
 * not counted by nng: after any error but NNG_EPEERAUTH, a reset or a
 * timeout (a wrong CA is NNG_ECRYPTO) nng waits 100 ms before it accepts
 * again, so a burst of refusals is undercounted (docs/security.md has the
 * measured figures).
 *
 * Reading the statistics snapshots every socket, listener, dialer and
 * pipe of the process (about 1 ms per 1000 pipes, measured on Debian 12's
 * libnng): done every interval on the loop and when /metrics is scraped,
 * never per connection.  The interval also limits the log: at most one
 * summary line per listener per interval, when its count rose.
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

typedef struct st_tlsstat st_tlsstat;

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
