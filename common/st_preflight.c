/*
 * st_preflight: configuration checks before the network.
 *
 * DESIGN
 * The value checks are pure: they parse, with the parser of the library
 * that will use the value where it has one that does not touch the network
 * (st_pgdsn_parse, with PQconninfoParse; nng_url_parse, and nng_dialer_create / nng_listener_create
 * on a throwaway socket, which validate a URL against its transport without
 * connecting), plus the numbers that library would only refuse at connect
 * time (a port "abc" or 99999).  A listen URL naming a host is not given to
 * nng_listener_create here, because nng resolves the name there: that is
 * st_preflight_listen's job, in the daemon only, so that `migrate` never
 * waits on DNS for a flag it does not use.
 *
 * st_preflight_listen binds for real and holds every socket until all are
 * bound, so two flags that name the same port are found too; then it closes
 * them.  It binds with the options of the real listeners (SO_REUSEADDR as
 * nng and st_http set it, SO_REUSEPORT for a shared HTTP address) so that
 * it refuses exactly what they would refuse.
 */
#include "st_preflight.h"
#include "st_http.h"
#include "st_log.h"
#include "st_pgdsn.h"
#include "st_tls.h"
#include "st_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- DSN ---------------------------------------------------------------- */

/* Parsed and checked by the module that connects with it (st_pgdsn: what
 * libpq would refuse at connect time is refused here, at start). */
bool
st_preflight_dsn(const st_opt *o, char *why, size_t cap)
{
	st_pgdsn *d = NULL;

	if (st_pgdsn_parse(o->sval, &d, why, cap) != ST_OK)
		return false;
	st_pgdsn_free(d);
	return true;
}

/* ---- nng URLs ------------------------------------------------------------ */

static bool
scheme_is(const char *s, const char *const *set)
{
	for (; *set; set++)
		if (strcmp(s, *set) == 0)
			return true;
	return false;
}

static const char *const tcp_schemes[] = { "tcp",      "tcp4", "tcp6", "tls+tcp", "tls+tcp4",
					   "tls+tcp6", "ws",   "ws4",  "ws6",     NULL };
static const char *const path_schemes[] = { "ipc", "inproc", "abstract", NULL };

/* Numeric host (IPv4 or IPv6 literal): nng will not resolve it. */
static bool
numeric_host(const char *h)
{
	struct sockaddr_storage ss;
	int len = (int)sizeof(ss);
	char tmp[128];

	if (strchr(h, ':') != NULL)
		snprintf(tmp, sizeof(tmp), "[%s]:0", h);
	else
		snprintf(tmp, sizeof(tmp), "%s:0", h);
	return http_listen_parse(tmp, &ss, &len) == ST_OK;
}

/*
 * One URL: syntax, scheme, port, then nng's own transport check where it
 * cannot reach the network.  listen: an address to listen on (port 0 and
 * an empty host allowed); otherwise one to dial.
 */
static bool
url_ok(const char *url, bool listen, char *why, size_t cap)
{
	nng_url *u = NULL;
	nng_socket s = NNG_SOCKET_INITIALIZER;
	const char *example = listen ? "tcp://0.0.0.0:7450" : "tcp://writer:7451";
	uint64_t port = 0;
	bool ok = false;
	int rv;

	if ((rv = nng_url_parse(&u, url)) != 0) {
		snprintf(why, cap, "must be an nng URL such as %s or ipc:///path", example);
		return false;
	}
	if (scheme_is(u->u_scheme, tcp_schemes)) {
		const char *host = u->u_hostname ? u->u_hostname : "";

		if (u->u_port == NULL || u->u_port[0] == '\0' ||
		    st_parse_u64(u->u_port, strlen(u->u_port), &port) != ST_OK || port > 65535 ||
		    (!listen && port == 0)) {
			snprintf(why, cap, "needs a numeric port %s..65535 (e.g. %s)", listen ? "0" : "1", example);
			goto done;
		}
		if (!listen && host[0] == '\0') {
			snprintf(why, cap, "needs a host to dial (e.g. %s)", example);
			goto done;
		}
		if (u->u_scheme[0] == 't' && u->u_path[0] != '\0') {
			snprintf(why, cap, "a tcp URL has no path (e.g. %s)", example);
			goto done;
		}
		/* A name is resolved by nng_listener_create: left to st_preflight_listen. */
		if (listen && host[0] != '\0' && !numeric_host(host)) {
			ok = true;
			goto done;
		}
	} else if (scheme_is(u->u_scheme, path_schemes)) {
		if (u->u_path[0] == '\0') {
			snprintf(why, cap, "needs a path or name after %s://", u->u_scheme);
			goto done;
		}
	} else {
		snprintf(
			why, cap,
			"scheme \"%.20s\" is not supported: tcp://, tls+tcp://, ipc://, inproc://, abstract:// or ws://",
			u->u_scheme);
		goto done;
	}
	if ((rv = nng_rep0_open(&s)) != 0) {
		snprintf(why, cap, "cannot check the URL: %s", nng_strerror(rv));
		goto done;
	}
	if (listen) {
		nng_listener l;
		rv = nng_listener_create(&l, s, url);
	} else {
		nng_dialer d;
		rv = nng_dialer_create(&d, s, url);
	}
	if (rv != 0) {
		snprintf(why, cap, "nng refuses it (%s); e.g. %s", nng_strerror(rv), example);
		goto done;
	}
	ok = true;
done:
	if (nng_socket_id(s) > 0)
		nng_close(s);
	nng_url_free(u);
	return ok;
}

