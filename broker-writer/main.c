/*
 * broker-writer: accepts events over nng rep0, stores them in PostgreSQL
 * once per flush interval in one transaction under pg_advisory_xact_lock,
 * answers the producers after the commit and publishes the committed events
 * in seq order on nng pub0.  See docs/writer.md.
 *
 * DESIGN.  This file is configuration: the option table, the checks made
 * before the network (TLS files, listen addresses, the producer key file,
 * a warning when plain sockets are open to the network), then it reads:
 * configure, construct (writer_new), run (writer_run), tear down.  The
 * writer's parts and its life are writer.c; `migrate` is schema.c's.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <nng/nng.h>

#include "schema.h"
#include "st_auth_store.h"
#include "st_clock.h"
#include "st_config.h"
#include "st_log.h"
#include "st_preflight.h"
#include "st_tls.h"
#include "st_util.h"
#include "writer.h"

#define PROG WRITER_PROG
#define DEFAULT_LOCK_KEY "7450001"
/* A flush or retention key equal to the migration's session lock would wait on it. */
#define MIGRATION_LOCK_KEY ((int64_t)SCHEMA_MIGRATE_LOCK_KEY)
_Static_assert(SCHEMA_MIGRATE_LOCK_KEY == 7450000001, "update --lock-key's allowed text and docs/writer.md");
/* The cut is now() - retention in PostgreSQL: 100 years keeps it a valid timestamptz, in int64 ms and µs. */
#define RETENTION_MAX_MS (INT64_C(36500) * 86400000)

static bool
lock_key_check(const st_opt *o, char *why, size_t cap)
{
	/* the range (1..INT64_MAX - 1) is the table's: retention locks key + 1 */
	if (o->ival != MIGRATION_LOCK_KEY && o->ival + 1 != MIGRATION_LOCK_KEY)
		return true;
	snprintf(why, cap, "must be %s", o->allowed);
	return false;
}

/* The options, by index: a misspelt name is a compile error. */
enum {
	W_PG_DSN,
	W_INGEST,
	W_PUBLISH,
	W_CONTROL,
	W_HTTP,
	W_FLUSH_INTERVAL_MS,
	W_LOCK_KEY,
	W_RETENTION,
	W_TLS_CERT,
	W_TLS_KEY,
	W_TLS_CA,
	W_TLS_CRL,
	W_INGEST_TLS_CA,
	W_PUBLISH_TLS_CA,
	W_CONTROL_TLS_CA,
	W_INGEST_KEYS,
	W_INGEST_KEYS_WATCH,
	W_INGEST_MAX_LIFETIME,
	W_MIGRATE_WAIT,
	W_INGEST_HTTP,
	W_N
};

