/*
 * producer_drive: a producer on libstudio-producer, for test_producer_lib.py.
 *
 *   producer_drive URLS TOPIC COUNT BATCH INFLIGHT DATA_BYTES RATE TIMEOUT_MS
 *   producer_drive URLS --bad TOPIC
 *   producer_drive URLS --once TOPIC BASE TIMEOUT_MS TRY_TIMEOUT_MS BACKOFF_MS
 *   producer_drive URLS --free-pending TOPIC
 *   producer_drive URLS --tls-two TOPIC CA CERT KEY
 *   producer_drive URLS --tokens TOPIC TOKEN TOKEN_FILE
 *
 * Publishes COUNT requests of BATCH events each to TOPIC, without keys (the
 * library makes them), at most INFLIGHT at once, RATE requests a second
 * (0: as fast as the slots allow), each with TIMEOUT_MS for all its
 * retries.  An event's data is {"r":REQ,"i":INDEX,"pad":"x..."} of about
 * DATA_BYTES bytes.  Prints, on stdout, "seq REQ INDEX SEQ" for every
 * stored event, "fail REQ STATUS DETAIL" for a request that was not, and
 * "done OK FAILED" at the end (exit 0 when nothing failed).  --bad
 * publishes one event with the topic TOPIC and prints "refused STATUS
 * DETAIL" (the library's local check).
 *
 * --once publishes one event ({"once":true}) with studio_publish, key base
 * BASE ("-": made by the library), TIMEOUT_MS for the call, TRY_TIMEOUT_MS
 * a try, a back-off of exactly BACKOFF_MS; prints "result STATUS SEQ BASE"
 * and "detail DETAIL".  --free-pending starts one event with
 * studio_publish_async, prints "sent BASE", waits for a line on stdin,
 * frees the producer and prints "callback STATUS" and "detail DETAIL" (the
 * callback has run when free returns).  --tls-two makes producer A with
 * tls_ca CA, tls_cert CERT, tls_key KEY, then producer B with tls_ca only,
 * publishes one event with each (A, then B, then A again) and prints
 * "a STATUS", "b STATUS", "a2 STATUS": a TLS identity is its producer's.
 * --tokens publishes one event with the option token TOKEN ("static
 * STATUS SEQ DETAIL"), then, with a token function that reads TOKEN_FILE
 * at every call (one token a line: call K returns line K, the last line
 * once there are no more), one event ("fn1 ..."), waits for a line on
 * stdin (the test rotates the file and the writer's keys), one more ("fn2
 * ..."), and prints "calls N" (how often the function was asked).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "studio_producer.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static long pending, ok, failed;

static void
done(void *arg, studio_status st, const uint64_t *seqs, size_t n, const char *detail)
{
	long req = (long)arg;

	pthread_mutex_lock(&mu);
	if (st == STUDIO_OK) {
		for (size_t i = 0; i < n; i++)
			printf("seq %ld %zu %" PRIu64 "\n", req, i, seqs[i]);
		ok++;
	} else {
		printf("fail %ld %s %s\n", req, studio_status_str(st), detail);
		failed++;
	}
	fflush(stdout);
	pending--;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
}

static studio_status cb_st = STUDIO_USAGE;
static char cb_detail[600];

static void
record(void *arg, studio_status st, const uint64_t *seqs, size_t n, const char *detail)
{
	(void)arg, (void)seqs, (void)n;
	pthread_mutex_lock(&mu);
	cb_st = st;
	snprintf(cb_detail, sizeof(cb_detail), "%s", detail ? detail : "");
	pthread_mutex_unlock(&mu);
}

static int
once(const char *urls, const char *topic, const char *base_arg, long timeout_ms, const char *try_ms,
     const char *backoff_ms)
{
	studio_options *o = studio_options_new();
	studio_producer *p = NULL;
	studio_event ev = { STUDIO_EVENT_INIT, .topic = topic, .data = "{\"once\":true}" };
	char err[600], base[STUDIO_KEY_BASE_MAX] = "";
	uint64_t seq = 0;
	studio_status st;

	if (strcmp(base_arg, "-") != 0)
		snprintf(base, sizeof(base), "%s", base_arg);
	if (studio_options_set(o, "try_timeout_ms", try_ms, err, sizeof(err)) != STUDIO_OK ||
	    studio_options_set(o, "backoff_base_ms", backoff_ms, err, sizeof(err)) != STUDIO_OK ||
	    studio_options_set(o, "backoff_cap_ms", backoff_ms, err, sizeof(err)) != STUDIO_OK ||
	    studio_producer_new(urls, o, &p, err, sizeof(err)) != STUDIO_OK) {
		fprintf(stderr, "producer_drive: %s\n", err);
		return 2;
	}
	studio_options_free(o);
	st = studio_publish(p, &ev, 1, base, &seq, (uint32_t)timeout_ms, err, sizeof(err));
	printf("result %s %" PRIu64 " %s\ndetail %s\n", studio_status_str(st), seq, base, st == STUDIO_OK ? "" : err);
	fflush(stdout);
	studio_producer_free(p);
	return 0;
}

static int
free_pending(const char *urls, const char *topic)
{
	studio_producer *p = NULL;
	studio_event ev = { STUDIO_EVENT_INIT, .topic = topic, .data = "{\"pending\":true}" };
	char err[600], base[STUDIO_KEY_BASE_MAX] = "", line[64];

	if (studio_producer_new(urls, NULL, &p, err, sizeof(err)) != STUDIO_OK) {
		fprintf(stderr, "producer_drive: %s\n", err);
		return 2;
	}
	if (studio_publish_async(p, &ev, 1, base, 600000, 0, record, NULL, err, sizeof(err)) != STUDIO_OK) {
		fprintf(stderr, "producer_drive: %s\n", err);
		return 2;
	}
	printf("sent %s\n", base);
	fflush(stdout);
	if (fgets(line, sizeof(line), stdin) == NULL)
		fprintf(stderr, "producer_drive: stdin closed, freeing now\n");
	studio_producer_free(p);
	pthread_mutex_lock(&mu);
	printf("callback %s\ndetail %s\n", studio_status_str(cb_st), cb_detail);
	pthread_mutex_unlock(&mu);
	return 0;
}

static long token_calls;

static int
token_from_file(void *arg, char *buf, size_t cap)
{
	FILE *f = fopen(arg, "r");
	long k = __atomic_fetch_add(&token_calls, 1, __ATOMIC_SEQ_CST);
	size_t n = 0;

	if (f == NULL)
		return 0;
	/* line k, or the last one */
	for (long i = 0; i <= k && fgets(buf, (int)cap, f) != NULL; i++)
		n = strlen(buf);
	fclose(f);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		n--;
	return (int)n;
}

