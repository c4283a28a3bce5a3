/*
 * iplimit: at most N open streams per client address (--max-streams-per-ip),
 * with the client address taken from X-Forwarded-For only when the
 * connection comes from a trusted proxy (--trusted-proxies CIDR,...).
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

typedef struct iplimit iplimit;

/*
 * max: streams per address (0: no limit, acquire always succeeds).
 * proxies: "CIDR[,CIDR...]" (IPv4 "10.0.0.0/8", IPv6 "fd00::/8", a bare
 * address is /32 or /128), NULL or "" for none.  On ST_EINVAL writes why.
 * Main thread, at start; the caller owns *out.
 */
st_err iplimit_new(uint32_t max, const char *proxies, iplimit **out, char *why, size_t cap);
void iplimit_free(iplimit *l); /* NULL-safe; after every loop stopped */

/* True when addr is in one of the trusted proxies' ranges.  Any thread. */
bool iplimit_trusted(const iplimit *l, const uint8_t addr[16]);

/*
 * The client's address: peer itself, unless peer is a trusted proxy and
 * xff (the X-Forwarded-For value, NULL when absent) names addresses; then
 * the rightmost address that is not a trusted proxy (each proxy appends
 * the address it saw, so entries left of an untrusted one are whatever the
 * client wrote), or the leftmost when every one is trusted.  An entry that
 * is not an address stops the walk at the last good hop.  Pure.
 */
void iplimit_client(const iplimit *l, const uint8_t peer[16], const char *xff, uint8_t out[16]);

/* Takes one of addr's slots; false when it holds max already.  Any thread. */
bool iplimit_acquire(iplimit *l, const uint8_t addr[16]);
/* Gives back a slot taken by iplimit_acquire.  Any thread. */
void iplimit_release(iplimit *l, const uint8_t addr[16]);
/* Addresses holding at least one slot now (tests, stats).  Any thread. */
size_t iplimit_addresses(iplimit *l);
bool iplimit_enabled(const iplimit *l);

/* Text of a 16-byte address ("1.2.3.4" or "2001:db8::1") for logs; buf of at least 46 bytes. */
const char *iplimit_addr_str(const uint8_t addr[16], char *buf, size_t cap);

#endif
