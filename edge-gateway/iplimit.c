/*
 * iplimit: streams per client address, and who the client is behind a
 * trusted proxy (see iplimit.h).
 *
 * DESIGN
 *
 * The table holds one entry per address with at least one open stream, so
 * its size is bounded by the edge's open streams (--max-streams), and an
 * entry is freed when its count returns to 0.  It is a fixed array of
 * buckets with chains, keyed by a hash of the 16 bytes seeded per process,
 * so a client cannot choose addresses that pile into one chain on every
 * edge.  One mutex guards it: a stream takes it twice in its life (open,
 * close), for a lookup in a short chain.
 *
 * X-Forwarded-For and Forwarded are only believed from a trusted proxy,
 * and read from the right: each proxy appends the address it received
 * from, so the rightmost entries are written by our own proxies and
 * anything left of the first untrusted address could be made up by the
 * client.  Every line of a header counts, in order (RFC 9110 5.3): a proxy
 * that adds its own line (HAProxy's option forwardfor) leaves the client's
 * forged line first, and reading only that one let a client pick its
 * address.  Parsing is left to right into a ring of the last IPLIMIT_HOPS
 * hops, so a value of thousands of entries costs one pass and no memory.
 *
 * IPv6 clients are counted per prefix (--ipv6-prefix, default /64): one
 * subscriber line gets a whole /64 and can use a fresh address per stream.
 */
#include "iplimit.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "st_clock.h"
#include "st_util.h"

#define IPLIMIT_BUCKETS 4096

typedef struct cidr {
	uint8_t net[16];
	unsigned bits; /* prefix length over the 16-byte form */
} cidr;

typedef struct entry {
	struct entry *next;
	uint8_t addr[16];
	uint32_t count;
} entry;

struct iplimit {
	uint32_t max;
	unsigned v6_bits; /* --ipv6-prefix: IPv6 clients count per prefix of this length */
	cidr proxies[IPLIMIT_MAX_CIDRS];
	size_t n_proxies;
	uint64_t seed;
	pthread_mutex_t mu; /* guards buckets and n_entries */
	entry *buckets[IPLIMIT_BUCKETS];
	size_t n_entries;
};

/* Text to the 16-byte form; false when it is not an IPv4 or IPv6 address. */
static bool
addr_parse(const char *s, size_t len, uint8_t out[16])
{
	char buf[64];
	struct in_addr a4;

	if (len == 0 || len >= sizeof(buf))
		return false;
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (inet_pton(AF_INET, buf, &a4) == 1) {
		memset(out, 0, 10);
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &a4, 4);
		return true;
	}
	return inet_pton(AF_INET6, buf, out) == 1;
}

static bool
is_v4(const uint8_t a[16])
{
	static const uint8_t prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return memcmp(a, prefix, 12) == 0;
}

const char *
iplimit_addr_str(const uint8_t addr[16], char *buf, size_t cap)
{
	if (is_v4(addr))
		inet_ntop(AF_INET, addr + 12, buf, (socklen_t)cap);
	else
		inet_ntop(AF_INET6, addr, buf, (socklen_t)cap);
	return buf;
}

static bool
cidr_parse(const char *s, size_t len, cidr *out)
{
	const char *slash = memchr(s, '/', len);
	size_t alen = slash ? (size_t)(slash - s) : len;
	unsigned bits = 0;

	if (!addr_parse(s, alen, out->net))
		return false;
	if (slash == NULL) {
		out->bits = 128;
	} else {
		size_t i = alen + 1;

		if (i == len || len - i > 3)
			return false;
		for (; i < len; i++) {
			if (s[i] < '0' || s[i] > '9')
				return false;
			bits = bits * 10 + (unsigned)(s[i] - '0');
		}
		if (bits > (is_v4(out->net) ? 32u : 128u))
			return false;
		out->bits = is_v4(out->net) ? 96 + bits : bits;
	}
	/* Host bits set ("10.0.0.1/8") are cleared: the range is what was meant. */
	for (unsigned b = out->bits; b < 128; b++)
		out->net[b / 8] &= (uint8_t) ~(0x80u >> (b % 8));
	return true;
}