static void
token_publish(studio_producer *p, const char *what, const char *topic)
{
	studio_event ev = { STUDIO_EVENT_INIT, .topic = topic, .data = "{\"token\":true}" };
	char err[600] = "";
	uint64_t seq = 0;
	studio_status st = studio_publish(p, &ev, 1, NULL, &seq, 20000, err, sizeof(err));

	printf("%s %s %" PRIu64 " %s\n", what, studio_status_str(st), seq, st == STUDIO_OK ? "" : err);
	fflush(stdout);
}

static int
tokens(const char *urls, const char *topic, const char *token, const char *file)
{
	studio_options *o = studio_options_new();
	studio_producer *p = NULL;
	char err[600], line[64];

	if (o == NULL || studio_options_set(o, "token", token, err, sizeof(err)) != STUDIO_OK ||
	    studio_producer_new(urls, o, &p, err, sizeof(err)) != STUDIO_OK) {
		fprintf(stderr, "producer_drive: %s\n", err);
		return 2;
	}
	token_publish(p, "static", topic);
	studio_producer_free(p);
	p = NULL;
	/* the function wins over the option, which stays set */
	if (studio_options_set_token_fn(o, token_from_file, (void *)file) != STUDIO_OK ||
	    studio_producer_new(urls, o, &p, err, sizeof(err)) != STUDIO_OK) {
		fprintf(stderr, "producer_drive: %s\n", err);
		return 2;
	}
	studio_options_free(o);
	token_publish(p, "fn1", topic);
	if (fgets(line, sizeof(line), stdin) == NULL)
		fprintf(stderr, "producer_drive: stdin closed, going on\n");
	token_publish(p, "fn2", topic);
	printf("calls %ld\n", __atomic_load_n(&token_calls, __ATOMIC_SEQ_CST));
	fflush(stdout);
	studio_producer_free(p);
	return 0;
}

static studio_producer *
tls_producer(const char *urls, const char *ca, const char *cert, const char *key)
{
	studio_options *o = studio_options_new();
	studio_producer *p = NULL;
	char err[600];

	if (studio_options_set(o, "tls_ca", ca, err, sizeof(err)) != STUDIO_OK ||
	    (cert != NULL && studio_options_set(o, "tls_cert", cert, err, sizeof(err)) != STUDIO_OK) ||
	    (key != NULL && studio_options_set(o, "tls_key", key, err, sizeof(err)) != STUDIO_OK) ||
	    studio_producer_new(urls, o, &p, err, sizeof(err)) != STUDIO_OK) {
		fprintf(stderr, "producer_drive: %s\n", err);
		exit(2);
	}
	studio_options_free(o);
	return p;
}

