/* Unit tests for st_preflight: every value check as a table, and the listen
 * probe against a real socket that holds a port. */
#include "st_preflight.h"
#include "st_test.h"
#include "st_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <nng/nng.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

typedef bool (*check_fn)(const st_opt *o, char *why, size_t cap);

static void
table(const char *what, check_fn fn, const char *const *good, const char *const *bad, const char *needle)
{
	char why[512];

	for (const char *const *v = good; *v; v++) {
		st_opt o = { .name = "x", .sval = *v };

		why[0] = '\0';
		if (!fn(&o, why, sizeof(why))) {
			fprintf(stderr, "%s: \"%s\" refused: %s\n", what, *v, why);
			ST_CHECK(0);
		}
	}
	for (const char *const *v = bad; *v; v++) {
		st_opt o = { .name = "x", .sval = *v };

		why[0] = '\0';
		if (fn(&o, why, sizeof(why))) {
			fprintf(stderr, "%s: \"%s\" accepted\n", what, *v);
			ST_CHECK(0);
		} else if (why[0] == '\0' || strchr(why, '\n') != NULL || (needle && !strstr(why, needle))) {
			fprintf(stderr, "%s: \"%s\": reason \"%s\" (want one line with \"%s\")\n", what, *v, why,
				needle ? needle : "");
			ST_CHECK(0);
		}
	}
}

static void
t_dsn(void)
{
	static const char *const good[] = { "host=127.0.0.1 port=5432 dbname=x",
					    "postgresql://u@127.0.0.1:5432/db",
					    "postgres:///db?host=/run/postgresql",
					    "host=a,b port=5432,5433",
					    "host=a port=",
					    "dbname=x connect_timeout=5",
					    NULL };
	static const char *const bad[] = { "garbage",
					   "host=127.0.0.1 port",
					   "hots=x",
					   "host='unterminated",
					   "postgresql://h:abc/db",
					   "host=x port=0",
					   "host=x port=70000",
					   "host=x port=5432,x",
					   "dbname=x connect_timeout=soon",
					   NULL };

	table("dsn", st_preflight_dsn, good, bad, NULL);
}

static void
t_listen_url(void)
{
	static const char *const good[] = { "tcp://0.0.0.0:7450", "tcp://127.0.0.1:0",         "tcp://[::1]:7450",
					    "tcp://:7450",        "tcp://writer.example:7450", "ipc:///tmp/x.sock",
					    "inproc://a",         "ws://127.0.0.1:80/p",       NULL };
	static const char *const bad[] = { "garbage",
					   "tcp://0.0.0.0",
					   "tcp://0.0.0.0:",
					   "tcp://0.0.0.0:x",
					   "tcp://0.0.0.0:65536",
					   "tcp://0.0.0.0:1/path",
					   "ipc://",
					   "foo://x",
					   "http://1.2.3.4:80",
					   NULL };

	table("listen url", st_preflight_listen_url, good, bad, NULL);
}

static void
t_dial_urls(void)
{
	static const char *const good[] = { "tcp://127.0.0.1:7451", "tcp://writer:7451,tcp://10.0.0.2:7451",
					    "tcp://w-0.w.ns.svc:7451, ipc:///tmp/p", NULL };
	static const char *const bad[] = { "tcp://127.0.0.1", "tcp://:7451", "tcp://h:0", "tcp://h:port",
					   "tcp://ok:1,nope", ",",           "udp://h:1", NULL };
	char many[65 * 24] = "";
	char why[256];
	st_opt o = { .name = "writers", .sval = many };

	table("dial urls", st_preflight_dial_urls, good, bad, NULL);
	for (int i = 0; i < 65; i++)
		snprintf(many + strlen(many), sizeof(many) - strlen(many), "%stcp://h:%d", i ? "," : "", 1000 + i);
	ST_CHECK(!st_preflight_dial_urls(&o, why, sizeof(why)));
	ST_CHECK(strstr(why, "more than 64") != NULL);
}

static void
t_http_addr(void)
{
	static const char *const good[] = { "0.0.0.0:8080", "127.0.0.1:0", "[::1]:8080", NULL };
	static const char *const bad[] = { "8080",          ":8080",  "localhost:8080", "0.0.0.0:", "0.0.0.0:x",
					   "0.0.0.0:65536", "::1:80", "1.2.3.4.5:80",   NULL };

	table("http addr", st_preflight_http_addr, good, bad, "PORT");
}

/* A real listener on 127.0.0.1 with a kernel-chosen port. */
static int
hold_port(int *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	ST_ASSERT(fd != -1);
	ST_ASSERT(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(fd, 1) == 0);
	ST_ASSERT(getsockname(fd, (struct sockaddr *)&sa, &len) == 0);
	*port = ntohs(sa.sin_port);
	return fd;
}

