/* Unit tests for st_resolve: answers arrive on the loop, never inside the call; cancel and free
 * while a lookup runs lose nothing and call nothing. */
#include "st_resolve.h"
#include "st_test.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <stdbool.h>
#include <string.h>

struct got {
	struct event_base *base;
	int calls;
	bool in_call;
	char addrs[2][256];
	char err[256];
};

static void
on_answer(void *arg, const char *const *addrs, size_t n, const char *err)
{
	struct got *g = arg;

	ST_CHECK(!g->in_call);
	g->calls++;
	for (size_t i = 0; i < n && i < 2; i++)
		snprintf(g->addrs[i], sizeof(g->addrs[i]), "%s", addrs[i]);
	snprintf(g->err, sizeof(g->err), "%s", err ? err : "");
	event_base_loopbreak(g->base);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg);

/* The mailbox's event is only made active, so the loop needs a pending event to keep waiting. */
static void
run(struct event_base *base, int ms)
{
	struct event *t = evtimer_new(base, on_timeout, base);
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	evtimer_add(t, &tv);
	event_base_dispatch(base);
	event_free(t);
}

static void
t_resolves(void)
{
	struct got g = { .base = event_base_new() };
	st_resolver *r = NULL;
	st_resolve_req *q = NULL;
	const char *names[] = { "localhost", "127.0.0.2" };

	ST_CHECK(st_resolver_new(g.base, &r) == ST_OK);
	g.in_call = true;
	ST_CHECK(st_resolver_lookup(r, names, 2, on_answer, &g, &q) == ST_OK);
	g.in_call = false;
	ST_CHECK_EQ_U64(g.calls, 0);
	run(g.base, 10000);
	ST_CHECK_EQ_U64(g.calls, 1);
	ST_CHECK(strstr(g.addrs[0], "127.0.0.1") != NULL || strstr(g.addrs[0], "::1") != NULL);
	ST_CHECK_STR(g.addrs[1], "127.0.0.2");
	ST_CHECK_STR(g.err, "");
	st_resolver_free(r);
	event_base_free(g.base);
}

/* A resolver set to keep one address per name keeps one (the edge sets 32 for writer names). */
static void
t_max_addrs(void)
{
	struct got g = { .base = event_base_new() };
	st_resolver *r = NULL;
	st_resolve_req *q = NULL;
	const char *names[] = { "localhost" };

	ST_CHECK(st_resolver_new(g.base, &r) == ST_OK);
	st_resolver_set_max_addrs(r, 1);
	ST_CHECK(st_resolver_lookup(r, names, 1, on_answer, &g, &q) == ST_OK);
	run(g.base, 10000);
	ST_CHECK_EQ_U64(g.calls, 1);
	ST_CHECK(g.addrs[0][0] != '\0' && strchr(g.addrs[0], ',') == NULL);
	st_resolver_free(r);
	event_base_free(g.base);
}

static void
t_fails(void)
{
	struct got g = { .base = event_base_new() };
	st_resolver *r = NULL;
	st_resolve_req *q = NULL;
	const char *names[] = { "no-such-host.invalid" };

	ST_CHECK(st_resolver_new(g.base, &r) == ST_OK);
	ST_CHECK(st_resolver_lookup(r, names, 1, on_answer, &g, &q) == ST_OK);
	run(g.base, 10000);
	ST_CHECK_EQ_U64(g.calls, 1);
	ST_CHECK_STR(g.addrs[0], "");
	ST_CHECK(strstr(g.err, "cannot resolve no-such-host.invalid") != NULL);
	ST_CHECK(st_resolver_lookup(r, names, 0, on_answer, &g, &q) == ST_EINVAL);
	st_resolver_free(r);
	event_base_free(g.base);
}

static void
on_timeout(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	event_base_loopbreak(arg);
}

/* A cancelled lookup never calls back; a resolver freed with lookups running returns at once. */
static void
t_cancel_and_free(void)
{
	struct got g = { .base = event_base_new() };
	st_resolver *r = NULL;
	st_resolve_req *q = NULL, *q2 = NULL;
	const char *names[] = { "localhost" };
	ST_CHECK(st_resolver_new(g.base, &r) == ST_OK);
	ST_CHECK(st_resolver_lookup(r, names, 1, on_answer, &g, &q) == ST_OK);
	st_resolve_cancel(q);
	run(g.base, 300);
	ST_CHECK_EQ_U64(g.calls, 0);
	ST_CHECK(st_resolver_lookup(r, names, 1, on_answer, &g, &q2) == ST_OK);
	st_resolver_free(r); /* q2's thread finishes on its own and frees what it holds */
	event_base_free(g.base);
	ST_CHECK_EQ_U64(g.calls, 0);
}

int
main(void)
{
	evthread_use_pthreads();
	ST_RUN(t_resolves);
	ST_RUN(t_max_addrs);
	ST_RUN(t_fails);
	ST_RUN(t_cancel_and_free);
	return st_test_done();
}
