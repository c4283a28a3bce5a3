/*
 * iplimit: at most N open streams per client address (--max-streams-per-ip),
 * with the client address taken from X-Forwarded-For / Forwarded only
 * when the connection comes from a trusted proxy (--trusted-proxies
 * CIDR,...), and IPv6 clients counted per --ipv6-prefix.
 *
 * Addresses are 16 bytes, IPv4 as ::ffff:a.b.c.d, so one table and one
 * CIDR matcher serve both families.
 *
 * Threads: one iplimit is shared by every loop of an edge (the bound is per
 * address for the whole edge, whichever loop took the connection); acquire
 * and release take a mutex for a hash lookup.  Parsing and client address
 * selection are pure.
 */
#ifndef EDGE_IPLIMIT_H
#define EDGE_IPLIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "st_err.h"

#define IPLIMIT_MAX_CIDRS 64
/* --ipv6-prefix bounds: shorter than /32 would put an ISP's customers in one bucket. */
#define IPLIMIT_V6_PREFIX_MIN 32
#define IPLIMIT_V6_PREFIX_DEFAULT 64

typedef struct iplimit iplimit;

/*
 * max: streams per address (0: no limit, acquire always succeeds).
 * proxies: "CIDR[,CIDR...]" (IPv4 "10.0.0.0/8", IPv6 "fd00::/8", a bare
 * address is /32 or /128), NULL or "" for none.  ipv6_prefix: IPv6
 * clients count per prefix of that length (IPLIMIT_V6_PREFIX_MIN..128).
 * On ST_EINVAL writes why.  Main thread, at start; the caller owns *out.
 */
st_err iplimit_new(uint32_t max, const char *proxies, unsigned ipv6_prefix, iplimit **out, char *why, size_t cap);
void iplimit_free(iplimit *l); /* NULL-safe; after every loop stopped */

/* True when addr is in one of the trusted proxies' ranges.  Any thread. */
bool iplimit_trusted(const iplimit *l, const uint8_t addr[16]);

/*
 * The hops a request's forwarding headers name, oldest first: a ring of
 * the last IPLIMIT_HOPS (n counts every hop pushed, so n > IPLIMIT_HOPS
 * means older ones were dropped).  ok[i] false: that hop is not an address
 * ("unknown", an obfuscated node, garbage).
 */
#define IPLIMIT_HOPS 16
typedef struct iplimit_hops {
	uint8_t addr[IPLIMIT_HOPS][16];
	bool ok[IPLIMIT_HOPS];
	size_t n;
} iplimit_hops;

/* Appends one hop (addr NULL: not an address).  Pure. */
void iplimit_hops_push(iplimit_hops *h, const uint8_t *addr);
/*
 * One X-Forwarded-For line: comma-separated nodes ("1.2.3.4",
 * "1.2.3.4:80", "2001:db8::1", "[2001:db8::1]:4711"); empty elements are
 * skipped; anything else is a hop that is not an address.  One pass, no
 * allocation, whatever the length.  Pure.
 */
void iplimit_xff_parse(const char *value, iplimit_hops *h);
/*
 * One Forwarded line (RFC 7239): each element is one hop, its for= node
 * (token or quoted-string, quoted-pairs understood, e.g.
 * for="[2001:db8::1]:4711"); an element without for=, with two, or whose
 * node is "unknown" or obfuscated ("_x") is a hop that is not an address;
 * a syntax error is one such hop and ends the line.  Pure.
 */
void iplimit_forwarded_parse(const char *value, iplimit_hops *h);

/*
 * The client's address: peer itself, unless peer is a trusted proxy and
 * the forwarding headers name addresses.  xff[0..n_xff) are the
 * X-Forwarded-For lines in order, fwd[0..n_fwd) the Forwarded lines: the
 * lines of one header are one list.  In each, the rightmost address that
 * is not a trusted proxy (each proxy appends the address it saw, so
 * entries left of an untrusted one are whatever the client wrote), or the
 * leftmost kept when every one is trusted; a hop that is not an address
 * stops the walk at the last good hop (the peer when it is the rightmost).
 * When both headers are present and name different clients, the peer
 * (one of the two was written by the client, and which cannot be told).
 * Pure.
 */
void iplimit_client(const iplimit *l, const uint8_t peer[16], const char *const *xff, size_t n_xff,
		    const char *const *fwd, size_t n_fwd, uint8_t out[16]);

/* The address a client counts under: IPv4 itself, IPv6 its --ipv6-prefix.  Pure. */
void iplimit_key(const iplimit *l, const uint8_t addr[16], uint8_t key[16]);

/* Takes one of the slots of client's key (iplimit_key); false when it holds max already.  Any thread. */
bool iplimit_acquire(iplimit *l, const uint8_t client[16]);
/* Gives back a slot taken by iplimit_acquire with the same client.  Any thread. */
void iplimit_release(iplimit *l, const uint8_t client[16]);
/* Addresses holding at least one slot now (tests, stats).  Any thread. */
size_t iplimit_addresses(iplimit *l);
bool iplimit_enabled(const iplimit *l);

/* Text of a 16-byte address ("1.2.3.4" or "2001:db8::1") for logs; buf of at least 46 bytes. */
const char *iplimit_addr_str(const uint8_t addr[16], char *buf, size_t cap);

#endif
