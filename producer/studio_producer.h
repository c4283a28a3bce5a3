/*
 * libstudio-producer: publishes events to broker-writer and gets their seqs
 * back once they are committed, with the protocol's corners handled:
 *
 *  - every event gets an idempotency key when the caller gives none, made
 *    once per event and sent unchanged with every retry, so a retry never
 *    stores an event twice (see docs/clients.md for the key format and why
 *    it is unique);
 *  - an event the writer would refuse is refused here, before anything is
 *    sent, by the writer's own validation code and with its words;
 *  - `busy` (the writer's buffer is full) is retried on the same writer
 *    after a back-off of 100 ms doubling to 5 s, half of it random;
 *  - `unavailable`, no reply within the try timeout, or no connection are
 *    retried on the next writer URL (after the same back-off);
 *  - all of that until the call's deadline; then the last answer is
 *    returned (STUDIO_BUSY, STUDIO_UNAVAILABLE or STUDIO_TIMEOUT).
 *
 * nng REQ with one context per request in flight (many at once), one
 * socket and dialer per writer URL; tls+tcp:// URLs with the TLS options.
 *
 * Threads: every function may be called from any thread.  The callback of
 * studio_publish_async runs on one of nng's threads: it must not block and
 * must not call into the producer (it holds its request's slot until it
 * returns).
 */
#ifndef STUDIO_PRODUCER_H
#define STUDIO_PRODUCER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The shared library exports these names only (it is built with hidden visibility). */
#if defined(__GNUC__)
#define STUDIO_API __attribute__((visibility("default")))
#else
#define STUDIO_API
#endif

typedef enum studio_status {
	STUDIO_OK = 0,
	STUDIO_INVALID,     /* an event breaks a rule: refused here (nothing sent) or by the writer; detail says which */
	STUDIO_BUSY,        /* the deadline passed while the writers answered busy: nothing of it was stored */
	STUDIO_UNAVAILABLE, /* the deadline passed while the writers answered unavailable: nothing was stored */
	STUDIO_TIMEOUT,     /* the deadline passed without an answer: the events may or may not be stored;
	                       publishing them again (same keys) is safe */
	STUDIO_CLOSED,      /* the producer is being freed */
	STUDIO_USAGE,       /* bad arguments or options (a URL, a NULL, n out of 1..10000) */
} studio_status;

/* A static name for a status ("ok", "invalid", "busy", ...). */
STUDIO_API const char *studio_status_str(studio_status st);

/* One event.  Strings with a length of 0 are taken up to their NUL. */
typedef struct studio_event {
	const char *topic;         /* 1..200 bytes of [A-Za-z0-9._:/-] */
	size_t topic_len;
	const char *const *about;  /* n_about (0..64) strings of 1..200 bytes of UTF-8, or NULL */
	const size_t *about_lens;  /* NULL: each up to its NUL */
	size_t n_about;
	const char *data;          /* one JSON text of at most 256 KiB; NULL: a change signal */
	size_t data_len;
	const char *key;           /* idempotency key, 1..200 bytes of UTF-8; NULL: one is made */
	size_t key_len;
} studio_event;

typedef struct studio_producer_options {
	uint32_t try_timeout_ms;   /* one try's wait for a reply before the next URL (default 10000) */
	uint32_t backoff_base_ms;  /* first wait after busy or unavailable (default 100) */
	uint32_t backoff_cap_ms;   /* longest wait (default 5000) */
	uint32_t max_inflight;     /* requests in flight at once; more wait for a slot (default 64) */
	bool no_keys;              /* true: send events without a key as they are (no key is made) */
	/* PEM files for tls+tcp:// URLs: the CA that signs the writers, and this
	 * producer's certificate and key (the writers require one).  The TLS
	 * identity is the process's: NULL keeps one loaded already. */
	const char *tls_ca, *tls_cert, *tls_key;
	/* Tests: the clock (ms, monotonic) and the random source; NULL: the system's. */
	uint64_t (*clock_ms)(void *arg);
	uint64_t (*random64)(void *arg);
	void *test_arg;
} studio_producer_options;

typedef struct studio_producer studio_producer;

/*
 * urls: one or more writer ingest URLs, comma separated (tcp://, tls+tcp://,
 * ipc://).  opt may be NULL (the defaults).  On an error, err (if not NULL)
 * gets one line.  Dials in the background: a writer that is not up yet is
 * not an error.
 */
STUDIO_API studio_status studio_producer_new(const char *urls, const studio_producer_options *opt, studio_producer **out,
                                  char *err, size_t err_len);

/*
 * Checks events against the writer's rules without sending anything:
 * STUDIO_OK, or STUDIO_INVALID with the writer's reason in detail
 * ("event 3: topic: bad character").
 */
STUDIO_API studio_status studio_events_check(const studio_event *ev, size_t n, char *detail, size_t detail_len);

/*
 * Publishes ev[0..n) (1..10000 events, one request) and waits until they
 * are committed: STUDIO_OK and seqs_out[0..n) (may be NULL), in order.
 * timeout_ms bounds the whole call, retries included.  detail (may be NULL)
 * gets the reason of any other status.
 */
STUDIO_API studio_status studio_publish(studio_producer *p, const studio_event *ev, size_t n, uint64_t *seqs_out,
                             uint32_t timeout_ms, char *detail, size_t detail_len);

/*
 * The callback of studio_publish_async: called exactly once, on an nng
 * thread; seqs has n entries when st is STUDIO_OK (valid during the call
 * only); detail is a one-line reason otherwise.
 */
typedef void (*studio_publish_fn)(void *arg, studio_status st, const uint64_t *seqs, size_t n, const char *detail);

/*
 * Starts publishing ev[0..n) and returns; cb reports the end.  The events
 * are checked and encoded before it returns (the caller may free them).
 * Waits for a slot while max_inflight requests are in flight (at most
 * timeout_ms).  Returns STUDIO_OK when cb will be called, or the status
 * (with detail) when it will not: STUDIO_INVALID, STUDIO_USAGE,
 * STUDIO_TIMEOUT (no slot), STUDIO_CLOSED.
 */
STUDIO_API studio_status studio_publish_async(studio_producer *p, const studio_event *ev, size_t n, uint32_t timeout_ms,
                                   studio_publish_fn cb, void *arg, char *detail, size_t detail_len);

/*
 * Ends every request in flight with STUDIO_CLOSED (their callbacks run),
 * closes the sockets and frees p.  NULL-safe.
 */
STUDIO_API void studio_producer_free(studio_producer *p);

#ifdef __cplusplus
}
#endif

#endif