bool
st_preflight_listen_url(const st_opt *o, char *why, size_t cap)
{
	return url_ok(o->sval, true, why, cap);
}

bool
st_preflight_dial_urls(const st_opt *o, char *why, size_t cap)
{
	char **items = NULL, sub[400];
	size_t n = st_config_split(o->sval, &items, ST_PREFLIGHT_MAX_DIAL + 1);
	bool ok = true;

	if (n == 0) {
		snprintf(why, cap, "needs at least one URL (e.g. tcp://writer:7451)");
		ok = false;
	} else if (n > ST_PREFLIGHT_MAX_DIAL) {
		snprintf(why, cap, "has more than %u URLs", ST_PREFLIGHT_MAX_DIAL);
		ok = false;
	}
	for (size_t i = 0; i < n && ok; i++) {
		if (!url_ok(items[i], false, sub, sizeof(sub))) {
			if (n == 1)
				snprintf(why, cap, "%s", sub);
			else
				snprintf(why, cap, "URL %zu (%.200s): %s", i + 1, items[i], sub);
			ok = false;
		}
	}
	for (size_t i = 0; i < n; i++)
		free(items[i]);
	free(items);
	return ok;
}

bool
st_preflight_http_addr(const st_opt *o, char *why, size_t cap)
{
	struct sockaddr_storage ss;
	int len = (int)sizeof(ss);

	if (http_listen_parse(o->sval, &ss, &len) == ST_OK)
		return true;
	snprintf(why, cap, "must be IPv4:PORT or [IPv6]:PORT, numeric, port 0..65535 (e.g. 0.0.0.0:8080)");
	return false;
}

/* ---- binding --------------------------------------------------------------- */

