/*
 * producer_int: the layout of studio_producer, shared by the library's
 * own modules (producer.c makes and frees it; op.c, the request machine,
 * runs on it), as libevent keeps its structs in *_struct.h headers.  Hands
 * off elsewhere: users see only the opaque type.  Not installed, and not
 * exported: the libraries export studio_* only.
 */
#ifndef PRODUCER_INT_H
#define PRODUCER_INT_H

#include <nng/nng.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "options.h"
#include "st_dlist.h"
#include "studio_producer.h"

struct studio_producer {
	nng_socket *socks; /* n_urls, owned (dial_open) */
	char **urls;       /* n_urls, owned copies (for messages) */
	size_t n_urls;
	studio_options o;            /* defaults filled in; TLS paths not kept */
	uint8_t id[16];              /* this producer's key prefix */
	atomic_uint_fast64_t base_n; /* key bases made so far */
	atomic_uint_fast64_t rng;    /* splitmix64 state, when no random64 is given */
	atomic_size_t url_good;      /* where the last request succeeded: the next one starts there */
	pthread_mutex_t mu;
	pthread_cond_t cv;   /* on CLOCK_MONOTONIC: a slot freed, an op ended, a user left */
	size_t inflight;     /* under mu */
	size_t users;        /* under mu: API calls inside that may wait on p */
	size_t slot_waiters; /* under mu: calls waiting for a slot (tests read it) */
	bool closing;        /* under mu */
	st_dlink ops;        /* under mu: every op in flight (op.c's link) */
};

/* Now on p's clock, in ms. */
static inline uint64_t
producer_now_ms(const studio_producer *p)
{
	return options_now_ms(&p->o);
}

/*
 * Waits on p->cv, p->mu held, for at most ms.  The condition variable runs
 * on CLOCK_MONOTONIC (set at studio_producer_new), so a wall-clock step
 * neither cuts nor stretches the wait.  The callers loop and look again.
 */
static inline void
producer_wait_ms(studio_producer *p, uint64_t ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (ms > 24ull * 3600 * 1000)
		ms = 24ull * 3600 * 1000; /* the callers loop and look again */
	ts.tv_sec += (time_t)(ms / 1000);
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	(void)pthread_cond_timedwait(&p->cv, &p->mu, &ts);
}

/* Test hook: calls waiting for a slot now (a test waits for one before it frees the producer). */
size_t producer_slot_waiters(studio_producer *p);

#endif