/* st_preflight_listen_try: 0 when every address listened, 2 otherwise (what the program exits with). */
static int
probe(const st_preflight_addr *a, size_t n, char *err, size_t cap)
{
	err[0] = '\0';
	return st_preflight_listen_try(a, n, err, cap) ? 0 : 2;
}

/* Which control URLs are reachable from this host only (no warning) and which are not. */
static void
t_url_private(void)
{
	ST_CHECK(st_preflight_url_private("tcp://127.0.0.1:7452"));
	ST_CHECK(st_preflight_url_private("tcp://127.3.2.1:7452"));
	ST_CHECK(st_preflight_url_private("tcp://localhost:7452"));
	ST_CHECK(st_preflight_url_private("tcp://[::1]:7452"));
	ST_CHECK(st_preflight_url_private("ipc:///tmp/ctl"));
	ST_CHECK(st_preflight_url_private("tls+tcp://0.0.0.0:7452"));
	ST_CHECK(!st_preflight_url_private("tcp://0.0.0.0:7452"));
	ST_CHECK(!st_preflight_url_private("tcp://10.1.2.3:7452"));
	ST_CHECK(!st_preflight_url_private("tcp://[::]:7452"));
	ST_CHECK(!st_preflight_url_private("tcp://writer-0.studio:7452"));
	ST_CHECK(!st_preflight_url_private("ws://0.0.0.0:7452/ctl"));
}

static void
t_listen(void)
{
	int port, fd = hold_port(&port), p2;
	char busy_nng[64], busy_http[64], free_nng[64], free_http[64], err[512], want[128];
	int fd2 = hold_port(&p2);

	/* p2 is free again once closed: a port the test owns, for the good cases */
	close(fd2);
	snprintf(busy_nng, sizeof(busy_nng), "tcp://127.0.0.1:%d", port);
	snprintf(busy_http, sizeof(busy_http), "127.0.0.1:%d", port);
	snprintf(free_nng, sizeof(free_nng), "tcp://127.0.0.1:%d", p2);
	snprintf(free_http, sizeof(free_http), "127.0.0.1:%d", p2);
	{
		st_preflight_addr a[] = { { "ingest", free_nng, ST_PREFLIGHT_NNG },
					  { "http", "", ST_PREFLIGHT_HTTP },
					  { "control", NULL, ST_PREFLIGHT_NNG } };
		ST_CHECK(probe(a, ST_ARRAY_LEN(a), err, sizeof(err)) == 0);
		ST_CHECK(err[0] == '\0');
	}
	{
		st_preflight_addr a[] = { { "ingest", free_nng, ST_PREFLIGHT_NNG },
					  { "publish", busy_nng, ST_PREFLIGHT_NNG } };
		ST_CHECK(probe(a, ST_ARRAY_LEN(a), err, sizeof(err)) == 2);
		snprintf(want, sizeof(want), "--publish %s: cannot listen: ", busy_nng);
		fprintf(stderr, "  %s\n", err);
		ST_CHECK(strncmp(err, want, strlen(want)) == 0);
		ST_CHECK(strchr(err, '\n') == NULL);
	}
	{
		st_preflight_addr a[] = { { "listen", busy_http, ST_PREFLIGHT_HTTP } };
		ST_CHECK(probe(a, ST_ARRAY_LEN(a), err, sizeof(err)) == 2);
		fprintf(stderr, "  %s\n", err);
		ST_CHECK(strstr(err, "Address already in use") != NULL);
	}
	{
		/* two flags naming one port: the second cannot listen while the first holds it */
		st_preflight_addr a[] = { { "ingest", free_nng, ST_PREFLIGHT_NNG },
					  { "http", free_http, ST_PREFLIGHT_HTTP } };
		ST_CHECK(probe(a, ST_ARRAY_LEN(a), err, sizeof(err)) == 2);
		fprintf(stderr, "  %s\n", err);
		ST_CHECK(strstr(err, "--http ") != NULL);
	}
	{
		/* shared (SO_REUSEPORT) twice on one port is what --threads does: allowed */
		st_preflight_addr a[] = { { "listen", free_http, ST_PREFLIGHT_HTTP_SHARED } };
		ST_CHECK(probe(a, ST_ARRAY_LEN(a), err, sizeof(err)) == 0);
	}
	{
		st_preflight_addr a[] = { { "listen", "192.0.2.1:8080", ST_PREFLIGHT_HTTP } };
		ST_CHECK(probe(a, ST_ARRAY_LEN(a), err, sizeof(err)) == 2);
		fprintf(stderr, "  %s\n", err);
	}
	close(fd);
}

int
main(void)
{
	ST_RUN(t_dsn);
	ST_RUN(t_listen_url);
	ST_RUN(t_dial_urls);
	ST_RUN(t_http_addr);
	ST_RUN(t_url_private);
	ST_RUN(t_listen);
	nng_fini();
	return st_test_done();
}