/* Binds and listens like st_http's listener; returns the fd or -1 with errno. */
static int
bind_http(const char *addr, bool shared, bool *bad_addr)
{
	struct sockaddr_storage ss;
	int len = (int)sizeof(ss), fd, on = 1, e;

	*bad_addr = false;
	if (http_listen_parse(addr, &ss, &len) != ST_OK) {
		*bad_addr = true;
		return -1;
	}
	if ((fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		return -1;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) == -1 ||
	    (shared && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on)) == -1) ||
	    bind(fd, (struct sockaddr *)&ss, (socklen_t)len) == -1 || listen(fd, 1) == -1) {
		e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

bool
st_preflight_listen_try(const st_preflight_addr *a, size_t n, char *line, size_t cap)
{
	nng_socket *socks = st_xcalloc(n ? n : 1, sizeof(*socks));
	int *fds = st_xcalloc(n ? n : 1, sizeof(*fds));
	char why[300] = "";
	size_t bad = n;

	for (size_t i = 0; i < n; i++)
		fds[i] = -1;
	for (size_t i = 0; i < n && bad == n; i++) {
		int rv;
		bool bad_addr;

		if (a[i].value == NULL || a[i].value[0] == '\0')
			continue;
		if (a[i].kind == ST_PREFLIGHT_NNG) {
			st_tls_role role = ST_TLS_CONTROL; /* binding only: any role's configuration would do */

			(void)st_tls_role_of(a[i].flag, &role);
			if ((rv = nng_rep0_open(&socks[i])) == 0)
				rv = st_tls_listen(socks[i], a[i].value, role);
			if (rv != 0) {
				snprintf(why, sizeof(why), "%s", nng_strerror(rv));
				bad = i;
			}
		} else if ((fds[i] = bind_http(a[i].value, a[i].kind == ST_PREFLIGHT_HTTP_SHARED, &bad_addr)) == -1) {
			snprintf(why, sizeof(why), "%s", bad_addr ? "not IPv4:PORT or [IPv6]:PORT" : strerror(errno));
			bad = i;
		}
	}
	for (size_t i = 0; i < n; i++) {
		if (nng_socket_id(socks[i]) > 0)
			nng_close(socks[i]);
		if (fds[i] != -1)
			close(fds[i]);
	}
	free(socks);
	free(fds);
	if (bad == n)
		return true;
	snprintf(line, cap, "--%s %s: cannot listen: %s", a[bad].flag, a[bad].value, why);
	return false;
}

void
st_preflight_listen(const char *prog, const st_preflight_addr *a, size_t n)
{
	char line[600];

	if (!st_preflight_listen_try(a, n, line, sizeof(line)))
		st_config_fail(prog, "%s", line);
}

bool
st_preflight_url_private(const char *url)
{
	nng_url *u = NULL;
	bool ok;

	if (st_tls_url(url))
		return true;
	if (nng_url_parse(&u, url) != 0)
		return false;
	if (!scheme_is(u->u_scheme, tcp_schemes)) {
		ok = true; /* ipc, inproc, abstract: this host's own */
	} else {
		const char *h = u->u_hostname ? u->u_hostname : "";
		struct in_addr a4;

		ok = strcmp(h, "localhost") == 0 || strcmp(h, "::1") == 0 ||
		     (inet_pton(AF_INET, h, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127);
	}
	nng_url_free(u);
	return ok;
}

/* Every URL of the program (found by its check) against what st_tls_load made. */
static void
tls_urls_check(const char *prog, const st_opt *o)
{
	bool listen = o->check == st_preflight_listen_url;
	st_tls_role role = ST_TLS_CONTROL; /* the edge's and the writer's only other listener */
	char **items = NULL;
	size_t n;

	if ((!listen && o->check != st_preflight_dial_urls) || o->sval == NULL || o->sval[0] == '\0')
		return;
	(void)st_tls_role_of(o->name, &role);
	n = st_config_split(o->sval, &items, ST_PREFLIGHT_MAX_DIAL + 1);
	for (size_t i = 0; i < n; i++) {
		const char *why = st_tls_url_usable(items[i], listen, role);

		if (why != NULL)
			st_config_fail(prog, "--%s %s: %s", o->name, items[i], why);
		/*
		 * The control socket drains and reloads: reachable from elsewhere
		 * only with TLS.  A warning was not enough (issue 25): anyone on the
		 * network could drain an edge whose operator missed one log line.
		 */
		if (listen && strcmp(o->name, "control") == 0 && !st_preflight_url_private(items[i]))
			st_config_fail(prog,
				       "--%s %s: a plain tcp control socket must listen on loopback (127.0.0.0/8, ::1, "
				       "localhost); use tls+tcp:// to reach it from other hosts",
				       o->name, items[i]);
		free(items[i]);
	}
	free(items);
}

static const char *
sval(const st_opt *o)
{
	return o != NULL ? o->sval : NULL;
}

void
st_preflight_tls(const char *prog, st_opt *opts, size_t n, const st_preflight_tls_opts *t)
{
	st_tls_files f = { .cert = sval(t->cert), .key = sval(t->key), .ca = sval(t->ca), .crl = sval(t->crl) };
	char why[600] = "";

	for (int i = 0; i < ST_TLS_ROLE_N; i++)
		f.role_ca[i] = sval(t->role_ca[i]);
	if (st_tls_load(&f, why, sizeof(why)) != ST_OK)
		st_config_fail(prog, "%s", why);
	for (size_t i = 0; i < n; i++)
		tls_urls_check(prog, &opts[i]);
}