static st_opt opts[W_N] = {
	[W_PG_DSN] = ST_OPT_PG_DSN,
	[W_INGEST] = { .name = "ingest",
		       .kind = ST_OPT_STR,
		       .def = "tcp://0.0.0.0:7450",
		       .help = "nng rep0 URL to listen on for producers",
		       .required = true,
		       .check = st_preflight_listen_url },
	[W_PUBLISH] = { .name = "publish",
			.kind = ST_OPT_STR,
			.def = "tcp://0.0.0.0:7451",
			.help = "nng pub0 URL to listen on for edges",
			.required = true,
			.check = st_preflight_listen_url },
	[W_CONTROL] = { .name = "control",
			.kind = ST_OPT_STR,
			.def = "",
			.help = "nng rep0 URL of the ops socket (stats, drain); empty = none",
			.check = st_preflight_listen_url },
	[W_HTTP] = { .name = "http",
		     .kind = ST_OPT_STR,
		     .def = "0.0.0.0:9450",
		     .help = "ADDR:PORT for /metrics, /healthz, /readyz; empty = none",
		     .check = st_preflight_http_addr },
	[W_FLUSH_INTERVAL_MS] = { .name = "flush-interval-ms",
				  .kind = ST_OPT_INT,
				  .def = "1000",
				  .help = "milliseconds between flushes",
				  .min = 10,
				  .max = 60000 },
	[W_LOCK_KEY] = { .name = "lock-key",
			 .kind = ST_OPT_INT,
			 .def = DEFAULT_LOCK_KEY,
			 .help = "advisory lock key of the flush (retention uses key + 1); same on every replica",
			 .min = 1,
			 .max = INT64_MAX - 1,
			 .allowed = "1..9223372036854775806 and not 7450000000/7450000001",
			 .check = lock_key_check },
	[W_RETENTION] = { .name = "retention",
			  .kind = ST_OPT_DURATION,
			  .def = "7d",
			  .help = "delete events older than this; 0 keeps all",
			  .min = 0,
			  .max = RETENTION_MAX_MS,
			  .allowed = "0 (keep everything) or a duration up to 36500d (250ms, 30s, 15m, 12h, 7d)" },
	/* Mutual TLS on tls+tcp:// links (docs/security.md). */
	[W_TLS_CERT] = ST_OPT_TLS_CERT,
	[W_TLS_KEY] = ST_OPT_TLS_KEY,
	[W_TLS_CA] = ST_OPT_TLS_CA,
	[W_TLS_CRL] = ST_OPT_TLS_CRL,
	/* One CA per trust level: a producer's certificate opens neither publish nor control. */
	[W_INGEST_TLS_CA] = ST_OPT_ROLE_TLS_CA("ingest", "producers"),
	[W_PUBLISH_TLS_CA] = ST_OPT_ROLE_TLS_CA("publish", "edges"),
	[W_CONTROL_TLS_CA] = ST_OPT_ROLE_TLS_CA("control", "operators"),
	/* Producer credentials (docs/security.md): the edge's JWKS rules, claim "publish". */
	[W_INGEST_KEYS] = { .name = "ingest-keys",
			    .kind = ST_OPT_STR,
			    .def = "",
			    .help = "JWKS file of the producers' token keys; empty = no producer credentials (reload: SIGHUP, reload)" },
	[W_INGEST_KEYS_WATCH] = { .name = "ingest-keys-watch",
				  .kind = ST_OPT_DURATION,
				  .def = "10s",
				  .help = "how often the --ingest-keys file is looked at; a changed file (a rotated Secret) is reloaded",
				  .min = 0,
				  .max = 3600000,
				  .allowed = "0 (only SIGHUP and reload) or a duration up to 1h" },
	[W_INGEST_MAX_LIFETIME] = ST_OPT_MAX_LIFETIME("ingest-max-lifetime", "producer"),
	[W_MIGRATE_WAIT] = { .name = "migrate-wait",
			     .kind = ST_OPT_DURATION,
			     .def = "60s",
			     .help = "`migrate`: how long a database that cannot be reached (down, starting, not resolvable) is waited for",
			     .min = 0,
			     .max = 3600000,
			     .allowed = "0 (fail at once) or a duration up to 1h" },
	[W_INGEST_HTTP] = { .name = "ingest-http",
			    .kind = ST_OPT_STR,
			    .def = "",
			    .help = "ADDR:PORT for publishing over HTTP (POST /v1/events); empty = none",
			    .check = st_preflight_http_addr },
};

static volatile sig_atomic_t pre_loop_stop;

static void
pre_loop_signal(int sig)
{
	(void)sig;
	pre_loop_stop = 1;
}

/* Clock skew tolerated on a producer token's exp/nbf/iat: the edge's default. */
#define INGEST_KEYS_LEEWAY_S 30u

/*
 * True when url is plain TCP (tcp://, tcp4://, tcp6://, ws://: no TLS) on
 * an address other than loopback: anyone on the network who reaches it is
 * served.  127.0.0.0/8, ::1 and localhost are loopback; a wildcard
 * (0.0.0.0, ::, *, empty) or any other name is not.
 */
