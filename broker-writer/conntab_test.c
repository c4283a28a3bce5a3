/* conntab_test: the idle deadline (until the first request only), the
 * per-address and global caps, and displacement of the oldest connection
 * that has completed no request, with a hand-driven time. */
#include "conntab.h"

#include <string.h>

#include "st_test.h"

static conntab_addr
ip(unsigned char last)
{
	conntab_addr a = { .b = { 10, 0, 0, last }, .len = 4 };

	return a;
}

static void
t_idle_until_first_request(void)
{
	conntab *t = conntab_new(8, 8, 10000, 0);
	conntab_addr a = ip(1);
	uint32_t d, ids[8];

	ST_CHECK(conntab_admit(t, 1, &a, 1000, &d) == CONNTAB_ADMIT && d == 0);
	ST_CHECK(conntab_admit(t, 2, &a, 2000, &d) == CONNTAB_ADMIT && d == 0);
	conntab_seen(t, 2);
	ST_CHECK_EQ_U64(conntab_expired(t, 10999, 0, ids, 8), 0);
	ST_CHECK_EQ_U64(conntab_expired(t, 11000, 0, ids, 8), 1);
	ST_CHECK_EQ_U64(ids[0], 1);
	ST_CHECK_EQ_U64(conntab_count(t), 1);
	/* a connection past its first request never idles out */
	ST_CHECK_EQ_U64(conntab_expired(t, 1000000, 0, ids, 8), 0);
	conntab_remove(t, 2);
	conntab_remove(t, 77); /* unknown: ignored */
	ST_CHECK_EQ_U64(conntab_count(t), 0);
	conntab_free(t);
}

static void
t_per_address_cap_displaces_then_refuses(void)
{
	conntab *t = conntab_new(16, 2, 10000, 0);
	conntab_addr a = ip(1), b = ip(2);
	uint32_t d;

	ST_CHECK(conntab_admit(t, 1, &a, 100, &d) == CONNTAB_ADMIT);
	ST_CHECK(conntab_admit(t, 2, &a, 200, &d) == CONNTAB_ADMIT);
	/* a third from a: the oldest silent one from a (1) makes room */
	ST_CHECK(conntab_admit(t, 3, &a, 300, &d) == CONNTAB_ADMIT);
	ST_CHECK_EQ_U64(d, 1);
	ST_CHECK_EQ_U64(conntab_count(t), 2);
	conntab_seen(t, 2);
	conntab_seen(t, 3);
	/* every connection from a has sent a request: refused */
	ST_CHECK(conntab_admit(t, 4, &a, 400, &d) == CONNTAB_REFUSE_ADDR);
	/* another address is not affected */
	ST_CHECK(conntab_admit(t, 5, &b, 400, &d) == CONNTAB_ADMIT && d == 0);
	conntab_free(t);
}

static void
t_global_cap_displaces_oldest_silent(void)
{
	conntab *t = conntab_new(3, 3, 10000, 0);
	conntab_addr a = ip(1), b = ip(2), c = ip(3), local = { .len = 0 };
	uint32_t d;

	ST_CHECK(conntab_admit(t, 1, &a, 100, &d) == CONNTAB_ADMIT);
	ST_CHECK(conntab_admit(t, 2, &b, 50, &d) == CONNTAB_ADMIT);
	ST_CHECK(conntab_admit(t, 3, &c, 300, &d) == CONNTAB_ADMIT);
	conntab_seen(t, 1);
	ST_CHECK(conntab_admit(t, 4, &local, 400, &d) == CONNTAB_ADMIT);
	ST_CHECK_EQ_U64(d, 2); /* the oldest that sent nothing */
	conntab_seen(t, 3);
	conntab_seen(t, 4);
	ST_CHECK(conntab_admit(t, 5, &a, 500, &d) == CONNTAB_REFUSE_GLOBAL);
	ST_CHECK_EQ_U64(conntab_count(t), 3);
	conntab_free(t);
}

static void
t_no_address_is_not_capped_per_address(void)
{
	conntab *t = conntab_new(4, 1, 10000, 0);
	conntab_addr local = { .len = 0 };
	uint32_t d;

	for (uint32_t id = 1; id <= 4; id++) {
		ST_CHECK(conntab_admit(t, id, &local, id, &d) == CONNTAB_ADMIT);
		ST_CHECK_EQ_U64(d, 0);
		conntab_seen(t, id);
	}
	ST_CHECK(conntab_admit(t, 5, &local, 5, &d) == CONNTAB_REFUSE_GLOBAL);
	conntab_free(t);
}

