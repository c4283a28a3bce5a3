/* prepipe_test: a real loopback connection accepted in this process is shut
 * down once it has been seen for the deadline, unless the caller knows it
 * as a pipe; the client sees end-of-file.  A hand-driven time. */
#include "prepipe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "st_test.h"

static bool
never(const prepipe_peer *peer, bool receiving, void *arg)
{
	(void)peer;
	(void)receiving;
	(void)arg;
	return false;
}

static bool
always(const prepipe_peer *peer, bool receiving, void *arg)
{
	(void)arg;
	(void)receiving;
	return peer->addr[10] == 0xff && peer->addr[12] == 127;
}

static void
t_shut_after_deadline_unless_pipe(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0), a;
	prepipe *p;
	char b;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ST_CHECK(bind(l, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(l, 4) == 0);
	ST_CHECK(getsockname(l, (struct sockaddr *)&sa, &len) == 0);
	ST_CHECK(connect(c, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	ST_CHECK((a = accept(l, NULL, NULL)) >= 0);
	p = prepipe_new(ntohs(sa.sin_port), 10000);
	ST_CHECK_EQ_U64(prepipe_sweep(p, 1000, never, NULL), 0);  /* first seen */
	ST_CHECK_EQ_U64(prepipe_sweep(p, 10999, never, NULL), 0);
	ST_CHECK_EQ_U64(prepipe_sweep(p, 11000, never, NULL), 1);
	ST_CHECK(recv(c, &b, 1, 0) == 0);                           /* the client sees EOF */
	close(a);                                                   /* as nng does on EOF */
	ST_CHECK_EQ_U64(prepipe_sweep(p, 12000, never, NULL), 0);
	prepipe_free(p);
	close(c);
	close(l);
}

static void
t_once_a_pipe_never_shut(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0), a;
	prepipe *p;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ST_CHECK(bind(l, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(l, 4) == 0);
	ST_CHECK(getsockname(l, (struct sockaddr *)&sa, &len) == 0);
	ST_CHECK(connect(c, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	ST_CHECK((a = accept(l, NULL, NULL)) >= 0);
	p = prepipe_new(ntohs(sa.sin_port), 10000);
	ST_CHECK_EQ_U64(prepipe_sweep(p, 1000, always, NULL), 0);
	/* the ingest dropped it from its table (closing it): still never shut here */
	ST_CHECK_EQ_U64(prepipe_sweep(p, 50000, never, NULL), 0);
	prepipe_free(p);
	close(a);
	close(c);
	close(l);
}

int
main(void)
{
	ST_RUN(t_shut_after_deadline_unless_pipe);
	ST_RUN(t_once_a_pipe_never_shut);
	return st_test_done();
}
