/*
 * st_preflight: the configuration checks a program makes before it touches
 * the network, so that bad configuration exits 2 with one line at once
 * instead of retrying for ever or failing after the database answered.
 *
 * Two kinds:
 *  - value checks, for st_opt.check (st_config runs them while parsing):
 *    a libpq DSN (PQconninfoParse, plus the numbers libpq would only
 *    refuse when connecting), an nng URL to listen on or to dial (nng's own
 *    parser and transport, without binding or connecting), an HTTP listen
 *    address.  They read the value only, never the network: a host name in
 *    a listen URL is resolved by st_preflight_listen, not here.
 *  - st_preflight_listen: binds every listen address of the program at
 *    once, then closes them all, so an address in use, a port below 1024
 *    without the right, an address not on this host, or two flags naming
 *    the same port are found before the database is contacted.  The real
 *    sockets are made afterwards by the modules that own them; between the
 *    two another process could take a port, and that program then still
 *    exits 2 from the module (later, with the module's own log line).
 *
 * Main thread, at start; nothing here is thread-safe or meant for a loop.
 */
#ifndef ST_PREFLIGHT_H
#define ST_PREFLIGHT_H

#include <stdbool.h>
#include <stddef.h>

#include "st_config.h"
#include "st_tls.h"

/* STR: a libpq connection string "key=value ..." or a postgres:// URI.  A
 * bare word (which libpq would take as a database name) is refused: write
 * dbname=NAME. */
bool st_preflight_dsn(const st_opt *o, char *why, size_t cap);

/* STR: an nng URL to listen on (tcp://ADDR:PORT, ipc://PATH, inproc://NAME,
 * ws://ADDR:PORT/PATH); empty means "none" and is not checked. */
bool st_preflight_listen_url(const st_opt *o, char *why, size_t cap);

/* LIST: 1..ST_PREFLIGHT_MAX_DIAL nng URLs to dial (tcp://HOST:PORT with
 * PORT 1..65535, ipc://PATH, inproc://NAME, ws://HOST:PORT/PATH). */
#define ST_PREFLIGHT_MAX_DIAL 64u
bool st_preflight_dial_urls(const st_opt *o, char *why, size_t cap);

/* STR: an HTTP listen address, IPv4:PORT or [IPv6]:PORT (numeric, port
 * 0..65535); empty means "none". */
bool st_preflight_http_addr(const st_opt *o, char *why, size_t cap);

/*
 * Option table entries that every program having them writes alike (each
 * program indexes its table by its own enum: [X_TLS_CA] = ST_OPT_TLS_CA).
 */
#define ST_OPT_PG_DSN                                                                                                  \
	{                                                                                                              \
		.name = "pg-dsn", .kind = ST_OPT_STR, .help = "PostgreSQL connection string (libpq key=value or URI)", \
		.required = true, .check = st_preflight_dsn, .secret = true                                            \
	}
#define ST_OPT_TLS_CERT                                                        \
	{                                                                      \
		.name = "tls-cert", .kind = ST_OPT_STR, .def = "",             \
		.help = "PEM certificate of this process for tls+tcp:// links" \
	}
#define ST_OPT_TLS_KEY                                                                                     \
	{                                                                                                  \
		.name = "tls-key", .kind = ST_OPT_STR, .def = "", .help = "PEM private key of --tls-cert", \
		.secret = true                                                                             \
	}
#define ST_OPT_TLS_CA                                                      \
	{                                                                  \
		.name = "tls-ca", .kind = ST_OPT_STR, .def = "",           \
		.help = "PEM CA that signs every peer on tls+tcp:// links" \
	}
#define ST_OPT_TLS_CRL                                                                                                    \
	{                                                                                                                 \
		.name = "tls-crl", .kind = ST_OPT_STR, .def = "",                                                         \
		.help = "PEM CRL(s): certificates revoked on every tls+tcp:// link (an expired CRL refuses its whole CA)" \
	}
#define ST_OPT_ROLE_TLS_CA(flag, what)                                                           \
	{                                                                                        \
		.name = flag "-tls-ca", .kind = ST_OPT_STR, .def = "",                           \
		.help = "PEM CA that signs the peers of --" flag " (" what "); empty = --tls-ca" \
	}

/* --auth-max-lifetime (edge) and --ingest-max-lifetime (writer): one rule in st_auth, one option shape. */
#define ST_OPT_MAX_LIFETIME(flag, who)                                                                    \
	{                                                                                                 \
		.name = flag, .kind = ST_OPT_DURATION, .def = "24h",                                      \
		.help = "a " who " token whose exp is further away than this is refused (a leaked token " \
			"cannot live for years)",                                                         \
		.min = 1000, .max = 366ll * 86400 * 1000, .allowed = "a duration from 1s to 366d"         \
	}

enum st_preflight_kind {
	ST_PREFLIGHT_NNG,         /* an nng URL, listened with nng */
	ST_PREFLIGHT_HTTP,        /* ADDR:PORT, SO_REUSEADDR like st_http */
	ST_PREFLIGHT_HTTP_SHARED, /* ADDR:PORT with SO_REUSEPORT too (several loop threads) */
};

typedef struct st_preflight_addr {
	const char *flag;  /* "ingest": for the error line */
	const char *value; /* NULL or "" = not listened: skipped */
	enum st_preflight_kind kind;
} st_preflight_addr;

/*
 * Listens on every address of a[0..n) at the same time, then closes them
 * all.  On the first failure prints "PROG: --FLAG VALUE: cannot listen:
 * REASON" and exits 2.  May resolve a host name of a listen URL (blocking).
 */
void st_preflight_listen(const char *prog, const st_preflight_addr *a, size_t n);
/* The same without exiting: false with "--FLAG VALUE: cannot listen: REASON" in line. */
bool st_preflight_listen_try(const st_preflight_addr *a, size_t n, char *line, size_t cap);

/* A program's TLS options (parsed); NULL: the program has no such option. */
typedef struct st_preflight_tls_opts {
	const st_opt *cert, *key, *ca, *crl;
	const st_opt *role_ca[ST_TLS_ROLE_N];
} st_preflight_tls_opts;

/*
 * The program's TLS options: loads them (st_tls_load) and checks every URL
 * option of the program (an
 * option whose check is st_preflight_listen_url or st_preflight_dial_urls)
 * against them: a tls+tcp URL without the files, a file that cannot be read
 * or a key that does not match exits 2 with one line.  Before
 * st_preflight_listen, which binds tls+tcp URLs with the loaded identity.
 */
void st_preflight_tls(const char *prog, st_opt *opts, size_t n, const st_preflight_tls_opts *t);
/*
 * True when a listen URL is reachable from this host only (ipc, inproc,
 * abstract; tcp on 127.0.0.0/8, ::1 or localhost) or is tls+tcp (peers
 * need a certificate).  st_preflight_tls refuses (exit 2) a --control
 * URL that is neither.
 */
bool st_preflight_url_private(const char *url);

#endif
