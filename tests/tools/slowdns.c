/*
 * slowdns: an LD_PRELOAD resolver hook for the slow-DNS test.
 *
 * getaddrinfo for a name ending in ".slow.test" waits STUDIO_SLOWDNS_MS
 * milliseconds (default 3000), as a resolver behind slow DNS would, then
 * answers as for 127.0.0.1 (the real getaddrinfo builds the answer, so the
 * real freeaddrinfo frees it).  Every other name goes to the real
 * getaddrinfo at once.  Numeric lookups (libpq's hostaddr) never wait.
 *
 * A name ending in ".dual.test" answers at once with two addresses, ::1
 * first and 127.0.0.1 second, as a dual-stack name does: with a server on
 * IPv4 only, the first address refuses and the second is the one to use.
 * Loaded into a program, it makes any synchronous resolution on an event
 * loop visible as a stall of that length.
 *
 * Plain builds only: a sanitizer runtime must come first in LD_PRELOAD.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int (*gai_fn)(const char *, const char *, const struct addrinfo *, struct addrinfo **);

static int
ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

int
getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res)
{
	static gai_fn real;
	gai_fn f = __atomic_load_n(&real, __ATOMIC_ACQUIRE);

	if (f == NULL) {
		f = (gai_fn)dlsym(RTLD_NEXT, "getaddrinfo");
		__atomic_store_n(&real, f, __ATOMIC_RELEASE);
	}
	if (node != NULL && ends_with(node, ".dual.test")) {
		struct addrinfo h, *v6 = NULL, *v4 = NULL, *last;
		int rc;

		memset(&h, 0, sizeof(h));
		if (hints != NULL)
			h = *hints;
		h.ai_flags = (h.ai_flags & ~AI_CANONNAME) | AI_NUMERICHOST;
		h.ai_family = AF_INET6;
		if ((rc = f("::1", service, &h, &v6)) != 0)
			return rc;
		h.ai_family = AF_INET;
		if ((rc = f("127.0.0.1", service, &h, &v4)) != 0) {
			freeaddrinfo(v6);
			return rc;
		}
		/* glibc's freeaddrinfo frees node by node, so two answers chain into one */
		for (last = v6; last->ai_next != NULL; last = last->ai_next)
			;
		last->ai_next = v4;
		*res = v6;
		return 0;
	}
	if (node != NULL && ends_with(node, ".slow.test")) {
		const char *env = getenv("STUDIO_SLOWDNS_MS");
		long ms = env != NULL ? atol(env) : 3000;
		struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
		struct addrinfo h;

		while (nanosleep(&ts, &ts) == -1)
			;
		memset(&h, 0, sizeof(h));
		if (hints != NULL)
			h = *hints;
		h.ai_family = AF_INET;
		h.ai_flags &= ~AI_CANONNAME;
		return f("127.0.0.1", service, &h, res);
	}
	return f(node, service, hints, res);
}