static void
t_young_connections_are_not_displaced(void)
{
	conntab *t = conntab_new(2, 2, 10000, 1000);
	conntab_addr a = ip(1);
	uint32_t d;

	ST_CHECK(conntab_admit(t, 1, &a, 100, &d) == CONNTAB_ADMIT);
	ST_CHECK(conntab_admit(t, 2, &a, 600, &d) == CONNTAB_ADMIT);
	/* both younger than 1 s: a request may be on its way; the newcomer is refused */
	ST_CHECK(conntab_admit(t, 3, &a, 1099, &d) == CONNTAB_REFUSE_ADDR);
	ST_CHECK(conntab_admit(t, 4, &a, 1100, &d) == CONNTAB_ADMIT);
	ST_CHECK_EQ_U64(d, 1);
	conntab_free(t);
}

static conntab_addr
peer_of(unsigned char last, uint16_t port)
{
	conntab_addr a = ip(last);

	a.peer[10] = a.peer[11] = 0xff;
	memcpy(a.peer + 12, a.b, 4);
	a.peer[16] = (unsigned char)(port >> 8);
	a.peer[17] = (unsigned char)port;
	return a;
}

/*
 * Request bytes arriving restart the idle deadline from when they arrived,
 * and make the connection not displaceable; bytes within the margin of its
 * admission (its SP header, seen through a coarse clock) do neither.
 */
static void
t_request_bytes_restart_the_deadline(void)
{
	conntab *t = conntab_new(2, 2, 10000, 1000);
	conntab_addr a = peer_of(1, 5000), b = peer_of(1, 5001), other = peer_of(2, 5000);
	uint32_t d, ids[4];

	ST_CHECK(conntab_admit(t, 1, &a, 1000, &d) == CONNTAB_ADMIT);
	ST_CHECK(conntab_admit(t, 2, &b, 1000, &d) == CONNTAB_ADMIT);
	ST_CHECK(!conntab_peer(t, other.peer, 5000));                         /* not ours */
	ST_CHECK(conntab_peer(t, a.peer, 1000 + CONNTAB_DATA_MARGIN_MS - 1)); /* the header: no restart */
	ST_CHECK(conntab_peer(t, b.peer, 9000));                              /* b's request is arriving */
	ST_CHECK(conntab_peer(t, b.peer, 0));                                 /* unknown: changes nothing */
	/* past the cap: a (silent) is displaced, never b (receiving) */
	ST_CHECK(conntab_admit(t, 3, &other, 2500, &d) == CONNTAB_ADMIT);
	ST_CHECK_EQ_U64(d, 1);
	ST_CHECK(conntab_admit(t, 4, &other, 9500, &d) == CONNTAB_ADMIT);
	ST_CHECK_EQ_U64(d, 3);
	ST_CHECK_EQ_U64(conntab_expired(t, 18999, 0, ids, 4), 0);
	ST_CHECK_EQ_U64(conntab_expired(t, 19000, 0, ids, 4), 1); /* 10 s after b's last bytes */
	ST_CHECK_EQ_U64(ids[0], 2);
	conntab_free(t);
}

/*
 * Receivers all busy: a whole request can wait in nng with no byte
 * arriving (test_ingest_memory.py: 200 x 16 MiB under load closed 5 such
 * connections 10 s after their last byte, their requests complete).
 */
static void
t_a_busy_writer_stops_the_clock(void)
{
	conntab *t = conntab_new(8, 8, 10000, 0);
	conntab_addr a = peer_of(1, 5000), b = peer_of(1, 5001);
	uint32_t d, ids[4];

	ST_CHECK(conntab_admit(t, 1, &a, 1000, &d) == CONNTAB_ADMIT);
	ST_CHECK(conntab_admit(t, 2, &b, 1000, &d) == CONNTAB_ADMIT);
	ST_CHECK(conntab_peer(t, a.peer, 3000)); /* a's last request bytes */
	/* the receivers were busy until 8000: a's deadline is 18000, b's too */
	ST_CHECK_EQ_U64(conntab_expired(t, 17999, 8000, ids, 4), 0);
	conntab_seen(t, 1); /* a's request reached a receiver */
	ST_CHECK_EQ_U64(conntab_expired(t, 18000, 8000, ids, 4), 1);
	ST_CHECK_EQ_U64(ids[0], 2); /* b sent nothing: closed 10 s after the writer was free */
	ST_CHECK_EQ_U64(conntab_count(t), 1);
	conntab_free(t);
}

int
main(void)
{
	ST_RUN(t_a_busy_writer_stops_the_clock);
	ST_RUN(t_request_bytes_restart_the_deadline);
	ST_RUN(t_young_connections_are_not_displaced);
	ST_RUN(t_idle_until_first_request);
	ST_RUN(t_per_address_cap_displaces_then_refuses);
	ST_RUN(t_global_cap_displaces_oldest_silent);
	ST_RUN(t_no_address_is_not_capped_per_address);
	return st_test_done();
}
