/*
 * st_pgdsn: parse once, build per connect.  The DSN's options are kept as
 * PQconninfoParse returned them; host and port lists are split once; each
 * st_pgdsn_params call rebuilds the host/hostaddr/port lists from the
 * addresses of that round (addresses change between reconnects: DNS of a
 * fail-over, a rescheduled pod).
 */
#include "st_pgdsn.h"

#include <arpa/inet.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "st_buf.h"
#include "st_resolve.h"
#include "st_util.h"

#define MAX_HOSTS 64u  /* entries of the DSN's host list */
#define MAX_EXTRA 32u

struct st_pgdsn {
	PQconninfoOption *opts;
	char *hosts[MAX_HOSTS];
	size_t n_hosts;
	char *ports[MAX_HOSTS];
	size_t n_ports;
	bool has_hostaddr;    /* the DSN chose its addresses itself */
	int name_of[MAX_HOSTS]; /* index into names, -1: not a name */
	const char *names[ST_RESOLVE_MAX_NAMES];
	size_t n_names;
	/* built by st_pgdsn_params */
	st_buf host_b, addr_b, port_b;
	const char **keys, **vals;
};

static const char *
opt_val(const st_pgdsn *d, const char *key)
{
	for (const PQconninfoOption *o = d->opts; o->keyword != NULL; o++)
		if (strcmp(o->keyword, key) == 0)
			return o->val;
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

st_err
st_pgdsn_parse(const char *dsn, st_pgdsn **out, char *err, size_t errlen)
{
	char *msg = NULL;
	PQconninfoOption *opts = PQconninfoParse(dsn, &msg);
	const char *host, *port, *hostaddr;
	st_pgdsn *d;

	if (opts == NULL) {
		snprintf(err, errlen, "bad DSN: %s", msg != NULL ? msg : "out of memory");
		for (char *p = err; *p != '\0'; p++)
			if (*p == '\n')
				*p = ' ';
		PQfreemem(msg);
		return ST_EINVAL;
	}
	d = st_xcalloc(1, sizeof(*d));
	d->opts = opts;
	st_buf_init(&d->host_b);
	st_buf_init(&d->addr_b);
	st_buf_init(&d->port_b);
	/* PQconninfoParse does not apply the environment; libpq's connect would */
	if ((host = opt_val(d, "host")) == NULL)
		host = getenv("PGHOST");
	if ((port = opt_val(d, "port")) == NULL)
		port = getenv("PGPORT");
	if ((hostaddr = opt_val(d, "hostaddr")) == NULL)
		hostaddr = getenv("PGHOSTADDR");
	d->has_hostaddr = hostaddr != NULL && hostaddr[0] != '\0';
	if ((host != NULL && !split(host, d->hosts, &d->n_hosts)) ||
	    (port != NULL && !split(port, d->ports, &d->n_ports))) {
		snprintf(err, errlen, "bad DSN: more than %u hosts or ports", MAX_HOSTS);
		st_pgdsn_free(d);
		return ST_EINVAL;
	}
	if (d->n_ports > 1 && d->n_ports != d->n_hosts) {
		snprintf(err, errlen, "bad DSN: %zu ports for %zu hosts", d->n_ports, d->n_hosts);
		st_pgdsn_free(d);
		return ST_EINVAL;
	}
	for (size_t i = 0; i < d->n_hosts; i++) {
		d->name_of[i] = -1;
		if (d->has_hostaddr || !is_name(d->hosts[i]))
			continue;
		for (size_t k = 0; k < d->n_names && d->name_of[i] < 0; k++)
			if (strcmp(d->names[k], d->hosts[i]) == 0)
				d->name_of[i] = (int)k;
		if (d->name_of[i] >= 0)
			continue;
		if (d->n_names == ST_RESOLVE_MAX_NAMES) {
			snprintf(err, errlen, "bad DSN: more than %u distinct host names", ST_RESOLVE_MAX_NAMES);
			st_pgdsn_free(d);
			return ST_EINVAL;
		}
		d->name_of[i] = (int)d->n_names;
		d->names[d->n_names++] = d->hosts[i];
	}
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
	for (size_t i = 0; i < d->n_ports; i++)
		free(d->ports[i]);
	PQconninfoFree(d->opts);
	st_buf_fini(&d->host_b);
	st_buf_fini(&d->addr_b);
	st_buf_fini(&d->port_b);
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

/* Appends one host entry to the three lists. */
static void
put_entry(st_pgdsn *d, size_t *n, const char *host, const char *addr, size_t addr_len, const char *port)
{
	if (*n > 0) {
		st_buf_putc(&d->host_b, ',');
		st_buf_putc(&d->addr_b, ',');
		st_buf_putc(&d->port_b, ',');
	}
	st_buf_puts(&d->host_b, host);
	st_buf_append(&d->addr_b, addr, addr_len);
	st_buf_puts(&d->port_b, port != NULL ? port : "");
	(*n)++;
}

static bool
overridden(const char *key, const char *const *extra_keys)
{
	for (size_t i = 0; extra_keys != NULL && extra_keys[i] != NULL; i++)
		if (strcmp(extra_keys[i], key) == 0)
			return true;
	return false;
}

st_err
st_pgdsn_params(st_pgdsn *d, const char *const *addrs, const char *const *extra_keys,
                const char *const *extra_vals, const char *const **keys, const char *const **vals)
{
	size_t n_opts = 0, n_extra = 0, k = 0, entries = 0;
	bool rebuilt = d->n_names > 0;

	for (const PQconninfoOption *o = d->opts; o->keyword != NULL; o++)
		n_opts++;
	while (extra_keys != NULL && extra_keys[n_extra] != NULL && n_extra < MAX_EXTRA)
		n_extra++;
	free(d->keys);
	free(d->vals);
	d->keys = st_xcalloc(n_opts + n_extra + 4, sizeof(*d->keys));
	d->vals = st_xcalloc(n_opts + n_extra + 4, sizeof(*d->vals));
	if (rebuilt) {
		st_buf_reset(&d->host_b);
		st_buf_reset(&d->addr_b);
		st_buf_reset(&d->port_b);
		for (size_t i = 0; i < d->n_hosts; i++) {
			const char *port = d->n_ports == 1 ? d->ports[0] : d->n_ports > 1 ? d->ports[i] : NULL;
			if (d->name_of[i] < 0) {
				put_entry(d, &entries, d->hosts[i], "", 0, port); /* "": libpq uses host as it is */
				continue;
			}
			for (const char *a = addrs[d->name_of[i]]; *a != '\0';) {
				size_t l = strcspn(a, ",");
				if (l > 0)
					put_entry(d, &entries, d->hosts[i], a, l, port);
				a += l + (a[l] == ',');
			}
		}
		if (entries == 0)
			return ST_EINVAL;
		st_buf_putc(&d->host_b, '\0');
		st_buf_putc(&d->addr_b, '\0');
		st_buf_putc(&d->port_b, '\0');
	}
	for (const PQconninfoOption *o = d->opts; o->keyword != NULL; o++) {
		if (o->val == NULL || overridden(o->keyword, extra_keys))
			continue;
		if (rebuilt && (strcmp(o->keyword, "host") == 0 || strcmp(o->keyword, "hostaddr") == 0 ||
		                strcmp(o->keyword, "port") == 0))
			continue;
		d->keys[k] = o->keyword;
		d->vals[k++] = o->val;
	}
	if (rebuilt) {
		d->keys[k] = "host";
		d->vals[k++] = d->host_b.p;
		d->keys[k] = "hostaddr";
		d->vals[k++] = d->addr_b.p;
		if (d->n_ports > 0) {
			d->keys[k] = "port";
			d->vals[k++] = d->port_b.p;
		}
	}
	for (size_t i = 0; i < n_extra; i++) {
		d->keys[k] = extra_keys[i];
		d->vals[k++] = extra_vals[i];
	}
	d->keys[k] = NULL;
	d->vals[k] = NULL;
	*keys = d->keys;
	*vals = d->vals;
	return ST_OK;
}
