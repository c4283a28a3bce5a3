/*
 * st_pgdsn: parse and check once, build per attempt.  The DSN's options are
 * kept as PQconninfoParse returned them; host, hostaddr and port lists are
 * split once; each round rebuilds the entries from that round's addresses
 * (addresses change between reconnects: DNS of a fail-over, a rescheduled
 * pod), and each attempt's parameters name one entry.
 */
#include "st_pgdsn.h"

#include <arpa/inet.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "st_resolve.h"
#include "st_util.h"

#define MAX_HOSTS 64u /* entries of the DSN's host list */
#define MAX_EXTRA 32u
#define MAX_ENTRIES (MAX_HOSTS * ST_RESOLVE_MAX_ADDRS)
#define ADDR_MAX 64u /* an IPv6 address with a zone fits */

struct entry {
	uint32_t host;       /* index into hosts/ports; MAX_HOSTS: the DSN names none */
	char addr[ADDR_MAX]; /* hostaddr, "" for none (a numeric host, a socket directory) */
};

struct st_pgdsn {
	PQconninfoOption *opts;
	char *hosts[MAX_HOSTS];
	size_t n_hosts;
	char *haddrs[MAX_HOSTS]; /* the DSN's own hostaddr list */
	size_t n_haddrs;
	char *ports[MAX_HOSTS];
	size_t n_ports;
	int name_of[MAX_HOSTS]; /* index into names, -1: not a name */
	const char *names[ST_RESOLVE_MAX_NAMES];
	size_t n_names;
	bool prefer_standby; /* two passes: standby, then any */
	/* the round */
	struct entry *entries; /* MAX_ENTRIES */
	size_t n_entries;
	/* built by st_pgdsn_params */
	const char **keys, **vals;
	size_t n_kv; /* capacity of keys and vals */
	char label[160];
};

const char *
st_pgdsn_option(const st_pgdsn *d, const char *key)
{
	for (const PQconninfoOption *o = d->opts; o->keyword != NULL; o++)
		if (strcmp(o->keyword, key) == 0)
			/* PQconninfoParse does not apply the environment; libpq's connect would */
			return o->val != NULL ? o->val : o->envvar != NULL ? getenv(o->envvar) : NULL;
	return NULL;
}

/* Splits s on commas into out[]; false when it has more than MAX_HOSTS entries. */
static bool
split(const char *s, char **out, size_t *n)
{
	*n = 0;
	for (;;) {
		size_t l = strcspn(s, ",");
		if (*n == MAX_HOSTS)
			return false;
		out[*n] = st_xcalloc(1, l + 1);
		memcpy(out[*n], s, l);
		(*n)++;
		if (s[l] == '\0')
			return true;
		s += l + 1;
	}
}

static bool
is_name(const char *h)
{
	unsigned char buf[16];

	if (h[0] == '\0' || h[0] == '/' || h[0] == '@')
		return false; /* default, or a Unix-socket directory / abstract socket */
	return inet_pton(AF_INET, h, buf) != 1 && inet_pton(AF_INET6, h, buf) != 1;
}

/* ---- what libpq 15 refuses only when it connects (fe-connect.c, connectOptions2) ---- */

struct enum_opt {
	const char *key;
	const char *const *allowed; /* NULL-terminated */
	const char *text;           /* the list, for the error line */
};

static const char *const sslmodes[] = { "disable", "allow", "prefer", "require", "verify-ca", "verify-full", NULL };
static const char *const three[] = { "disable", "prefer", "require", NULL };
static const char *const tsas[] = { "any", "read-write", "read-only", "primary", "standby", "prefer-standby", NULL };
static const char *const tlsvers[] = { "", "TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3", NULL };

static const struct enum_opt enum_opts[] = {
	{ "sslmode", sslmodes, "disable, allow, prefer, require, verify-ca, verify-full" },
	{ "gssencmode", three, "disable, prefer, require" },
	{ "channel_binding", three, "disable, prefer, require" },
	{ "target_session_attrs", tsas, "any, read-write, read-only, primary, standby, prefer-standby" },
	{ "ssl_min_protocol_version", tlsvers, "TLSv1, TLSv1.1, TLSv1.2, TLSv1.3" },
	{ "ssl_max_protocol_version", tlsvers, "TLSv1, TLSv1.1, TLSv1.2, TLSv1.3" },
};