static int
tls_two(const char *urls, const char *topic, const char *ca, const char *cert, const char *key)
{
	studio_producer *a = tls_producer(urls, ca, cert, key), *b = tls_producer(urls, ca, NULL, NULL);
	studio_event ev = { STUDIO_EVENT_INIT, .topic = topic, .data = "{}" };
	char d[600];

	printf("a %s\n", studio_status_str(studio_publish(a, &ev, 1, NULL, NULL, 20000, d, sizeof(d))));
	printf("b %s\n", studio_status_str(studio_publish(b, &ev, 1, NULL, NULL, 2000, d, sizeof(d))));
	printf("a2 %s\n", studio_status_str(studio_publish(a, &ev, 1, NULL, NULL, 20000, d, sizeof(d))));
	studio_producer_free(b);
	studio_producer_free(a);
	return 0;
}

static void
pace(struct timespec *start, long i, long rate)
{
	struct timespec t;

	if (rate <= 0)
		return;
	t.tv_sec = start->tv_sec + i / rate;
	t.tv_nsec = start->tv_nsec + (long)((i % rate) * (1000000000L / rate));
	if (t.tv_nsec >= 1000000000L) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000L;
	}
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) != 0)
		;
}

int
main(int argc, char **argv)
{
	studio_producer *p = NULL;
	studio_options *o = NULL;
	char err[600];
	long count, batch, rate, data_bytes;
	uint32_t timeout_ms;
	struct timespec start;

	if (argc == 4 && strcmp(argv[2], "--bad") == 0) {
		studio_event ev = { STUDIO_EVENT_INIT, .topic = argv[3] };
		studio_status st = studio_events_check(&ev, 1, err, sizeof(err));

		printf("refused %s %s\n", studio_status_str(st), st == STUDIO_OK ? "" : err);
		return 0;
	}
	if (argc == 8 && strcmp(argv[2], "--once") == 0)
		return once(argv[1], argv[3], argv[4], atol(argv[5]), argv[6], argv[7]);
	if (argc == 7 && strcmp(argv[2], "--tls-two") == 0)
		return tls_two(argv[1], argv[3], argv[4], argv[5], argv[6]);
	if (argc == 4 && strcmp(argv[2], "--free-pending") == 0)
		return free_pending(argv[1], argv[3]);
	if (argc == 6 && strcmp(argv[2], "--tokens") == 0)
		return tokens(argv[1], argv[3], argv[4], argv[5]);
	if (argc != 9) {
		fprintf(stderr, "usage: producer_drive URLS TOPIC COUNT BATCH INFLIGHT DATA_BYTES RATE TIMEOUT_MS\n");
		return 2;
	}
	count = atol(argv[3]);
	batch = atol(argv[4]);
	o = studio_options_new();
	data_bytes = atol(argv[6]);
	rate = atol(argv[7]);
	timeout_ms = (uint32_t)atol(argv[8]);
	if (studio_options_set(o, "max_inflight", argv[5], err, sizeof(err)) != STUDIO_OK ||
	    studio_producer_new(argv[1], o, &p, err, sizeof(err)) != STUDIO_OK) {
		fprintf(stderr, "producer_drive: %s\n", err);
		return 2;
	}
	studio_options_free(o);
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (long r = 0; r < count; r++) {
		studio_event *ev = calloc((size_t)batch, sizeof(*ev));
		char **data = calloc((size_t)batch, sizeof(*data));
		studio_status st;

		for (long i = 0; i < batch; i++) {
			size_t pad = data_bytes > 64 ? (size_t)data_bytes - 64 : 1;

			data[i] = malloc(pad + 80);
			int len = snprintf(data[i], 64, "{\"r\":%ld,\"i\":%ld,\"pad\":\"", r, i);
			memset(data[i] + len, 'x', pad);
			strcpy(data[i] + len + pad, "\"}");
			ev[i] = (studio_event){ STUDIO_EVENT_INIT, .topic = argv[2], .data = data[i] };
		}
		pace(&start, r, rate);
		pthread_mutex_lock(&mu);
		pending++;
		pthread_mutex_unlock(&mu);
		/* waits for a slot when INFLIGHT are out; the events are copied before it returns */
		st = studio_publish_async(p, ev, (size_t)batch, NULL, timeout_ms, 0, done, (void *)r, err, sizeof(err));
		if (st != STUDIO_OK) {
			pthread_mutex_lock(&mu);
			printf("fail %ld %s %s\n", r, studio_status_str(st), err);
			failed++;
			pending--;
			pthread_mutex_unlock(&mu);
		}
		for (long i = 0; i < batch; i++)
			free(data[i]);
		free(data);
		free(ev);
	}
	pthread_mutex_lock(&mu);
	while (pending > 0)
		pthread_cond_wait(&cv, &mu);
	printf("done %ld %ld\n", ok, failed);
	pthread_mutex_unlock(&mu);
	studio_producer_free(p);
	return failed ? 1 : 0;
}