static bool
cidr_has(const cidr *c, const uint8_t a[16])
{
	unsigned full = c->bits / 8, rest = c->bits % 8;

	if (memcmp(c->net, a, full) != 0)
		return false;
	return rest == 0 || ((a[full] ^ c->net[full]) & (uint8_t)(0xff00u >> rest)) == 0;
}

st_err
iplimit_new(uint32_t max, const char *proxies, unsigned ipv6_prefix, iplimit **out, char *why, size_t cap)
{
	iplimit *l = st_xcalloc(1, sizeof(*l));
	const char *p = proxies ? proxies : "", *c;
	size_t n;

	l->max = max;
	if (ipv6_prefix < IPLIMIT_V6_PREFIX_MIN || ipv6_prefix > 128) {
		snprintf(why, cap, "--ipv6-prefix %u: must be %d..128", ipv6_prefix, IPLIMIT_V6_PREFIX_MIN);
		goto fail;
	}
	l->v6_bits = ipv6_prefix;
	while (st_list_next(&p, &c, &n)) {
		if (l->n_proxies == IPLIMIT_MAX_CIDRS) {
			snprintf(why, cap, "at most %d ranges", IPLIMIT_MAX_CIDRS);
			goto fail;
		}
		if (!cidr_parse(c, n, &l->proxies[l->n_proxies])) {
			snprintf(why, cap, "\"%.*s\" is not ADDRESS or ADDRESS/BITS", (int)ST_MIN(n, 64), c);
			goto fail;
		}
		l->n_proxies++;
	}
	l->seed = st_clock_mono_ns() ^ (uint64_t)(uintptr_t)l ^ 0x9e3779b97f4a7c15u;
	pthread_mutex_init(&l->mu, NULL);
	*out = l;
	return ST_OK;
fail:
	free(l);
	return ST_EINVAL;
}

void
iplimit_free(iplimit *l)
{
	if (l == NULL)
		return;
	for (size_t i = 0; i < IPLIMIT_BUCKETS; i++) {
		entry *e, *next;

		for (e = l->buckets[i]; e; e = next) {
			next = e->next;
			free(e);
		}
	}
	pthread_mutex_destroy(&l->mu);
	free(l);
}

bool
iplimit_enabled(const iplimit *l)
{
	return l != NULL && l->max > 0;
}

bool
iplimit_trusted(const iplimit *l, const uint8_t addr[16])
{
	for (size_t i = 0; i < l->n_proxies; i++)
		if (cidr_has(&l->proxies[i], addr))
			return true;
	return false;
}

/*
 * One node of either header (RFC 7239 6, which X-Forwarded-For entries
 * also follow in practice): "1.2.3.4", "1.2.3.4:80", "[2001:db8::1]",
 * "[2001:db8::1]:4711", and a bare "2001:db8::1" (X-Forwarded-For writes
 * IPv6 without brackets).  A port may be obfuscated ("_x1"); the address
 * may not: "unknown" and "_hidden" are not addresses (false).
 */
static bool
port_ok(const char *p, size_t n)
{
	unsigned v = 0;

	if (n == 0)
		return false;
	if (p[0] == '_') {
		for (size_t i = 1; i < n; i++)
			if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'z') ||
			      (p[i] >= 'A' && p[i] <= 'Z') || p[i] == '.' || p[i] == '_' || p[i] == '-'))
				return false;
		return n > 1;
	}
	if (n > 5)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return false;
		v = v * 10 + (unsigned)(p[i] - '0');
	}
	return v <= 65535;
}

static bool
node_parse(const char *s, size_t n, uint8_t out[16])
{
	const char *colon;
	size_t colons = 0;

	if (n > 0 && s[0] == '[') {
		const char *close = memchr(s, ']', n);
		size_t alen, rest;

		if (close == NULL)
			return false;
		alen = (size_t)(close - s - 1);
		rest = n - alen - 2;
		if (rest > 0 && (close[1] != ':' || !port_ok(close + 2, rest - 1)))
			return false;
		/* Brackets hold IPv6 only (RFC 3986 3.2.2). */
		return memchr(s + 1, ':', alen) != NULL && addr_parse(s + 1, alen, out);
	}
	for (size_t i = 0; i < n; i++)
		colons += s[i] == ':';
	if (colons == 1) {
		colon = memchr(s, ':', n);
		if (!port_ok(colon + 1, n - (size_t)(colon - s) - 1))
			return false;
		n = (size_t)(colon - s);
		/* A port after an unbracketed address: IPv4 only. */
		return memchr(s, '.', n) != NULL && addr_parse(s, n, out);
	}
	return addr_parse(s, n, out);
}

