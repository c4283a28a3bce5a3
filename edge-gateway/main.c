/*
 * edge-gateway: subscribes to every writer, keeps the ordered history's
 * head, and serves HTTP streams (docs/edge.md).
 *
 * main() configures (options, preflight of the addresses, access control,
 * the per-address bound: local checks before the database and the
 * writers), constructs the edge (edge.h), runs it, and tears it down.  The
 * edge's logic and its DESIGN are in edge.c.
 */
#include <event2/thread.h>
#include <nng/nng.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "edge.h"
#include "fanout.h"
#include "iplimit.h"
#include "st_auth_store.h"
#include "st_clock.h"
#include "st_config.h"
#include "st_log.h"
#include "st_preflight.h"
#include "st_tls.h"
#include "st_util.h"

/* Seconds the teardown after the loop may take before the process just exits. */
#define EDGE_TEARDOWN_S 5

/* The options, by index: a misspelt name is a compile error. */
enum {
	E_PG_DSN,
	E_WRITERS,
	E_LISTEN,
	E_CONTROL,
	E_REPLAY_CAP,
	E_HEARTBEAT_S,
	E_DRAIN_GRACE_S,
	E_THREADS,
	E_MAX_STREAMS,
	E_CORS_ORIGINS,
	E_FLUSH_INTERVAL_MS,
	E_AUTH_KEYS,
	E_AUTH_KEYS_WATCH,
	E_AUTH_LEEWAY_S,
	E_AUTH_MAX_LIFETIME,
	E_AUTH_AUDIENCE,
	E_AUTH_ISSUER,
	E_AUTH_TOPICS_CLAIM,
	E_AUTH_COOKIE,
	E_AUTH_QUERY_TOKEN,
	E_MAX_STREAMS_PER_IP,
	E_TRUSTED_PROXIES,
	E_IPV6_PREFIX,
	E_TLS_CERT,
	E_TLS_KEY,
	E_TLS_CA,
	E_METRICS_LISTEN,
	E_TLS_CRL,
	E_CONTROL_TLS_CA,
	E_N
};

static bool
cors_origins_check(const st_opt *o, char *why, size_t cap)
{
	return http_cors_origins_check(o->sval, why, cap);
}

