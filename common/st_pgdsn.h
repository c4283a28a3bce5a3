/*
 * st_pgdsn: a libpq DSN turned into one set of connection parameters per
 * address, so that PQconnectStartParams never resolves a host name on the
 * event loop (it would, synchronously) and the caller tries the addresses
 * one at a time, each under its own deadline.
 *
 * Why one address per attempt: libpq's own walk over a host list is driven
 * by PQconnectPoll, which has no clock in non-blocking mode (connect_timeout
 * is honoured only by the blocking PQconnectdb), so a first host that
 * accepts TCP and never answers would hold every later one behind the
 * caller's single deadline.  Trying entry by entry gives each address the
 * DSN's connect_timeout (or the caller's default), as libpq's blocking
 * connect does.
 *
 * The DSN (key=value conninfo or postgres:// URI) is parsed once with
 * PQconninfoParse and checked against what libpq 15 would refuse only when
 * it connects (connectOptions2: sslmode, gssencmode, channel_binding,
 * target_session_attrs, ssl_min/max_protocol_version, host/hostaddr/port
 * counts, port numbers, connect_timeout), so bad configuration is found at
 * start, not retried as an outage.  Its host list (or PGHOST) is split on
 * commas; entries that are host NAMES (not a numeric IPv4/IPv6 address, not
 * a Unix-socket directory or @abstract socket, not empty) are what the
 * caller resolves off the loop (st_resolve).  A round (st_pgdsn_round) is
 * then the list of entries in the order libpq would try them: every host
 * in DSN order, a name once per address (host=<name> kept beside
 * hostaddr=<address> for TLS verification, GSS and the password file), a
 * name that did not resolve left out.  A DSN that sets hostaddr itself
 * keeps its addresses.  target_session_attrs=prefer-standby is two passes
 * over the entries, "standby" then "any", as libpq does it.  Not supported:
 * a host taken from a service file (service=), which libpq would still
 * resolve itself.
 *
 * Thread: any, one object per thread.
 */
#ifndef ST_PGDSN_H
#define ST_PGDSN_H

#include <stddef.h>
#include <stdint.h>

#include "st_err.h"

typedef struct st_pgdsn st_pgdsn;

/* ST_EINVAL (err filled, one line, no password) when libpq cannot parse dsn
 * or would refuse it at connect time (see above). */
st_err st_pgdsn_parse(const char *dsn, st_pgdsn **out, char *err, size_t errlen);
void st_pgdsn_free(st_pgdsn *d); /* NULL-safe */

/* The distinct host names to resolve, in DSN order (0: none, connect at once). */
size_t st_pgdsn_names(const st_pgdsn *d, const char *const **names);

/*
 * Starts a round from the addresses of that round's resolution (addrs[i]:
 * comma-separated addresses of names[i], "" when it did not resolve; NULL
 * when st_pgdsn_names is 0).  Returns the number of attempts in the round,
 * 0 when no entry is left (every name failed to resolve).
 */
size_t st_pgdsn_round(st_pgdsn *d, const char *const *addrs);

/*
 * The NULL-terminated keys/vals for PQconnectStartParams (expand_dbname 0)
 * of attempt i of the round: every option of the DSN with host, hostaddr
 * and port of that one entry, then extra_keys/extra_vals (NULL-terminated,
 * may be NULL), which override the DSN's.  Valid until the next call,
 * st_pgdsn_round or st_pgdsn_free.
 */
void st_pgdsn_params(st_pgdsn *d, size_t i, const char *const *extra_keys, const char *const *extra_vals,
		     const char *const **keys, const char *const **vals);

/* "name (address) port P" of attempt i, for log lines (valid as params'). */
const char *st_pgdsn_label(st_pgdsn *d, size_t i);

/* The deadline of one attempt: the DSN's connect_timeout (libpq's rule: 1
 * counts as 2 seconds), or dflt_ms when it is unset or 0. */
uint32_t st_pgdsn_attempt_ms(const st_pgdsn *d, uint32_t dflt_ms);

/* The DSN's value of key (or of its environment variable), NULL when unset. */
const char *st_pgdsn_option(const st_pgdsn *d, const char *key);

#endif