static int
enum_index(const char *const *set, const char *v)
{
	for (int i = 0; set[i] != NULL; i++)
		if (strcmp(set[i], v) == 0)
			return i;
	return -1;
}

/* "5432" or "5432,5433" (one per host; an empty item means the default). */
static bool
ports_ok(const char *v)
{
	for (;;) {
		size_t len = strcspn(v, ",");
		uint64_t port;

		if (len > 0 && (st_parse_u64(v, len, &port) != ST_OK || port < 1 || port > 65535))
			return false;
		if (v[len] == '\0')
			return true;
		v += len + 1;
	}
}

static bool
options_ok(const st_pgdsn *d, char *err, size_t errlen)
{
	const char *v, *min, *max;
	uint64_t n;

	for (size_t i = 0; i < ST_ARRAY_LEN(enum_opts); i++)
		if ((v = st_pgdsn_option(d, enum_opts[i].key)) != NULL && enum_index(enum_opts[i].allowed, v) < 0) {
			snprintf(err, errlen, "%s \"%.40s\" is not one of %s", enum_opts[i].key, v, enum_opts[i].text);
			return false;
		}
	min = st_pgdsn_option(d, "ssl_min_protocol_version");
	max = st_pgdsn_option(d, "ssl_max_protocol_version");
	if (min != NULL && max != NULL && min[0] != '\0' && max[0] != '\0' &&
	    enum_index(tlsvers, min) > enum_index(tlsvers, max)) {
		snprintf(err, errlen, "ssl_max_protocol_version %s is below ssl_min_protocol_version %s", max, min);
		return false;
	}
	if ((v = st_pgdsn_option(d, "port")) != NULL && !ports_ok(v)) {
		snprintf(err, errlen, "port \"%.40s\" must be 1..65535 (one per host, comma separated)", v);
		return false;
	}
	if ((v = st_pgdsn_option(d, "connect_timeout")) != NULL && v[0] != '\0' &&
	    (st_parse_u64(v, strlen(v), &n) != ST_OK || n > 86400)) {
		snprintf(err, errlen, "connect_timeout \"%.40s\" must be a number of seconds (at most 86400)", v);
		return false;
	}
	return true;
}

static st_err
parse_fail(st_pgdsn *d, char *err, size_t errlen, const char *why)
{
	snprintf(err, errlen, "%s", why);
	st_pgdsn_free(d);
	return ST_EINVAL;
}