static st_opt opts[E_N] = {
	[E_PG_DSN] = ST_OPT_PG_DSN,
	[E_WRITERS] = { .name = "writers",
			.kind = ST_OPT_LIST,
			.help = "nng sub0 dial URLs of the writers' publish sockets, comma separated (at most 64)",
			.required = true,
			.check = st_preflight_dial_urls },
	[E_LISTEN] = { .name = "listen",
		       .kind = ST_OPT_STR,
		       .def = "0.0.0.0:8080",
		       .help = "HTTP listen address ADDR:PORT",
		       .required = true,
		       .check = st_preflight_http_addr },
	[E_CONTROL] = { .name = "control",
			.kind = ST_OPT_STR,
			.def = "",
			.help = "nng rep0 URL of the ops socket (empty: none)",
			.check = st_preflight_listen_url },
	[E_REPLAY_CAP] = { .name = "replay-cap",
			   .kind = ST_OPT_INT,
			   .def = "10000",
			   .help = "most events one resume replays before it answers resync",
			   .min = 0,
			   .max = 100000000 },
	[E_HEARTBEAT_S] = { .name = "heartbeat-s",
			    .kind = ST_OPT_INT,
			    .def = "15",
			    .help = "seconds between heartbeats",
			    .min = 1,
			    .max = 3600 },
	[E_DRAIN_GRACE_S] = { .name = "drain-grace-s",
			      .kind = ST_OPT_INT,
			      .def = "25",
			      .help = "seconds a drain spreads reconnects over before closing the rest",
			      .min = 0,
			      .max = 3600 },
	[E_THREADS] = { .name = "threads",
			.kind = ST_OPT_INT,
			.def = "1",
			.help = "event loop threads serving HTTP streams (see docs/edge.md)",
			.min = 1,
			.max = FANOUT_MAX },
	[E_MAX_STREAMS] = { .name = "max-streams",
			    .kind = ST_OPT_INT,
			    .def = "100000",
			    .help = "open streams before new ones get 429",
			    .min = 1,
			    .max = 10000000 },
	[E_CORS_ORIGINS] = { .name = "cors-origins",
			     .kind = ST_OPT_STR,
			     .def = "",
			     .help = "origins allowed by CORS on /v1/stream, comma separated, or *; https:// (http:// only on loopback), "
				     "never null",
			     .check = cors_origins_check },
	[E_FLUSH_INTERVAL_MS] = { .name = "flush-interval-ms",
				  .kind = ST_OPT_INT,
				  .def = "1000",
				  .help = "the writers' flush interval (readiness waits 3 of them)",
				  .min = 10,
				  .max = 600000 },
	/* Access control (docs/security.md). */
	[E_AUTH_KEYS] = { .name = "auth-keys",
			  .kind = ST_OPT_STR,
			  .def = "",
			  .help = "JWKS file of token verification keys; empty: streams need no token" },
	[E_AUTH_KEYS_WATCH] = { .name = "auth-keys-watch",
				.kind = ST_OPT_DURATION,
				.def = "10s",
				.help = "how often the --auth-keys file is looked at; a changed file (a rotated Secret) is reloaded",
				.min = 0,
				.max = 3600000,
				.allowed = "0 (only SIGHUP and reload) or a duration up to 1h" },
	[E_AUTH_LEEWAY_S] = { .name = "auth-leeway-s",
			      .kind = ST_OPT_INT,
			      .def = "30",
			      .help = "clock skew tolerated on a token's exp, nbf and iat",
			      .min = 0,
			      .max = 300 },
	[E_AUTH_MAX_LIFETIME] = ST_OPT_MAX_LIFETIME("auth-max-lifetime", "subscriber"),
	[E_AUTH_AUDIENCE] = { .name = "auth-audience",
			      .kind = ST_OPT_STR,
			      .def = "",
			      .help = "required token aud (empty: not checked)" },
	[E_AUTH_ISSUER] = { .name = "auth-issuer",
			    .kind = ST_OPT_STR,
			    .def = "",
			    .help = "required token iss (empty: not checked)" },
	[E_AUTH_TOPICS_CLAIM] = { .name = "auth-topics-claim",
				  .kind = ST_OPT_STR,
				  .def = "topics",
				  .help = "the claim listing the topics a token may read" },
	[E_AUTH_COOKIE] = { .name = "auth-cookie",
			    .kind = ST_OPT_STR,
			    .def = "studio_token",
			    .help = "cookie carrying the token" },
	[E_AUTH_QUERY_TOKEN] = { .name = "auth-query-token",
				 .kind = ST_OPT_BOOL,
				 .def = "false",
				 .help = "also accept the token as access_token= in the query (it may end up in proxy logs)" },
	[E_MAX_STREAMS_PER_IP] = { .name = "max-streams-per-ip",
				   .kind = ST_OPT_INT,
				   .def = "0",
				   .help = "open streams per client address before 429 (0: no limit)",
				   .min = 0,
				   .max = 10000000 },
	[E_TRUSTED_PROXIES] = { .name = "trusted-proxies",
				.kind = ST_OPT_STR,
				.def = "",
				.help = "CIDR ranges whose X-Forwarded-For / Forwarded names the client, comma separated" },
	[E_IPV6_PREFIX] = { .name = "ipv6-prefix",
			    .kind = ST_OPT_INT,
			    .def = "64",
			    .help = "IPv6 clients count against --max-streams-per-ip per prefix of this length",
			    .min = IPLIMIT_V6_PREFIX_MIN,
			    .max = 128 },
	/* Mutual TLS on tls+tcp:// links (docs/security.md). */
	[E_TLS_CERT] = ST_OPT_TLS_CERT,
	[E_TLS_KEY] = ST_OPT_TLS_KEY,
	[E_TLS_CA] = ST_OPT_TLS_CA,
	/* Operations (docs/edge.md "Metrics"). */
	[E_METRICS_LISTEN] = { .name = "metrics-listen",
			       .kind = ST_OPT_STR,
			       .def = "",
			       .help = "serve /metrics on this ADDR:PORT only, not on --listen (empty: on --listen)",
			       .check = st_preflight_http_addr },
	[E_TLS_CRL] = ST_OPT_TLS_CRL,
	[E_CONTROL_TLS_CA] = ST_OPT_ROLE_TLS_CA("control", "operators"),
};

