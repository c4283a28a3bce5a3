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
 * X-Forwarded-For is only believed from a trusted proxy, and read from the
 * right: each proxy appends the address it received from, so the rightmost
 * entries are written by our own proxies and anything left of the first
 * untrusted address could be made up by the client.
 */
#include "iplimit.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
iplimit_new(uint32_t max, const char *proxies, iplimit **out, char *why, size_t cap)
{
	iplimit *l = st_xcalloc(1, sizeof(*l));
	const char *p = proxies ? proxies : "", *c;
	size_t n;

	l->max = max;
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

void
iplimit_client(const iplimit *l, const uint8_t peer[16], const char *xff, uint8_t out[16])
{
	size_t end;

	memcpy(out, peer, 16);
	if (xff == NULL || !iplimit_trusted(l, peer))
		return;
	/* From the right: the hop our proxy saw first, then further left while the hops are ours. */
	end = strlen(xff);
	for (;;) {
		size_t start = end, n;
		const char *item;
		uint8_t a[16];

		while (start > 0 && xff[start - 1] != ',')
			start--;
		item = xff + start;
		n = end - start;
		while (n && (*item == ' ' || *item == '\t'))
			item++, n--;
		while (n && (item[n - 1] == ' ' || item[n - 1] == '\t'))
			n--;
		if (n > 0) {
			if (!addr_parse(item, n, a))
				return; /* out holds the last good hop */
			memcpy(out, a, 16);
			if (!iplimit_trusted(l, a))
				return;
		}
		if (start == 0)
			return;
		end = start - 1;
	}
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
iplimit_acquire(iplimit *l, const uint8_t addr[16])
{
	size_t b;
	entry *e;
	bool ok = true;

	if (!iplimit_enabled(l))
		return true;
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
iplimit_release(iplimit *l, const uint8_t addr[16])
{
	size_t b;
	entry **pp, *e;

	if (!iplimit_enabled(l))
		return;
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