st_err
st_pgdsn_parse(const char *dsn, st_pgdsn **out, char *err, size_t errlen)
{
	char *msg = NULL, why[200];
	PQconninfoOption *opts = PQconninfoParse(dsn, &msg);
	const char *host, *port, *hostaddr, *tsa;
	size_t slots;
	st_pgdsn *d;

	if (opts == NULL) {
		snprintf(err, errlen, "not a libpq connection string (key=value ... or postgresql://...): %s",
			 msg != NULL ? msg : "out of memory");
		st_one_line(err);
		PQfreemem(msg);
		return ST_EINVAL;
	}
	d = st_xcalloc(1, sizeof(*d));
	d->opts = opts;
	host = st_pgdsn_option(d, "host");
	port = st_pgdsn_option(d, "port");
	hostaddr = st_pgdsn_option(d, "hostaddr");
	if ((host != NULL && host[0] != '\0' && !split(host, d->hosts, &d->n_hosts)) ||
	    (hostaddr != NULL && hostaddr[0] != '\0' && !split(hostaddr, d->haddrs, &d->n_haddrs)) ||
	    (port != NULL && port[0] != '\0' && !split(port, d->ports, &d->n_ports))) {
		snprintf(why, sizeof(why), "more than %u hosts, hostaddr values or ports", MAX_HOSTS);
		return parse_fail(d, err, errlen, why);
	}
	if (!options_ok(d, why, sizeof(why)))
		return parse_fail(d, err, errlen, why);
	if (d->n_hosts > 0 && d->n_haddrs > 0 && d->n_hosts != d->n_haddrs) {
		snprintf(why, sizeof(why), "%zu hostaddr values for %zu hosts (one per host)", d->n_haddrs, d->n_hosts);
		return parse_fail(d, err, errlen, why);
	}
	slots = d->n_hosts > d->n_haddrs ? d->n_hosts : d->n_haddrs;
	if (d->n_ports > 1 && d->n_ports != (slots > 0 ? slots : 1)) {
		snprintf(why, sizeof(why), "%zu ports for %zu hosts (one port for all, or one per host)", d->n_ports,
			 slots > 0 ? slots : 1);
		return parse_fail(d, err, errlen, why);
	}
	tsa = st_pgdsn_option(d, "target_session_attrs");
	d->prefer_standby = tsa != NULL && strcmp(tsa, "prefer-standby") == 0;
	for (size_t i = 0; i < d->n_hosts; i++) {
		d->name_of[i] = -1;
		if (d->n_haddrs > 0 || !is_name(d->hosts[i]))
			continue;
		for (size_t k = 0; k < d->n_names && d->name_of[i] < 0; k++)
			if (strcmp(d->names[k], d->hosts[i]) == 0)
				d->name_of[i] = (int)k;
		if (d->name_of[i] >= 0)
			continue;
		if (d->n_names == ST_RESOLVE_MAX_NAMES) {
			snprintf(why, sizeof(why), "more than %u distinct host names", ST_RESOLVE_MAX_NAMES);
			return parse_fail(d, err, errlen, why);
		}
		d->name_of[i] = (int)d->n_names;
		d->names[d->n_names++] = d->hosts[i];
	}
	d->entries = st_xcalloc(MAX_ENTRIES, sizeof(*d->entries));
	*out = d;
	return ST_OK;
}

void
st_pgdsn_free(st_pgdsn *d)
{
	if (d == NULL)
		return;
	for (size_t i = 0; i < d->n_hosts; i++)
		free(d->hosts[i]);
	for (size_t i = 0; i < d->n_haddrs; i++)
		free(d->haddrs[i]);
	for (size_t i = 0; i < d->n_ports; i++)
		free(d->ports[i]);
	PQconninfoFree(d->opts);
	free(d->entries);
	free(d->keys);
	free(d->vals);
	free(d);
}

size_t
st_pgdsn_names(const st_pgdsn *d, const char *const **names)
{
	*names = d->names;
	return d->n_names;
}

static void
entry_add(st_pgdsn *d, uint32_t host, const char *addr, size_t len)
{
	struct entry *e;

	if (d->n_entries == MAX_ENTRIES || len >= ADDR_MAX)
		return; /* MAX_HOSTS x ST_RESOLVE_MAX_ADDRS bounds a round; an address never exceeds ADDR_MAX */
	e = &d->entries[d->n_entries++];
	e->host = host;
	memcpy(e->addr, addr, len);
	e->addr[len] = '\0';
}

size_t
st_pgdsn_round(st_pgdsn *d, const char *const *addrs)
{
	size_t slots = d->n_hosts > d->n_haddrs ? d->n_hosts : d->n_haddrs;

	d->n_entries = 0;
	if (slots == 0)
		entry_add(d, MAX_HOSTS, "", 0); /* libpq's default host (a Unix socket) */
	for (size_t i = 0; i < slots; i++) {
		if (d->n_haddrs > 0) {
			entry_add(d, (uint32_t)i, d->haddrs[i], strlen(d->haddrs[i]));
			continue;
		}
		if (d->name_of[i] < 0) {
			entry_add(d, (uint32_t)i, "", 0); /* libpq uses host as it is */
			continue;
		}
		for (const char *a = addrs[d->name_of[i]]; *a != '\0';) {
			size_t l = strcspn(a, ",");
			if (l > 0)
				entry_add(d, (uint32_t)i, a, l);
			a += l + (a[l] == ',');
		}
	}
	return d->n_entries * (d->prefer_standby ? 2 : 1);
}