int
main(int argc, char **argv)
{
	edge_config cfg = { 0 };
	edge *e = NULL;
	char **writers = NULL;
	size_t n_writers;
	int first_pos, rc = 1;
	char why[700];

	st_log_init("edge-gateway");
	st_config_parse_or_exit(opts, E_N, argc, argv, "edge-gateway",
				"edge-gateway --pg-dsn DSN --writers URL[,URL...] [options]", &first_pos);
	if (first_pos != argc)
		st_config_fail("edge-gateway", "unexpected argument '%s'", argv[first_pos]);
	n_writers = st_config_split(opts[E_WRITERS].sval, &writers, ST_PREFLIGHT_MAX_DIAL);
	if (n_writers == 0)
		st_config_fail("edge-gateway", "--writers needs at least one URL");
	st_preflight_tls("edge-gateway", opts, E_N,
			 &(st_preflight_tls_opts){ .cert = &opts[E_TLS_CERT],
						   .key = &opts[E_TLS_KEY],
						   .ca = &opts[E_TLS_CA],
						   .crl = &opts[E_TLS_CRL],
						   .role_ca = { [ST_TLS_CONTROL] = &opts[E_CONTROL_TLS_CA] } });
	{
		/* Before the database and the writers: an address that cannot listen is bad configuration. */
		const st_preflight_addr addrs[] = {
			{ "listen", opts[E_LISTEN].sval,
			  opts[E_THREADS].ival > 1 ? ST_PREFLIGHT_HTTP_SHARED : ST_PREFLIGHT_HTTP },
			{ "control", opts[E_CONTROL].sval, ST_PREFLIGHT_NNG },
			{ "metrics-listen", opts[E_METRICS_LISTEN].sval, ST_PREFLIGHT_HTTP },
		};
		st_preflight_listen("edge-gateway", addrs, ST_ARRAY_LEN(addrs));
	}
	/* Access control and the per-address bound: local checks, before the database and the writers. */
	if (opts[E_AUTH_KEYS].sval[0] != '\0') {
		st_auth_config acfg = { .policy = { .leeway_s = (uint32_t)opts[E_AUTH_LEEWAY_S].ival,
						    .max_lifetime_s = (uint32_t)(opts[E_AUTH_MAX_LIFETIME].ival / 1000),
						    .audience = opts[E_AUTH_AUDIENCE].sval,
						    .issuer = opts[E_AUTH_ISSUER].sval,
						    .topics_claim = opts[E_AUTH_TOPICS_CLAIM].sval },
					.cookie = opts[E_AUTH_COOKIE].sval,
					.query_token = opts[E_AUTH_QUERY_TOKEN].ival != 0,
					.wall = st_clock_realtime() };
		st_auth_keys *ks = NULL;

		if (st_auth_keys_load(opts[E_AUTH_KEYS].sval, &ks, why, sizeof(why)) != ST_OK)
			st_config_fail("edge-gateway", "--auth-keys %s: %s", opts[E_AUTH_KEYS].sval, why);
		/* Credentials with every origin would let any site read with its visitors' cookies. */
		if (strchr(opts[E_CORS_ORIGINS].sval, '*') != NULL)
			st_config_fail("edge-gateway",
				       "--cors-origins %s: with --auth-keys, list the allowed origins (no *)",
				       opts[E_CORS_ORIGINS].sval);
		cfg.auth_keys_path = opts[E_AUTH_KEYS].sval;
		cfg.auth_keys_watch_ms = (uint64_t)opts[E_AUTH_KEYS_WATCH].ival;
		/*
		 * A token of up to ST_AUTH_TOKEN_MAX beside cookies and the other
		 * headers must reach the check, so a longer one is answered 401
		 * invalid_token rather than 431 by the head parser.  The head
		 * buffer lives only until the head is parsed (header timeout 10 s).
		 */
		cfg.http.max_header_bytes = 4 * ST_AUTH_TOKEN_MAX;
		cfg.streams.auth = st_auth_store_new(ks, &acfg);
	}
	if (iplimit_new((uint32_t)opts[E_MAX_STREAMS_PER_IP].ival, opts[E_TRUSTED_PROXIES].sval,
			(unsigned)opts[E_IPV6_PREFIX].ival, &cfg.streams.ip_limit, why, sizeof(why)) != ST_OK)
		st_config_fail("edge-gateway", "--trusted-proxies %s: %s", opts[E_TRUSTED_PROXIES].sval, why);
	cfg.pg_dsn = opts[E_PG_DSN].sval;
	cfg.writers = (const char *const *)writers;
	cfg.n_writers = n_writers;
	cfg.listen = opts[E_LISTEN].sval;
	cfg.control = opts[E_CONTROL].sval;
	cfg.threads = (size_t)opts[E_THREADS].ival;
	cfg.flush_interval_ms = (uint64_t)opts[E_FLUSH_INTERVAL_MS].ival;
	cfg.drain_grace_ms = (uint32_t)opts[E_DRAIN_GRACE_S].ival * 1000;
	cfg.streams.replay_cap = (uint64_t)opts[E_REPLAY_CAP].ival;
	cfg.streams.heartbeat_ms = (uint32_t)opts[E_HEARTBEAT_S].ival * 1000;
	cfg.streams.max_streams = (uint32_t)opts[E_MAX_STREAMS].ival;
	cfg.http.cors_origins = opts[E_CORS_ORIGINS].sval;
	cfg.http.cors_path = "/v1/stream";
	cfg.metrics_listen = opts[E_METRICS_LISTEN].sval;

	signal(SIGPIPE, SIG_IGN);
	evthread_use_pthreads();
	if (edge_new(&cfg, &e, why, sizeof(why)) != ST_OK)
		st_config_fail("edge-gateway", "%s", why);
	if (cfg.streams.auth)
		st_info("access control on: %zu keys from %s; streams need a token",
			st_auth_store_key_count(cfg.streams.auth), cfg.auth_keys_path);
	else
		st_warn("access control off (no --auth-keys): anyone who reaches this edge reads every topic");
	edge_run(e);
	rc = 0;
	/* The drain is done; closing must not hold a rolling restart (see st_util.h). */
	st_exit_watchdog("edge-gateway", EDGE_TEARDOWN_S, rc);

	edge_free(e);
	/* After every worker was joined: no check can hold the store any more. */
	st_auth_store_free(cfg.streams.auth);
	iplimit_free(cfg.streams.ip_limit);
	for (size_t i = 0; i < n_writers; i++)
		free(writers[i]);
	free(writers);
	st_tls_unload();
	/* nng's own threads and buffers end here; without it ASan counts them as leaks. */
	nng_fini();
	return rc;
}