void
iplimit_hops_push(iplimit_hops *h, const uint8_t *addr)
{
	size_t i = h->n % IPLIMIT_HOPS;

	h->ok[i] = addr != NULL;
	if (addr)
		memcpy(h->addr[i], addr, 16);
	else
		memset(h->addr[i], 0, 16);
	h->n++;
}

static bool
is_ows(char c)
{
	return c == ' ' || c == '\t';
}

void
iplimit_xff_parse(const char *v, iplimit_hops *h)
{
	const char *p = v;

	while (*p) {
		const char *start = p, *end;
		uint8_t a[16];
		size_t n;

		while (*p && *p != ',')
			p++;
		end = p;
		if (*p == ',')
			p++;
		while (start < end && is_ows(*start))
			start++;
		while (end > start && is_ows(end[-1]))
			end--;
		n = (size_t)(end - start);
		if (n == 0)
			continue; /* RFC 9110 5.6.1: empty list elements do not count */
		iplimit_hops_push(h, node_parse(start, n, a) ? a : NULL);
	}
}

/* RFC 9110 5.6.2 tchar. */
static bool
is_tchar(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/*
 * Forwarded (RFC 7239 4): elements separated by ',', pairs by ';', each
 * pair token "=" (token / quoted-string).  An element pushes one hop: its
 * for= address, or "not an address" when it has none, names "unknown" or
 * an obfuscated node, or repeats for=.  A syntax error pushes one bad hop
 * and ends the line: what follows it cannot be told apart, and the walk
 * then stops before it.  Quoted values longer than a node can be are
 * consumed but not copied (bounded by the buffer below).
 */
void
iplimit_forwarded_parse(const char *v, iplimit_hops *h)
{
	const char *p = v;

	for (;;) {
		bool any = false, has_for = false, ok = false;
		uint8_t a[16];

		for (;;) {
			char val[64];
			size_t nl = 0, vl = 0;
			const char *name;
			bool too_long = false;

			while (is_ows(*p))
				p++;
			if (*p == '\0' || *p == ',')
				break;
			if (*p == ';') {
				p++;
				continue;
			}
			name = p;
			while (is_tchar(*p))
				p++, nl++;
			if (nl == 0 || *p != '=')
				goto syntax;
			p++;
			if (*p == '"') {
				for (p++; *p != '"'; p++) {
					if (*p == '\0')
						goto syntax;
					if (*p == '\\' && *++p == '\0')
						goto syntax;
					if (vl < sizeof(val))
						val[vl++] = *p;
					else
						too_long = true;
				}
				p++;
			} else {
				/*
				 * RFC 7239 wants a port or brackets quoted; proxies
				 * configured as for=$remote_addr do not quote them,
				 * and their own entry is the one that counts.
				 */
				while (is_tchar(*p) || *p == ':' || *p == '[' || *p == ']') {
					if (vl < sizeof(val))
						val[vl++] = *p;
					else
						too_long = true;
					p++;
				}
				if (vl == 0)
					goto syntax;
			}
			while (is_ows(*p))
				p++;
			if (*p != '\0' && *p != ';' && *p != ',')
				goto syntax;
			any = true;
			if (nl == 3 && strncasecmp(name, "for", 3) == 0) {
				/* Two for= in one element: which hop is it?  Neither. */
				ok = !has_for && !too_long && node_parse(val, vl, a);
				has_for = true;
			}
		}
		if (any)
			iplimit_hops_push(h, has_for && ok ? a : NULL);
		if (*p == '\0')
			return;
		p++; /* ',' */
	}
syntax:
	iplimit_hops_push(h, NULL);
}

/*
 * From the right: the hop our proxy saw, then further left while the hops
 * are ours.  out starts as peer; a hop that is not an address stops the
 * walk at the last good one.  Only the last IPLIMIT_HOPS are kept: a chain
 * of more trusted proxies than that stops at the last one kept.
 */
static void
hops_walk(const iplimit *l, const iplimit_hops *h, const uint8_t peer[16], uint8_t out[16])
{
	size_t kept = h->n < IPLIMIT_HOPS ? h->n : IPLIMIT_HOPS;

	memcpy(out, peer, 16);
	for (size_t k = 0; k < kept; k++) {
		size_t i = (h->n - 1 - k) % IPLIMIT_HOPS;

		if (!h->ok[i])
			return;
		memcpy(out, h->addr[i], 16);
		if (!iplimit_trusted(l, h->addr[i]))
			return;
	}
}

void
iplimit_client(const iplimit *l, const uint8_t peer[16], const char *const *xff, size_t n_xff, const char *const *fwd,
	       size_t n_fwd, uint8_t out[16])
{
	iplimit_hops hx = { .n = 0 }, hf = { .n = 0 };
	uint8_t ax[16], af[16];

	memcpy(out, peer, 16);
	if (!iplimit_trusted(l, peer))
		return;
	for (size_t i = 0; i < n_xff; i++)
		iplimit_xff_parse(xff[i], &hx);
	for (size_t i = 0; i < n_fwd; i++)
		iplimit_forwarded_parse(fwd[i], &hf);
	hops_walk(l, &hx, peer, ax);
	hops_walk(l, &hf, peer, af);
	if (hf.n == 0)
		memcpy(out, ax, 16);
	else if (hx.n == 0 || memcmp(ax, af, 16) == 0)
		memcpy(out, af, 16);
	/*
	 * Both name someone, and not the same client: one of them was written
	 * by the client (a proxy writes one of the two), and we cannot tell
	 * which.  The request counts as the proxy's own: only requests that
	 * send both headers share that slot, so a client cannot spend a chosen
	 * victim's quota this way, nor escape its own.
	 */
}

void
iplimit_key(const iplimit *l, const uint8_t addr[16], uint8_t key[16])
{
	memcpy(key, addr, 16);
	if (is_v4(addr))
		return;
	for (unsigned b = l->v6_bits; b < 128; b++)
		key[b / 8] &= (uint8_t) ~(0x80u >> (b % 8));
}

/* FNV-1a over the 16 bytes, seeded: a chain's length is not the client's choice. */
static size_t
bucket_of(const iplimit *l, const uint8_t a[16])
{
	uint64_t h = 1469598103934665603ull ^ l->seed;

	for (int i = 0; i < 16; i++) {
		h ^= a[i];
		h *= 1099511628211ull;
	}
	h ^= h >> 29;
	return (size_t)(h % IPLIMIT_BUCKETS);
}

bool
iplimit_acquire(iplimit *l, const uint8_t client[16])
{
	uint8_t addr[16];
	size_t b;
	entry *e;
	bool ok = true;

	if (!iplimit_enabled(l))
		return true;
	iplimit_key(l, client, addr);
	b = bucket_of(l, addr);
	pthread_mutex_lock(&l->mu);
	for (e = l->buckets[b]; e; e = e->next)
		if (memcmp(e->addr, addr, 16) == 0)
			break;
	if (e == NULL) {
		e = st_xcalloc(1, sizeof(*e));
		memcpy(e->addr, addr, 16);
		e->next = l->buckets[b];
		l->buckets[b] = e;
		l->n_entries++;
	}
	if (e->count >= l->max)
		ok = false;
	else
		e->count++;
	pthread_mutex_unlock(&l->mu);
	return ok;
}

void
iplimit_release(iplimit *l, const uint8_t client[16])
{
	uint8_t addr[16];
	size_t b;
	entry **pp, *e;

	if (!iplimit_enabled(l))
		return;
	iplimit_key(l, client, addr);
	b = bucket_of(l, addr);
	pthread_mutex_lock(&l->mu);
	for (pp = &l->buckets[b]; (e = *pp) != NULL; pp = &e->next) {
		if (memcmp(e->addr, addr, 16) == 0) {
			ST_ASSERT(e->count > 0);
			if (--e->count == 0) {
				*pp = e->next;
				free(e);
				l->n_entries--;
			}
			break;
		}
	}
	pthread_mutex_unlock(&l->mu);
}

size_t
iplimit_addresses(iplimit *l)
{
	size_t n;

	pthread_mutex_lock(&l->mu);
	n = l->n_entries;
	pthread_mutex_unlock(&l->mu);
	return n;
}