static bool
url_open_tcp(const char *url)
{
	static const char *const schemes[] = { "tcp://", "tcp4://", "tcp6://", "ws://" };
	const char *host = NULL, *end;
	size_t n;

	for (size_t i = 0; i < ST_ARRAY_LEN(schemes) && host == NULL; i++)
		if (strncmp(url, schemes[i], strlen(schemes[i])) == 0)
			host = url + strlen(schemes[i]);
	if (host == NULL)
		return false;
	n = strcspn(host, "/"); /* the authority: ws:// has a path */
	if (host[0] == '[') {
		host++;
		end = memchr(host, ']', n - 1);
	} else {
		end = n > 0 ? memrchr(host, ':', n) : NULL;
	}
	if (end != NULL)
		n = (size_t)(end - host);
	if ((n == 3 && memcmp(host, "::1", 3) == 0) || (n == 9 && memcmp(host, "localhost", 9) == 0) ||
	    (n >= 4 && memcmp(host, "127.", 4) == 0))
		return false;
	return true;
}

/* Without --ingest-keys: one warning at start when a socket is open to the network (the issue 24 finding). */
static void
open_warning(const char *ingest_url, const char *publish_url)
{
	bool in = url_open_tcp(ingest_url), pub = url_open_tcp(publish_url);

	if (!in && !pub)
		return;
	st_warn("no producer credentials (--ingest-keys) and plain tcp:// or ws:// on a non-loopback address:%s%s%s%s%s%s%s; "
		"set --ingest-keys, use tls+tcp:// (mutual TLS) or listen on loopback (docs/security.md)",
		in ? " anyone who reaches --ingest " : "", in ? ingest_url : "", in ? " can publish to any topic" : "",
		in && pub ? ", and" : "", pub ? " anyone who reaches --publish " : "", pub ? publish_url : "",
		pub ? " reads every topic, including those the edges guard with tokens" : "");
}

static void
make_instance(char *out, size_t len)
{
	char host[64] = "host";
	unsigned char r[4] = { 0 };

	if (gethostname(host, sizeof(host)) == -1)
		snprintf(host, sizeof(host), "host");
	host[sizeof(host) - 1] = '\0';
	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
		uint64_t t = st_clock_wall_ms();
		memcpy(r, &t, sizeof(r));
	}
	snprintf(out, len, "%s-%ld-%02x%02x%02x%02x", host, (long)getpid(), r[0], r[1], r[2], r[3]);
}

