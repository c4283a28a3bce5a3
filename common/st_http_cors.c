/*
 * st_http_cors: which origins the server answers with CORS headers, and
 * which cors_origins lists it accepts at all (http_cors_origins_check,
 * st_http.h: "null" and plain http:// off loopback are refused, so no
 * other site can pose as an allowed origin).  Preflights are answered by
 * the connection module (st_http.c) with these rules.
 */
#include "st_http_cors.h"

#include "st_http.h"
#include "st_util.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

bool
http_cors_match(const char *list, const char *origin)
{
	const char *p = list, *o;
	size_t n;

	if (!p || !origin || !*origin)
		return false;
	while (st_list_next(&p, &o, &n))
		if ((n == 1 && *o == '*') || (strlen(origin) == n && strncasecmp(origin, o, n) == 0))
			return true;
	return false;
}

/* True when host[0..n) is a loopback name an http:// origin may use. */
static bool
origin_host_loopback(const char *host, size_t n)
{
	static const char *const names[] = { "localhost", "127.0.0.1", "[::1]" };

	for (size_t i = 0; i < ST_ARRAY_LEN(names); i++)
		if (n == strlen(names[i]) && strncasecmp(host, names[i], n) == 0)
			return true;
	return false;
}

bool
http_cors_origins_check(const char *list, char *why, size_t cap)
{
	const char *p = list, *o;
	size_t n;

	while (st_list_next(&p, &o, &n)) {
		const char *host, *end = o + n, *colon;
		bool port_ok;

		if (n == 1 && *o == '*')
			continue;
		if (n == 4 && strncasecmp(o, "null", 4) == 0) {
			snprintf(why, cap,
				 "origin null is refused: sandboxed iframes, data: and file: pages all send it, "
				 "so any site could read");
			return false;
		}
		if (n > 8 && strncasecmp(o, "https://", 8) == 0)
			continue;
		if (n <= 7 || strncasecmp(o, "http://", 7) != 0) {
			snprintf(why, cap, "origin %.*s: must be https://HOST[:PORT] (or http:// on loopback)",
				 (int)ST_MIN(n, 200), o);
			return false;
		}
		/* http://HOST[:PORT], HOST a name, an IPv4 address or [IPv6]. */
		host = o + 7;
		if (*host == '[') {
			const char *rb = memchr(host, ']', (size_t)(end - host));

			colon = rb ? rb + 1 : end;
		} else {
			colon = memchr(host, ':', (size_t)(end - host));
			colon = colon ? colon : end;
		}
		port_ok = colon == end || (*colon == ':' && colon + 1 < end);
		for (const char *q = colon + 1; port_ok && q < end; q++)
			port_ok = *q >= '0' && *q <= '9';
		if (!port_ok || !origin_host_loopback(host, (size_t)(colon - host))) {
			snprintf(
				why, cap,
				"origin %.*s: plain http:// is refused except on loopback (localhost, 127.0.0.1, [::1]): "
				"anyone on the network can pose as it; use https://",
				(int)ST_MIN(n, 200), o);
			return false;
		}
	}
	return true;
}

void
http_cors_head_put(st_buf *b, const char *origin, bool credentials)
{
	/* Retry-After and Studio-Until are not CORS-safelisted response headers:
	 * without the expose line a cross-origin script could not read how long
	 * to wait, or the bound its until=head resolved to. */
	st_buf_printf(b,
		      "Access-Control-Allow-Origin: %s\r\nVary: Origin\r\n"
		      "Access-Control-Expose-Headers: Retry-After, Studio-Until\r\n",
		      origin);
	/* Only ever beside an echoed origin: never with a wildcard (Fetch standard, CORS protocol). */
	if (credentials)
		st_buf_puts(b, "Access-Control-Allow-Credentials: true\r\n");
}
