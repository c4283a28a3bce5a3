/*
 * libstudio-producer: publishes events to broker-writer and gets their seqs
 * back once they are committed, with the protocol's corners handled:
 *
 *  - every event gets an idempotency key when the caller gives none:
 *    KEY_BASE "-" INDEX (INDEX: the event's place in the request, decimal).
 *    The key base is made once per call (or given by the caller) and handed
 *    back, so every retry, the library's or the caller's, sends the same
 *    keys and the writer stores each event once (see docs/clients.md);
 *  - an event the writer would refuse is refused here, before anything is
 *    sent, by the writer's own validation code and with its words;
 *  - `busy` (the writer's buffer is full) is retried on the same writer
 *    after a back-off of 100 ms doubling to 5 s, half of it random;
 *  - `unavailable`, no reply within the try timeout, or no connection are
 *    retried on the next writer URL (after the same back-off);
 *  - all of that until the call's deadline; then STUDIO_TIMEOUT when any
 *    try was left unanswered (it may have been stored), else the last
 *    answer (STUDIO_BUSY, STUDIO_UNAVAILABLE; STUDIO_UNAVAILABLE too when
 *    no writer could be reached: nothing was stored).
 *
 * ABI: the options are opaque (set by name, studio_options_set), and
 * studio_event starts with its size (STUDIO_EVENT_INIT), so both can grow
 * without breaking a program built against an older header.  Only studio_*
 * names are exported, from the shared library and from the archive.
 *
 * Threads: every function may be called from any thread.  Callbacks of
 * studio_publish_async always run on one of the library's (nng's) threads,
 * never on the caller's: they must not block and must not call into the
 * producer.
 */
#ifndef STUDIO_PRODUCER_H
#define STUDIO_PRODUCER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The only names the libraries export (everything else is hidden or local). */
#if defined(__GNUC__)
#define STUDIO_API __attribute__((visibility("default")))
#else
#define STUDIO_API
#endif

/* The version of this header; studio_version() gives the library's. */
#define STUDIO_PRODUCER_VERSION "1.0.0"

/* The library's version, "MAJOR.MINOR.PATCH" (MAJOR is the soname's number). */
STUDIO_API const char *studio_version(void);

typedef enum studio_status {
	STUDIO_OK = 0,
	STUDIO_INVALID, /* an event breaks a rule: refused here (nothing sent) or by the writer; detail says which */
	STUDIO_BUSY,    /* every try was answered and the last said busy: nothing of it was stored */
	STUDIO_UNAVAILABLE, /* every try was answered and the last said unavailable, or no writer could be
	                       reached (no try left): nothing was stored */
	STUDIO_TIMEOUT,     /* the outcome is unknown (a try went out and was left unanswered): the events may
	                       or may not be stored; publishing them again with the same key base is safe
	                       (the writer stores each key once) */
	STUDIO_CLOSED,      /* the producer is being freed and nothing of the request was sent */
	STUDIO_USAGE,       /* bad arguments or options (a URL, a NULL, n out of 1..10000) */
	STUDIO_FULL,        /* max_inflight requests are out (STUDIO_NONBLOCK, or no slot in time): nothing sent */
	STUDIO_NOMEM,       /* out of memory (never an abort): nothing sent, except from a callback after a
	                       writer's reply could not be read: then the detail says "it may be stored" and
	                       names the key base to publish again with, as for STUDIO_TIMEOUT */
} studio_status;

/* A static name for a status ("ok", "invalid", "busy", ...). */
STUDIO_API const char *studio_status_str(studio_status st);

/*
 * One event.  Start every one with STUDIO_EVENT_INIT (it sets size), e.g.
 *     studio_event ev = { STUDIO_EVENT_INIT, .topic = "t", .data = "{}" };
 * Strings with a length of 0 are taken up to their NUL.
 */
typedef struct studio_event {
	size_t size;       /* sizeof(studio_event) of the caller's header: the library checks it */
	const char *topic; /* 1..200 bytes of [A-Za-z0-9._:/-] */
	size_t topic_len;
	const char *const *about; /* n_about (0..64) strings of 1..200 bytes of UTF-8, or NULL */
	const size_t *about_lens; /* NULL: each up to its NUL */
	size_t n_about;
	const char *data; /* one JSON text of at most 256 KiB; NULL: a change signal */
	size_t data_len;
	const char *key; /* idempotency key, 1..200 bytes of UTF-8; NULL: KEY_BASE-INDEX */
	size_t key_len;
} studio_event;

#define STUDIO_EVENT_INIT .size = sizeof(studio_event)

/*
 * Producer options, opaque, set by name (so new ones never change the
 * ABI).  Values are text; numbers are decimal and range-checked:
 *
 *   try_timeout_ms   1..2147483647  one try's wait for a reply before the next URL (10000)
 *   backoff_base_ms  1..2147483647  first wait after busy or unavailable (100)
 *   backoff_cap_ms   1..2147483647  longest wait, not below the base (5000)
 *   max_inflight     1..65536       requests in flight at once (64)
 *   keys             on|off         off: events without a key are sent without one (on)
 *   tls_ca, tls_cert, tls_key       PEM files for tls+tcp:// URLs: the CA that signs the
 *                                   writers, and this producer's certificate and key (the
 *                                   writers require one); read by studio_producer_new, and
 *                                   this producer's own (another producer may use others)
 *   token            a JWT          the producer token sent with every request (a writer with
 *                                   --ingest-keys requires one; docs/security.md); at most
 *                                   8192 bytes; "" unsets it.  Copied by studio_producer_new.
 *
 * studio_options_new returns NULL when out of memory.  studio_options_set
 * returns STUDIO_USAGE (with err) for an unknown name or a bad value.
 */
