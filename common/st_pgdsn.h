/*
 * st_pgdsn: a libpq DSN turned into connection parameters that make libpq
 * connect by address, so that PQconnectStartParams never resolves a host
 * name on the event loop (it would, synchronously).
 *
 * The DSN (key=value conninfo or postgres:// URI) is parsed once with
 * PQconninfoParse.  Its host list (or PGHOST when the DSN has none) is
 * split on commas; entries that are host NAMES (not a numeric IPv4/IPv6
 * address, not a Unix-socket directory or @abstract socket, not empty) are
 * what the caller resolves off the loop (st_resolve).  The parameters then
 * carry host=<name> and hostaddr=<address> side by side: libpq connects to
 * the address, and still uses the name for TLS verification
 * (sslmode=verify-full), Kerberos/GSS and the password file.  A name with
 * several addresses becomes several host entries (same name, one address
 * each, the entry's port repeated), so libpq tries them in turn as it would
 * have.  A port list of one value applies to all; one per host is repeated
 * with its host.  A DSN that sets hostaddr itself (or PGHOSTADDR) is used
 * as it is.  Not supported: a host taken from a service file (service=),
 * which libpq would still resolve itself.
 *
 * Thread: any, one object per thread.
 */
#ifndef ST_PGDSN_H
#define ST_PGDSN_H

#include <stddef.h>

#include "st_err.h"

typedef struct st_pgdsn st_pgdsn;

/* ST_EINVAL (err filled, one line) when libpq cannot parse dsn or its host
 * and port lists do not match (more than one port, not one per host). */
st_err st_pgdsn_parse(const char *dsn, st_pgdsn **out, char *err, size_t errlen);
void st_pgdsn_free(st_pgdsn *d); /* NULL-safe */

/* The distinct host names to resolve, in DSN order (0: none, connect at once). */
size_t st_pgdsn_names(const st_pgdsn *d, const char *const **names);

/*
 * Builds the NULL-terminated keys/vals for PQconnectStartParams (with
 * expand_dbname 0): every option of the DSN, host/hostaddr/port as above
 * (addrs[i]: comma-separated addresses of names[i], "" when it did not
 * resolve: its entries are left out), then extra_keys/extra_vals
 * (NULL-terminated, may be NULL), which override the DSN's.  addrs may be
 * NULL when st_pgdsn_names is 0.  The arrays stay valid until the next
 * call or st_pgdsn_free.  ST_EINVAL when no host entry is left.
 */
st_err st_pgdsn_params(st_pgdsn *d, const char *const *addrs, const char *const *extra_keys,
                       const char *const *extra_vals, const char *const **keys, const char *const **vals);

#endif