int
main(int argc, char **argv)
{
	writer_config wc = { .stop = &pre_loop_stop };
	writer *w;
	char instance[128];
	const char *crash = getenv("STUDIO_TEST_CRASH_AFTER_COMMIT");
	int first = argc, rc;

	st_log_init(PROG);
	st_config_parse_or_exit(
		opts, W_N, argc, argv, PROG,
		"broker-writer [migrate] --pg-dsn DSN [--ingest URL] [--publish URL] [--control URL] "
		"[--http ADDR:PORT] [--ingest-http ADDR:PORT] [--flush-interval-ms 1000] [--lock-key N] [--retention DURATION]",
		&first);
	if (first < argc && strcmp(argv[first], "migrate") == 0) {
		if (first + 1 < argc)
			st_config_fail(PROG, "unexpected argument after migrate: %s", argv[first + 1]);
		return schema_migrate_retry(opts[W_PG_DSN].sval, SCHEMA_ALL, (uint64_t)opts[W_MIGRATE_WAIT].ival,
					    &pre_loop_stop);
	}
	if (first < argc)
		st_config_fail(PROG, "unknown command: %s (the only command is migrate)", argv[first]);
	st_preflight_tls(PROG, opts, W_N,
			 &(st_preflight_tls_opts){ .cert = &opts[W_TLS_CERT],
						   .key = &opts[W_TLS_KEY],
						   .ca = &opts[W_TLS_CA],
						   .crl = &opts[W_TLS_CRL],
						   .role_ca = { [ST_TLS_INGEST] = &opts[W_INGEST_TLS_CA],
								[ST_TLS_PUBLISH] = &opts[W_PUBLISH_TLS_CA],
								[ST_TLS_CONTROL] = &opts[W_CONTROL_TLS_CA] } });
	{
		/* Before the database: an address that cannot listen is bad configuration, not an outage. */
		const st_preflight_addr addrs[] = {
			{ "ingest", opts[W_INGEST].sval, ST_PREFLIGHT_NNG },
			{ "publish", opts[W_PUBLISH].sval, ST_PREFLIGHT_NNG },
			{ "control", opts[W_CONTROL].sval, ST_PREFLIGHT_NNG },
			{ "http", opts[W_HTTP].sval, ST_PREFLIGHT_HTTP },
			{ "ingest-http", opts[W_INGEST_HTTP].sval, ST_PREFLIGHT_HTTP },
		};
		st_preflight_listen(PROG, addrs, ST_ARRAY_LEN(addrs));
	}
	if (opts[W_INGEST_KEYS].sval[0] != '\0') {
		/* Producer credentials: a local check, before the database (a bad file is bad configuration). */
		st_auth_config acfg = { .policy = { .leeway_s = INGEST_KEYS_LEEWAY_S,
						    .topics_claim = "publish",
						    .max_lifetime_s =
							    (uint32_t)(opts[W_INGEST_MAX_LIFETIME].ival / 1000) },
					.wall = st_clock_realtime() };
		st_auth_keys *ks = NULL;
		char why[256];

		if (st_auth_keys_load(opts[W_INGEST_KEYS].sval, &ks, why, sizeof(why)) != ST_OK)
			st_config_fail(PROG, "--ingest-keys %s: %s", opts[W_INGEST_KEYS].sval, why);
		wc.auth = st_auth_store_new(ks, &acfg);
		wc.keys_path = opts[W_INGEST_KEYS].sval;
		wc.keys_watch_ms = (uint64_t)opts[W_INGEST_KEYS_WATCH].ival;
		st_info("--ingest-keys %s: %zu keys; every request needs a producer token", wc.keys_path,
			st_auth_keys_count(ks));
	} else {
		open_warning(opts[W_INGEST].sval, opts[W_PUBLISH].sval);
	}
	if (crash != NULL && crash[0] != '\0' && st_parse_u64(crash, strlen(crash), &wc.crash_after) != ST_OK)
		st_config_fail(PROG, "STUDIO_TEST_CRASH_AFTER_COMMIT: not a number: %s", crash);
	make_instance(instance, sizeof(instance));
	wc.pg_dsn = opts[W_PG_DSN].sval;
	wc.ingest_url = opts[W_INGEST].sval;
	wc.publish_url = opts[W_PUBLISH].sval;
	wc.control_url = opts[W_CONTROL].sval;
	wc.http_addr = opts[W_HTTP].sval;
	wc.ingest_http_addr = opts[W_INGEST_HTTP].sval;
	wc.instance = instance;
	wc.flush_interval_ms = (int)opts[W_FLUSH_INTERVAL_MS].ival;
	wc.lock_key = opts[W_LOCK_KEY].ival;
	wc.retention_ms = opts[W_RETENTION].ival;
	/* until the loop's own signal events exist, SIGTERM only ends the schema wait */
	signal(SIGTERM, pre_loop_signal);
	signal(SIGINT, pre_loop_signal);
	signal(SIGPIPE, SIG_IGN);

	w = writer_new(&wc);
	rc = writer_run(w);
	/* Everything accepted is flushed and answered; closing must not hold a restart (st_util.h). */
	st_exit_watchdog(PROG, 5, rc);
	writer_free(w);
	st_tls_unload();
	/* nng's own threads and buffers end here; without it ASan counts them as leaks. */
	nng_fini();
	return rc;
}