typedef struct studio_options studio_options;

STUDIO_API studio_options *studio_options_new(void);
STUDIO_API studio_status studio_options_set(studio_options *o, const char *name, const char *value, char *err,
					    size_t err_len);
STUDIO_API void studio_options_free(studio_options *o);
/*
 * A token that rotates: fn is asked before every try of every request
 * (a retry asks again), writes the token into buf[0..cap) and returns its
 * length (1..cap-1), or 0 or less when it has none (the request then ends
 * STUDIO_USAGE, or STUDIO_TIMEOUT when an earlier try may be stored).  It
 * wins over the option "token".  A request answered `unauthorized` is sent
 * again once, at once, with the function's next token (it may have expired
 * in flight).  Called on the caller's thread or on the
 * library's nng threads, possibly at once from several: it must be
 * thread-safe and quick (return a cached token; refresh it elsewhere).
 * NULL fn removes it.
 */
typedef int (*studio_token_fn)(void *arg, char *buf, size_t cap);
STUDIO_API studio_status studio_options_set_token_fn(studio_options *o, studio_token_fn fn, void *arg);

typedef struct studio_producer studio_producer;

/*
 * urls: one or more writer ingest URLs, comma separated (tcp://, tls+tcp://,
 * ipc://, and their tcp4/tcp6 forms).  opt may be NULL (the defaults); it
 * is copied, the caller frees it.  On an error, err (if not NULL) gets one
 * line and *out is NULL.  Dials in the background: a writer that is not up
 * yet is not an error.
 */
STUDIO_API studio_status studio_producer_new(const char *urls, const studio_options *opt, studio_producer **out,
					     char *err, size_t err_len);

/*
 * Checks events against the writer's rules without sending anything:
 * STUDIO_OK, or STUDIO_INVALID with the writer's reason in detail
 * ("event 3: topic: bad character").
 */
STUDIO_API studio_status studio_events_check(const studio_event *ev, size_t n, char *detail, size_t detail_len);

/*
 * The key base of a call: a buffer of STUDIO_KEY_BASE_MAX bytes, or NULL.
 * Empty on entry: the library makes a new base (`sp2-` + 32 hex digits of
 * the producer's random id + `-` + 16 hex digits of a counter) and writes
 * it there before anything is sent.  Not empty: that base is used (1..127
 * bytes of printable ASCII, no space).  Event i without a key of its own is
 * sent with the key BASE-i.  Calling again with the same buffer after
 * STUDIO_TIMEOUT therefore sends the same keys: an event already stored is
 * not stored again and its first seq comes back.  NULL: a base is made and
 * not reported (a republish after STUDIO_TIMEOUT may then store twice).
 * Ignored with keys=off.
 */
#define STUDIO_KEY_BASE_MAX 128

/*
 * Publishes ev[0..n) (1..10000 events, one request) and waits until they
 * are committed: STUDIO_OK and seqs_out[0..n) (may be NULL), in order.
 * timeout_ms bounds the whole call, retries included.  detail (may be NULL)
 * gets the reason of any other status.  Waits for a slot while
 * max_inflight requests are out (STUDIO_FULL if none frees in time).
 */
STUDIO_API studio_status studio_publish(studio_producer *p, const studio_event *ev, size_t n, char *key_base,
					uint64_t *seqs_out, uint32_t timeout_ms, char *detail, size_t detail_len);

/*
 * The callback of studio_publish_async: called exactly once, on a library
 * thread (never the caller's); seqs has n entries when st is STUDIO_OK
 * (valid during the call only); detail is a one-line reason otherwise.
 */
typedef void (*studio_publish_fn)(void *arg, studio_status st, const uint64_t *seqs, size_t n, const char *detail);

/* studio_publish_async flags: do not wait for a slot (STUDIO_FULL at once when none is free). */
#define STUDIO_NONBLOCK 1u

/*
 * Starts publishing ev[0..n) and returns; cb reports the end.  The events
 * are checked and encoded (and the key base written) before it returns
 * (the caller may free them).  Without STUDIO_NONBLOCK, waits for a slot
 * while max_inflight requests are in flight (at most timeout_ms).  Returns
 * STUDIO_OK when cb will be called, or the status (with detail) when it
 * will not: STUDIO_INVALID, STUDIO_USAGE, STUDIO_FULL, STUDIO_CLOSED,
 * STUDIO_NOMEM.
 */
STUDIO_API studio_status studio_publish_async(studio_producer *p, const studio_event *ev, size_t n, char *key_base,
					      uint32_t timeout_ms, unsigned flags, studio_publish_fn cb, void *arg,
					      char *detail, size_t detail_len);

/*
 * Waits until no request is in flight (every callback has returned):
 * STUDIO_OK, or STUDIO_TIMEOUT when some are still out after timeout_ms.
 */
STUDIO_API studio_status studio_producer_flush(studio_producer *p, uint32_t timeout_ms);

/*
 * Ends every request still in flight, closes the sockets and frees p.  A
 * request of which a try may have reached a writer ends STUDIO_TIMEOUT
 * (unknown: it may be stored; publish again with its key base), one that
 * never left ends STUDIO_CLOSED.  Their callbacks have returned when it
 * returns; calls blocked on p in other threads (waiting for a slot, for a
 * reply, in flush) return too (STUDIO_CLOSED, or the request's status);
 * a call that starts after free began is the caller's race (p may be gone).
 * Call studio_producer_flush first to let requests end on their own.
 * NULL-safe.
 */
STUDIO_API void studio_producer_free(studio_producer *p);

#ifdef __cplusplus
}
#endif

#endif
