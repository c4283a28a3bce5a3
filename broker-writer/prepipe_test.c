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
never(const prepipe_peer *peer, uint64_t data_at, void *arg)
{
	(void)peer;
	(void)data_at;
	(void)arg;
	return false;
}

static bool
always(const prepipe_peer *peer, uint64_t data_at, void *arg)
{
	(void)arg;
	(void)data_at;
	return peer->addr[10] == 0xff && peer->addr[12] == 127;
}

/* records data_at (arg: uint64_t *) and says "a pipe" */
static bool
record(const prepipe_peer *peer, uint64_t data_at, void *arg)
{
	(void)peer;
	*(uint64_t *)arg = data_at;
	return true;
}

/* Connects c to a fresh listener l; *a is the accepted end; returns the port. */
static uint16_t
pair(int *l, int *c, int *a)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);

	*l = socket(AF_INET, SOCK_STREAM, 0);
	*c = socket(AF_INET, SOCK_STREAM, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ST_CHECK(bind(*l, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(*l, 4) == 0);
	ST_CHECK(getsockname(*l, (struct sockaddr *)&sa, &len) == 0);
	ST_CHECK(connect(*c, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	ST_CHECK((*a = accept(*l, NULL, NULL)) >= 0);
	return ntohs(sa.sin_port);
}

/*
 * Bytes waiting unread make data_at the sweep's now (the writer is behind,
 * not the peer); once read, data_at is when they arrived: far in the past
 * of a sweep clock a day ahead, never after it.
 */
static void
t_data_at_unread_then_arrival(void)
{
	int l, c, a;
	uint64_t at = 1;
	char b[4];
	prepipe *p = prepipe_new(pair(&l, &c, &a), 10000);

	ST_CHECK(send(c, "abcd", 4, 0) == 4);
	for (int i = 0; i < 1000 && at != 86400000; i++) { /* loopback delivers at once; a busy machine may lag */
		ST_CHECK_EQ_U64(prepipe_sweep(p, 86400000, record, &at), 0);
		if (at != 86400000)
			usleep(1000);
	}
	ST_CHECK_EQ_U64(at, 86400000);
	ST_CHECK(recv(a, b, sizeof(b), 0) == 4);
	ST_CHECK_EQ_U64(prepipe_sweep(p, 86400000, record, &at), 0);
	ST_CHECK(at > 86400000 - 60000 && at <= 86400000); /* arrived a moment ago */
	prepipe_free(p);
	close(a);
	close(c);
	close(l);
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
	ST_CHECK_EQ_U64(prepipe_sweep(p, 1000, never, NULL), 0); /* first seen */
	ST_CHECK_EQ_U64(prepipe_sweep(p, 10999, never, NULL), 0);
	ST_CHECK_EQ_U64(prepipe_sweep(p, 11000, never, NULL), 1);
	ST_CHECK(recv(c, &b, 1, 0) == 0); /* the client sees EOF */
	close(a);                         /* as nng does on EOF */
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
	ST_RUN(t_data_at_unread_then_arrival);
	return st_test_done();
}
