/*
 * studio-producer-example URLS TOPIC [COUNT]: publishes COUNT events (default
 * 3) to TOPIC, first as one batch with studio_publish, then one by one with
 * studio_publish_async (all in flight at once), and prints each seq.  The
 * example of docs/clients.md; build it against an installed library with
 *     cc example.c $(pkg-config --cflags --libs studio-producer)
 * (the shared library) or $(pkg-config --cflags --libs studio-producer-static)
 * (the archive).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>
#include <studio_producer.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int pending, failed;

/* On a library thread (never main's): record and return, never block. */
static void
done(void *arg, studio_status st, const uint64_t *seqs, size_t n, const char *detail)
{
	(void)n;
	pthread_mutex_lock(&mu);
	if (st == STUDIO_OK)
		printf("async event %d: seq %llu\n", (int)(long)arg, (unsigned long long)seqs[0]);
	else
		fprintf(stderr, "async event %d: %s: %s\n", (int)(long)arg, studio_status_str(st), detail), failed++;
	pending--;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
}

int
main(int argc, char **argv)
{
	studio_producer *p = NULL;
	int count = argc > 3 ? atoi(argv[3]) : 3;
	studio_event *ev;
	char(*data)[32];
	uint64_t *seqs;
	char why[512], base[STUDIO_KEY_BASE_MAX] = "";
	studio_status st;

	if (argc < 3 || count < 1 || count > 10000) {
		fprintf(stderr, "usage: %s URL[,URL...] TOPIC [COUNT 1..10000]\n", argv[0]);
		return 2;
	}
	if (studio_producer_new(argv[1], NULL, &p, why, sizeof(why)) != STUDIO_OK) {
		fprintf(stderr, "studio_producer_new: %s\n", why);
		return 2;
	}
	ev = calloc((size_t)count, sizeof(*ev));
	data = calloc((size_t)count, sizeof(*data));
	seqs = calloc((size_t)count, sizeof(*seqs));
	for (int i = 0; i < count; i++) {
		snprintf(data[i], sizeof(data[i]), "{\"n\":%d}", i);
		/* no key: BASE-i, so no retry ever stores an event twice */
		ev[i] = (studio_event){ STUDIO_EVENT_INIT, .topic = argv[2], .data = data[i] };
	}
	/* One request, committed or not within 30 s (busy and unavailable retried
	 * inside).  After STUDIO_TIMEOUT, calling again with the same base (the
	 * library wrote it there) sends the same keys: stored once, whatever
	 * the first call did. */
	for (int tries = 0; tries < 3; tries++)
		if ((st = studio_publish(p, ev, (size_t)count, base, seqs, 30000, why, sizeof(why))) != STUDIO_TIMEOUT)
			break;
	if (st != STUDIO_OK) {
		fprintf(stderr, "studio_publish: %s: %s\n", studio_status_str(st), why);
		failed++;
	}
	for (int i = 0; st == STUDIO_OK && i < count; i++)
		printf("batch event %d: seq %llu\n", i, (unsigned long long)seqs[i]);
	/* The same events again, one request each, all in flight at once. */
	for (int i = 0; i < count; i++) {
		pthread_mutex_lock(&mu);
		pending++;
		pthread_mutex_unlock(&mu);
		if (studio_publish_async(p, &ev[i], 1, NULL, 30000, 0, done, (void *)(long)i, why, sizeof(why)) !=
		    STUDIO_OK) {
			fprintf(stderr, "studio_publish_async: %s\n", why);
			pthread_mutex_lock(&mu);
			pending--, failed++;
			pthread_mutex_unlock(&mu);
		}
	}
	pthread_mutex_lock(&mu);
	while (pending > 0)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	studio_producer_flush(p, 30000); /* nothing is out any more: every callback ran */
	studio_producer_free(p);
	free(ev);
	free(data);
	free(seqs);
	return failed ? 1 : 0;
}