static bool
overridden(const char *key, const char *const *extra_keys)
{
	for (size_t i = 0; extra_keys != NULL && extra_keys[i] != NULL; i++)
		if (strcmp(extra_keys[i], key) == 0)
			return true;
	return false;
}

static const char *
entry_port(const st_pgdsn *d, const struct entry *e)
{
	if (d->n_ports == 1)
		return d->ports[0];
	return d->n_ports > 1 && e->host < d->n_ports ? d->ports[e->host] : NULL;
}

void
st_pgdsn_params(st_pgdsn *d, size_t i, const char *const *extra_keys, const char *const *extra_vals,
		const char *const **keys, const char *const **vals)
{
	const struct entry *e;
	size_t n_opts = 0, n_extra = 0, k = 0;
	const char *port;

	ST_ASSERT(d->n_entries > 0);
	e = &d->entries[i % d->n_entries];
	port = entry_port(d, e);
	for (const PQconninfoOption *o = d->opts; o->keyword != NULL; o++)
		n_opts++;
	while (extra_keys != NULL && extra_keys[n_extra] != NULL && n_extra < MAX_EXTRA)
		n_extra++;
	if (d->n_kv < n_opts + n_extra + 5) {
		d->n_kv = n_opts + n_extra + 5;
		free(d->keys);
		free(d->vals);
		d->keys = st_xcalloc(d->n_kv, sizeof(*d->keys));
		d->vals = st_xcalloc(d->n_kv, sizeof(*d->vals));
	}
	for (const PQconninfoOption *o = d->opts; o->keyword != NULL; o++) {
		if (o->val == NULL || overridden(o->keyword, extra_keys) || strcmp(o->keyword, "host") == 0 ||
		    strcmp(o->keyword, "hostaddr") == 0 || strcmp(o->keyword, "port") == 0)
			continue;
		if (d->prefer_standby && strcmp(o->keyword, "target_session_attrs") == 0)
			continue;
		d->keys[k] = o->keyword;
		d->vals[k++] = o->val;
	}
	if (e->host < d->n_hosts) {
		d->keys[k] = "host";
		d->vals[k++] = d->hosts[e->host];
	}
	if (e->addr[0] != '\0') {
		d->keys[k] = "hostaddr";
		d->vals[k++] = e->addr;
	}
	if (port != NULL) {
		d->keys[k] = "port";
		d->vals[k++] = port;
	}
	if (d->prefer_standby && !overridden("target_session_attrs", extra_keys)) {
		d->keys[k] = "target_session_attrs";
		d->vals[k++] = i < d->n_entries ? "standby" : "any";
	}
	for (size_t x = 0; x < n_extra; x++) {
		d->keys[k] = extra_keys[x];
		d->vals[k++] = extra_vals[x];
	}
	d->keys[k] = NULL;
	d->vals[k] = NULL;
	*keys = d->keys;
	*vals = d->vals;
}

const char *
st_pgdsn_label(st_pgdsn *d, size_t i)
{
	const struct entry *e = &d->entries[i % d->n_entries];
	const char *host = e->host < d->n_hosts ? d->hosts[e->host] : "(default host)";
	const char *port = entry_port(d, e);

	snprintf(d->label, sizeof(d->label), "%s%s%s%s port %s", host, e->addr[0] != '\0' ? " (" : "", e->addr,
		 e->addr[0] != '\0' ? ")" : "", port != NULL && port[0] != '\0' ? port : "(default)");
	return d->label;
}

uint32_t
st_pgdsn_attempt_ms(const st_pgdsn *d, uint32_t dflt_ms)
{
	const char *v = st_pgdsn_option(d, "connect_timeout");
	uint64_t s;

	if (v == NULL || v[0] == '\0' || st_parse_u64(v, strlen(v), &s) != ST_OK || s == 0)
		return dflt_ms;
	return (uint32_t)(s < 2 ? 2000 : s * 1000); /* checked at parse: at most 86400 s */
}
