/*
 * libstudio-producer (studio_producer.h).
 *
 * DESIGN
 * A producer owns one nng req0 socket per writer URL (each with its own
 * dialer, dialing in the background, and its own TLS configuration) and a
 * set of requests in flight.  A request is checked and encoded once, on the
 * caller's thread, by the writer's own code (proto/wire.c: encode, then
 * decode as the writer will, so the rules and the words of a refusal are
 * the writer's); events without a key get BASE-INDEX first, the base made
 * here or given by the caller and handed back, so every try (ours, and the
 * caller's next call with the same base) carries the same keys.  Then one
 * state machine per request runs on nng's aio callbacks, never on the
 * caller's thread (the first step is a zero sleep on the request's aio):
 *
 *     SEND --sent--> RECV --ok--> done (STUDIO_OK)
 *       |              |--invalid--> done (STUDIO_INVALID)
 *       |              |--busy--> WAIT (back-off) --> SEND, same URL
 *       |              |--unavailable--> WAIT (back-off) --> SEND, next URL
 *       |              '--no reply in try_timeout, bad reply--> SEND, next URL
 *       '--no connection in try_timeout--> SEND, next URL
 *
 * Every step first checks the deadline.  Past it the request ends
 * STUDIO_TIMEOUT when any try went out and was never answered (o->unanswered:
 * that try may sit in a writer's pending batch and be committed later, so
 * "nothing stored" would be a lie even if every later try heard busy), else
 * with the last answer (busy, unavailable), or STUDIO_UNAVAILABLE when no
 * try ever left (no connection: a failed nng send hands the message back).  A try that timed out closes its context, so a late reply to
 * it is dropped by nng and the next try is a new request on the wire (same
 * bytes, same keys: the writer stores each keyed event once however many
 * tries reach it).  studio_producer_free ends what is left by the same
 * rule: STUDIO_TIMEOUT (unknown) once a try went out, STUDIO_CLOSED only
 * when nothing did.
 *
 * Ownership: a request (struct op) is owned by its state machine from
 * start to its callback; it is on the producer's list (under mu) so that
 * studio_producer_free can cancel it.  nng forbids nng_aio_free inside a
 * callback, so a finished op's aio goes to nng_aio_reap.  Every API call
 * that may block on p counts itself in p->users (under mu), and free waits
 * for that count to drop to zero before p is gone, so a thread waiting for
 * a slot, a reply or a flush wakes to a live producer (and returns CLOSED).
 *
 * Memory: a request holds its encoded bytes (at most 16 MiB, the writer's
 * limit) and n seqs; at most max_inflight requests exist, so a producer
 * holds at most max_inflight x (16 MiB + 80 KiB) plus nng's buffers.
 * Out of memory is STUDIO_NOMEM, never an abort of the host program: this
 * file allocates with st_try_* only, and calls only the fallible forms of
 * the shared encoder and decoder (proto_request_try_encode,
 * proto_request_try_decode, proto_reply_try_decode; st_buf_try_*).  A
 * reply that cannot be decoded for memory ends the request STUDIO_NOMEM
 * with a detail saying it may be stored (and the key base to publish
 * again with).  producer_test fails each of these allocations in turn
 * (st_alloc_fail_arm) under ASan.
 */
#include "studio_producer.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "producer_int.h"
#include "st_buf.h"
#include "st_clock.h"
#include "st_pem.h"
#include "st_util.h"
#include "wire.h"

#define LIB_VERSION "1.0.0"
#define DEFAULT_TRY_TIMEOUT_MS 10000u
#define DEFAULT_BACKOFF_BASE_MS 100u
#define DEFAULT_BACKOFF_CAP_MS 5000u
#define DEFAULT_MAX_INFLIGHT 64u
#define MAX_INFLIGHT 65536u
#define MAX_URLS 64
#define MAX_PEM (64u * 1024)
/* A reply holds at most 10,000 seqs (~90 KB); anything larger is not ours. */
#define MAX_REPLY (1024u * 1024)
#define DETAIL_MAX 512
/* BASE "-" INDEX: at most 127 + 1 + 4 digits (index < 10,000) + NUL. */
#define KEY_MAX (STUDIO_KEY_BASE_MAX + 8)

enum op_state { OP_START, OP_SEND, OP_RECV, OP_WAIT };

/* What the last try heard, for the status at the deadline. */
enum op_heard { HEARD_NOTHING, HEARD_BUSY, HEARD_UNAVAILABLE };

typedef struct op op;

struct studio_options {
	uint32_t try_timeout_ms, backoff_base_ms, backoff_cap_ms, max_inflight;
	bool no_keys;
	char *tls_ca, *tls_cert, *tls_key; /* owned paths, NULL: not set */
	char *token;                       /* owned (a producer keeps its own copy), NULL: not set */
	studio_token_fn token_fn;          /* asked at every send; wins over token */
	void *token_arg;
	/* test hooks (producer_int.h): the clock (ms, monotonic) and the random source */
	uint64_t (*clock_ms)(void *arg);
	uint64_t (*random64)(void *arg);
	void *test_arg;
};

struct studio_producer {
	nng_socket *socks; /* n_urls, owned */
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
	op *ops;             /* under mu: every op in flight (op.next) */
};

struct op {
	studio_producer *p;
	op *next, **pprev; /* on p->ops */
	nng_aio *aio;      /* sends and receives; owned (reaped at the end) */
	nng_aio *timer;    /* the start and back-off sleeps, owned (reaped): never the send/recv aio,
	                              as nng 1.5 leaves a slept aio finishing a later timeout with result 0 */
	nng_ctx ctx;
	bool ctx_open;
	bool unanswered; /* a try went out and was never answered: it may be stored */
	size_t url_i;
	enum op_state st;
	enum op_heard heard;
	uint32_t attempt;                        /* retries so far, for the back-off */
	uint64_t deadline;                       /* on p's clock */
	uint64_t try_start;                      /* when this try was sent, on p's clock */
	st_buf req;                              /* the encoded request (the bare batch), owned */
	unsigned char head[PROTO_WRAP_HEAD_MAX]; /* the request map's head with this try's token */
	size_t head_len;                         /* 0: no token configured */
	bool auth_retried;                       /* an unauthorized answer was retried with the function's next token */
	size_t n;
	uint64_t *seqs; /* n, owned */
	studio_publish_fn cb;
	void *arg;
	char key_base[STUDIO_KEY_BASE_MAX]; /* "" with keys off */
	char detail[DETAIL_MAX];
};

/* ---- small parts -------------------------------------------------------- */

const char *
studio_version(void)
{
	return LIB_VERSION;
}

const char *
studio_status_str(studio_status st)
{
	static const char *const names[] = { "ok",     "invalid", "busy", "unavailable", "timeout",
					     "closed", "usage",   "full", "nomem" };

	return (unsigned)st < ST_ARRAY_LEN(names) ? names[st] : "unknown";
}

static void say(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void
say(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;

	if (buf == NULL || cap == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, cap, fmt, ap);
	va_end(ap);
}

/* The default clock: the project's monotonic one (the hook's signature takes the test's arg). */
static uint64_t
mono_ms(void *arg)
{
	(void)arg;
	return st_clock_now(st_clock_system());
}

/*
 * Waits on p->cv, p->mu held, for at most ms.  The condition variable runs
 * on CLOCK_MONOTONIC (set at studio_producer_new), so a wall-clock step
 * neither cuts nor stretches the wait.
 */
static void
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

static uint64_t
now_ms(const studio_producer *p)
{
	return p->o.clock_ms(p->o.test_arg);
}

static uint64_t
splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t
rand64(studio_producer *p)
{
	if (p->o.random64 != NULL)
		return p->o.random64(p->o.test_arg);
	return splitmix64(atomic_fetch_add(&p->rng, 0x9e3779b97f4a7c15ull));
}

void
producer_key_base_format(const uint8_t id[16], uint64_t n, char *out)
{
	static const char hex[] = "0123456789abcdef";
	char *o = out;

	memcpy(o, "sp2-", 4);
	o += 4;
	for (int i = 0; i < 16; i++) {
		*o++ = hex[id[i] >> 4];
		*o++ = hex[id[i] & 15];
	}
	*o++ = '-';
	for (int s = 60; s >= 0; s -= 4)
		*o++ = hex[(n >> s) & 15];
	*o = '\0';
}

bool
producer_key_base_valid(const char *b)
{
	size_t len = strlen(b);

	if (len == 0 || len >= STUDIO_KEY_BASE_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)b[i] <= 0x20 || (unsigned char)b[i] >= 0x7f)
			return false;
	return true;
}

/* ---- options ------------------------------------------------------------- */

static void
options_defaults(studio_options *o)
{
	memset(o, 0, sizeof(*o));
	o->try_timeout_ms = DEFAULT_TRY_TIMEOUT_MS;
	o->backoff_base_ms = DEFAULT_BACKOFF_BASE_MS;
	o->backoff_cap_ms = DEFAULT_BACKOFF_CAP_MS;
	o->max_inflight = DEFAULT_MAX_INFLIGHT;
	o->clock_ms = mono_ms;
}

studio_options *
studio_options_new(void)
{
	studio_options *o = st_try_malloc(sizeof(*o));

	if (o != NULL)
		options_defaults(o);
	return o;
}

void
studio_options_free(studio_options *o)
{
	if (o == NULL)
		return;
	free(o->tls_ca);
	free(o->tls_cert);
	free(o->tls_key);
	free(o->token);
	free(o);
}

/* A decimal in lo..hi, nothing else (no sign, no space, no suffix). */
static bool
parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
	uint64_t v = 0;

	if (*s == '\0')
		return false;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9')
			return false;
		v = v * 10 + (uint64_t)(*s - '0');
		if (v > hi)
			return false;
	}
	if (v < lo)
		return false;
	*out = (uint32_t)v;
	return true;
}

studio_status
studio_options_set(studio_options *o, const char *name, const char *value, char *err, size_t err_len)
{
	static const struct {
		const char *name;
		size_t off;
		uint32_t hi;
	} nums[] = {
		{ "try_timeout_ms", offsetof(studio_options, try_timeout_ms), INT32_MAX },
		{ "backoff_base_ms", offsetof(studio_options, backoff_base_ms), INT32_MAX },
		{ "backoff_cap_ms", offsetof(studio_options, backoff_cap_ms), INT32_MAX },
		{ "max_inflight", offsetof(studio_options, max_inflight), MAX_INFLIGHT },
	};
	char **str = NULL;

	if (o == NULL || name == NULL || value == NULL) {
		say(err, err_len, "options, name and value are required");
		return STUDIO_USAGE;
	}
	for (size_t i = 0; i < ST_ARRAY_LEN(nums); i++) {
		if (strcmp(name, nums[i].name) != 0)
			continue;
		/* nng durations are int32 ms: anything above INT32_MAX would wrap into a negative one */
		if (!parse_u32(value, 1, nums[i].hi, (uint32_t *)(void *)((char *)o + nums[i].off))) {
			say(err, err_len, "option %s: \"%.40s\" is not a whole number in 1..%u", name, value,
			    nums[i].hi);
			return STUDIO_USAGE;
		}
		return STUDIO_OK;
	}
	if (strcmp(name, "keys") == 0) {
		if (strcmp(value, "on") != 0 && strcmp(value, "off") != 0) {
			say(err, err_len, "option keys: \"%.40s\" is not on or off", value);
			return STUDIO_USAGE;
		}
		o->no_keys = strcmp(value, "off") == 0;
		return STUDIO_OK;
	}
	if (strcmp(name, "tls_ca") == 0)
		str = &o->tls_ca;
	else if (strcmp(name, "tls_cert") == 0)
		str = &o->tls_cert;
	else if (strcmp(name, "tls_key") == 0)
		str = &o->tls_key;
	else if (strcmp(name, "token") == 0) {
		if (strlen(value) > PROTO_MAX_TOKEN) {
			say(err, err_len, "option token: longer than %u bytes", PROTO_MAX_TOKEN);
			return STUDIO_USAGE;
		}
		str = &o->token;
	}
	if (str == NULL) {
		say(err, err_len, "unknown option \"%.60s\"", name);
		return STUDIO_USAGE;
	}
	free(*str);
	*str = NULL;
	if (value[0] != '\0' && (*str = st_try_strndup(value, strlen(value))) == NULL) {
		say(err, err_len, "option %s: out of memory", name);
		return STUDIO_NOMEM;
	}
	return STUDIO_OK;
}

studio_status
studio_options_set_token_fn(studio_options *o, studio_token_fn fn, void *arg)
{
	if (o == NULL)
		return STUDIO_USAGE;
	o->token_fn = fn;
	o->token_arg = arg;
	return STUDIO_OK;
}

void
producer_test_hooks(studio_options *o, uint64_t (*clock_ms)(void *), uint64_t (*random64)(void *), void *arg)
{
	o->clock_ms = clock_ms != NULL ? clock_ms : mono_ms;
	o->random64 = random64;
	o->test_arg = arg;
}

size_t
producer_slot_waiters(studio_producer *p)
{
	size_t n;

	pthread_mutex_lock(&p->mu);
	n = p->slot_waiters;
	pthread_mutex_unlock(&p->mu);
	return n;
}

/* ---- checking and encoding (the writer's code) ------------------------ */

static size_t
len_or_strlen(const char *s, size_t len)
{
	return s == NULL ? 0 : len != 0 ? len : strlen(s);
}

/*
 * Encodes ev[0..n) as one batch request into out, with BASE-i (key_base
 * not NULL) as the key of every event i without one, then decodes it as
 * the writer will.
 */
static studio_status
encode_checked(const studio_event *ev, size_t n, const char *key_base, st_buf *out, char *detail, size_t cap)
{
	proto_event *pe = NULL;
	proto_str *pool = NULL;
	char(*keys)[KEY_MAX] = NULL;
	size_t n_about = 0, used = 0;
	proto_request *r = NULL;
	char why[DETAIL_MAX];
	studio_status st = STUDIO_OK;
	st_err rv;

	if (ev == NULL || n == 0 || n > PROTO_MAX_BATCH) {
		say(detail, cap, "a request holds 1..%u events (got %zu%s)", PROTO_MAX_BATCH, n,
		    ev == NULL ? ", events NULL" : "");
		return STUDIO_USAGE;
	}
	for (size_t i = 0; i < n; i++) {
		/* the layout check of a growing ABI: an event of another size is not read as ours */
		if (ev[i].size != sizeof(studio_event)) {
			say(detail, cap,
			    "event %zu: size %zu is not sizeof(studio_event) %zu: start every event with "
			    "STUDIO_EVENT_INIT",
			    i, ev[i].size, sizeof(studio_event));
			return STUDIO_USAGE;
		}
		if (ev[i].n_about > 0 && ev[i].about == NULL) {
			say(detail, cap, "event %zu: n_about %zu with about NULL", i, ev[i].n_about);
			return STUDIO_USAGE;
		}
		/* the writer's bound and words (proto/wire.c), before anything is sized by the count */
		if (ev[i].n_about > PROTO_MAX_ABOUT) {
			say(detail, cap, "event %zu: about: too many entries (%zu, max %u)", i, ev[i].n_about,
			    PROTO_MAX_ABOUT);
			return STUDIO_INVALID;
		}
		n_about += ev[i].n_about;
	}
	pe = st_try_calloc(n, sizeof(*pe));
	pool = st_try_calloc(n_about ? n_about : 1, sizeof(*pool));
	if (key_base != NULL)
		keys = st_try_calloc(n, sizeof(*keys));
	if (pe == NULL || pool == NULL || (key_base != NULL && keys == NULL)) {
		say(detail, cap, "out of memory for %zu events", n);
		st = STUDIO_NOMEM;
		goto done;
	}
	for (size_t i = 0; i < n; i++) {
		const studio_event *e = &ev[i];

		pe[i].topic = (proto_str){ e->topic ? e->topic : "", len_or_strlen(e->topic, e->topic_len) };
		pe[i].about = pool + used;
		pe[i].n_about = (uint32_t)e->n_about;
		for (size_t k = 0; k < e->n_about; k++) {
			const char *a = e->about[k] ? e->about[k] : "";

			pool[used++] = (proto_str){ a, e->about_lens ? e->about_lens[k] : strlen(a) };
		}
		if (e->data != NULL) {
			pe[i].data = (proto_str){ e->data, len_or_strlen(e->data, e->data_len) };
			pe[i].has_data = true;
		}
		if (e->key != NULL) {
			pe[i].key = (proto_str){ e->key, len_or_strlen(e->key, e->key_len) };
			pe[i].has_key = true;
		} else if (keys != NULL) {
			int kl = snprintf(keys[i], KEY_MAX, "%s-%zu", key_base, i);

			pe[i].key = (proto_str){ keys[i], (size_t)kl };
			pe[i].has_key = true;
		}
	}
	st_buf_reset(out);
	if (proto_request_try_encode(out, pe, n, true) != ST_OK) {
		say(detail, cap, "out of memory encoding %zu events", n);
		st = STUDIO_NOMEM;
		goto done;
	}
	/* The writer's decoder, bounds and words: what it would refuse is refused here. */
	if (out->len > PROTO_MAX_REQUEST) {
		say(detail, cap, "request of %zu bytes is larger than %u", out->len, PROTO_MAX_REQUEST);
		st = STUDIO_INVALID;
	} else if ((rv = proto_request_try_decode(out->p, out->len, &r, why, sizeof(why))) != ST_OK) {
		say(detail, cap, "%s%s", rv == ST_ENOMEM ? "checking the request: " : "", why);
		st = rv == ST_ENOMEM ? STUDIO_NOMEM : STUDIO_INVALID;
	}
	proto_request_free(r);
done:
	free(keys);
	free(pe);
	free(pool);
	return st;
}

studio_status
studio_events_check(const studio_event *ev, size_t n, char *detail, size_t detail_len)
{
	st_buf b;
	studio_status st;

	st_buf_init(&b);
	st = encode_checked(ev, n, NULL, &b, detail, detail_len);
	st_buf_fini(&b);
	return st;
}

/* ---- the request's state machine --------------------------------------- */

static void op_cb(void *arg);
static void op_timer_cb(void *arg);

static void
op_ctx_close(op *o)
{
	if (o->ctx_open) {
		nng_ctx_close(o->ctx);
		o->ctx_open = false;
	}
}

/*
 * The end: the callback, then off the list and the slot back (so that
 * studio_producer_free returns only after every callback returned), then
 * the op is gone.  Nothing of p is touched after the unlock.
 */
static void
op_finish(op *o, studio_status st)
{
	studio_producer *p = o->p;

	op_ctx_close(o);
	if (st == STUDIO_OK)
		atomic_store(&p->url_good, o->url_i);
	o->cb(o->arg, st, st == STUDIO_OK ? o->seqs : NULL, st == STUDIO_OK ? o->n : 0, o->detail);
	pthread_mutex_lock(&p->mu);
	*o->pprev = o->next;
	if (o->next != NULL)
		o->next->pprev = o->pprev;
	p->inflight--;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	nng_aio_reap(o->aio); /* not nng_aio_free: we may be inside its callback */
	nng_aio_reap(o->timer);
	st_buf_fini(&o->req);
	free(o->seqs);
	free(o);
}

/*
 * Ends a request whose outcome is unknown: a try of it may be stored.  The
 * detail says why and with which key base to publish again.
 */
static void
op_finish_maybe_stored(op *o, studio_status st)
{
	size_t len = strlen(o->detail);

	if (len < sizeof(o->detail) && o->key_base[0] != '\0')
		snprintf(o->detail + len, sizeof(o->detail) - len, "; it may be stored: publish again with key base %s",
			 o->key_base);
	else if (len < sizeof(o->detail))
		snprintf(o->detail + len, sizeof(o->detail) - len,
			 "; it may be stored: publishing again is safe only for events with keys of their own");
	op_finish(o, st);
}

static void
op_finish_unknown(op *o, const char *why)
{
	if (why != NULL)
		say(o->detail, sizeof(o->detail), "%s", why);
	op_finish_maybe_stored(o, STUDIO_TIMEOUT);
}

/* The deadline passed: unknown once a try went unanswered, else the last answer. */
static void
op_finish_deadline(op *o)
{
	size_t len = strlen(o->detail);

	if (o->unanswered) {
		op_finish_unknown(o, NULL);
		return;
	}
	/* every try that left was answered busy or unavailable, or none left (no connection): nothing stored */
	if (o->heard == HEARD_NOTHING && len < sizeof(o->detail))
		snprintf(o->detail + len, sizeof(o->detail) - len, "; nothing was sent");
	op_finish(o, o->heard == HEARD_BUSY ? STUDIO_BUSY : STUDIO_UNAVAILABLE);
}

/* The producer is being freed: closed only when no try of it may have reached a writer. */
static void
op_finish_closing(op *o)
{
	if (o->unanswered) {
		op_finish_unknown(o, "the producer was freed before a writer answered");
		return;
	}
	say(o->detail, sizeof(o->detail), "the producer was freed; nothing of the request was sent");
	op_finish(o, STUDIO_CLOSED);
}

static bool
op_closing(op *o)
{
	bool c;

	pthread_mutex_lock(&o->p->mu);
	c = o->p->closing;
	pthread_mutex_unlock(&o->p->mu);
	return c;
}

/* The time left before the deadline, at most the try timeout (both below INT32_MAX); 0: past it. */
static nng_duration
op_left(op *o)
{
	uint64_t now = now_ms(o->p);

	if (now >= o->deadline)
		return 0;
	return (nng_duration)ST_MIN(o->deadline - now, (uint64_t)o->p->o.try_timeout_ms);
}

/*
 * The request map's head for this try ({"token": T, "events": ...}), into
 * o->head: the token function is asked at every try, so a rotated token
 * is sent on the next one; none configured: no head (the bare batch).
 * Nonzero (detail said) when the function gave no usable token.
 */
static int
token_head(op *o)
{
	const studio_options *opt = &o->p->o;
	char tok[PROTO_MAX_TOKEN + 1];
	proto_str t = { NULL, 0 };

	o->head_len = 0;
	if (opt->token_fn != NULL) {
		int n = opt->token_fn(opt->token_arg, tok, sizeof(tok));

		if (n <= 0 || (size_t)n > PROTO_MAX_TOKEN) {
			say(o->detail, sizeof(o->detail), "the token function gave no token (returned %d; 1..%u bytes)",
			    n, PROTO_MAX_TOKEN);
			return -1;
		}
		t = (proto_str){ tok, (size_t)n };
	} else if (opt->token != NULL) {
		t = (proto_str){ opt->token, strlen(opt->token) };
	} else {
		return 0;
	}
	o->head_len = proto_request_wrap_head(o->head, sizeof(o->head), t);
	return 0;
}

static void
op_send(op *o)
{
	nng_duration left;
	nng_msg *m = NULL;
	int rv;

	if (op_closing(o)) {
		op_finish_closing(o);
		return;
	}
	if ((left = op_left(o)) == 0) {
		op_finish_deadline(o);
		return;
	}
	if (!o->ctx_open) {
		if ((rv = nng_ctx_open(&o->ctx, o->p->socks[o->url_i])) != 0) {
			if (rv == NNG_ECLOSED) {
				op_finish_closing(o);
				return;
			}
			say(o->detail, sizeof(o->detail), "%s: %s", o->p->urls[o->url_i], nng_strerror(rv));
			if (o->unanswered)
				op_finish_unknown(o, NULL);
			else
				op_finish(o, rv == NNG_ENOMEM ? STUDIO_NOMEM : STUDIO_USAGE);
			return;
		}
		o->ctx_open = true;
	}
	if ((rv = token_head(o)) != 0) {
		/* no token to send: nothing of this try went out */
		if (o->unanswered)
			op_finish_unknown(o, NULL);
		else
			op_finish(o, STUDIO_USAGE);
		return;
	}
	if ((rv = nng_msg_alloc(&m, 0)) != 0 || (o->head_len && (rv = nng_msg_append(m, o->head, o->head_len)) != 0) ||
	    (rv = nng_msg_append(m, o->req.p, o->req.len)) != 0) {
		nng_msg_free(m);
		say(o->detail, sizeof(o->detail), "cannot build the message: %s", nng_strerror(rv));
		if (o->unanswered)
			op_finish_unknown(o, NULL);
		else
			op_finish(o, STUDIO_NOMEM);
		return;
	}
	o->st = OP_SEND;
	o->try_start = now_ms(o->p);
	nng_aio_set_msg(o->aio, m);
	nng_aio_set_timeout(o->aio, left);
	nng_ctx_send(o->ctx, o->aio);
}

/* Wait, then try again: on the same URL (busy) or the next one. */
static void
op_retry(op *o, bool next_url, bool wait)
{
	uint64_t now;
	uint32_t ms;

	if (next_url) {
		op_ctx_close(o); /* a late reply to this try is dropped */
		o->url_i = (o->url_i + 1) % o->p->n_urls;
	}
	if (!wait) {
		op_send(o);
		return;
	}
	if (op_left(o) == 0) {
		op_finish_deadline(o);
		return;
	}
	if (op_closing(o)) {
		op_finish_closing(o);
		return;
	}
	ms = st_backoff_jitter_ms(++o->attempt, o->p->o.backoff_base_ms, o->p->o.backoff_cap_ms, rand64(o->p));
	now = now_ms(o->p);
	o->st = OP_WAIT;
	nng_sleep_aio((nng_duration)ST_MIN((uint64_t)ms, o->deadline > now ? o->deadline - now : 0), o->timer);
}

static void
op_on_reply(op *o, nng_msg *m)
{
	proto_reply rep;
	const char *url = o->p->urls[o->url_i];
	st_err rv;

	memset(&rep, 0, sizeof(rep));
	rv = proto_reply_try_decode(nng_msg_body(m), nng_msg_len(m), &rep);
	if (rv == ST_ENOMEM) {
		/* An answer we cannot read: it may say stored.  Retrying would need memory too. */
		nng_msg_free(m);
		say(o->detail, sizeof(o->detail), "out of memory reading the reply of %s", url);
		op_finish_maybe_stored(o, STUDIO_NOMEM);
		return;
	}
	if (rv != ST_OK) {
		nng_msg_free(m);
		say(o->detail, sizeof(o->detail), "%s sent a reply that is not an ingest reply", url);
		o->unanswered = true; /* not an answer we can read: the try may be stored */
		op_retry(o, true, true);
		return;
	}
	nng_msg_free(m);
	if (rep.ok && rep.n_seqs == o->n) {
		memcpy(o->seqs, rep.seqs, o->n * sizeof(*o->seqs));
		proto_reply_fini(&rep);
		op_finish(o, STUDIO_OK);
		return;
	}
	if (rep.ok) {
		say(o->detail, sizeof(o->detail), "%s answered %zu seqs for %zu events", url, rep.n_seqs, o->n);
		proto_reply_fini(&rep);
		o->unanswered = true;
		op_retry(o, true, true);
		return;
	}
	say(o->detail, sizeof(o->detail), "%s: %s (from %s)", rep.error, rep.detail, url);
	if (strcmp(rep.error, "unauthorized") == 0 && o->p->o.token_fn != NULL && !o->auth_retried) {
		/* nothing stored; the token may have expired in flight: ask the function again, once, at once */
		proto_reply_fini(&rep);
		o->auth_retried = true;
		op_retry(o, false, false);
		return;
	}
	if (strcmp(rep.error, "invalid") == 0 || strcmp(rep.error, "unauthorized") == 0 ||
	    strcmp(rep.error, "forbidden") == 0) {
		proto_reply_fini(&rep);
		/* all or nothing: this try stored nothing, but an earlier unanswered one may have */
		if (o->unanswered)
			op_finish_unknown(o, NULL);
		else
			op_finish(o, STUDIO_INVALID);
		return;
	}
	if (strcmp(rep.error, "busy") == 0) {
		proto_reply_fini(&rep);
		o->heard = HEARD_BUSY; /* nothing of this try stored: the same writer, after the back-off */
		op_retry(o, false, true);
		return;
	}
	/* unavailable (or a code this library does not know): the next writer */
	o->heard = HEARD_UNAVAILABLE;
	proto_reply_fini(&rep);
	op_retry(o, true, true);
}

/*
 * Frees a message nng left on the op's aio.  Every branch that takes a
 * message off the aio clears the pointer, so what is still there is one
 * nng handed back and nobody else holds.
 */
static void
op_aio_msg_drop(op *o)
{
	nng_msg *m = nng_aio_get_msg(o->aio);

	if (m != NULL) {
		nng_aio_set_msg(o->aio, NULL);
		nng_msg_free(m);
	}
}

static void
op_cb(void *arg)
{
	op *o = arg;
	int rv = nng_aio_result(o->aio);
	const char *url = o->p->urls[o->url_i];

	switch (o->st) {
	case OP_START:
	case OP_WAIT: return; /* not this aio's states: the timer's (op_timer_cb) */
	case OP_SEND:
		if (rv != 0) {
			/* the message is still ours: it never left */
			op_aio_msg_drop(o);
			if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) {
				op_finish_closing(o);
				return;
			}
			say(o->detail, sizeof(o->detail), "%s: no connection (%s)", url, nng_strerror(rv));
			o->heard = HEARD_NOTHING;
			op_retry(o, true, rv != NNG_ETIMEDOUT);
			return;
		}
		/* nng owns the request now (nng_ctx_send's rule): no pointer to it stays on the aio. */
		nng_aio_set_msg(o->aio, NULL);
		/* From here the try may reach a writer: until its answer, its outcome is unknown. */
		o->st = OP_RECV;
		nng_aio_set_timeout(o->aio, ST_MAX(op_left(o), 1));
		nng_ctx_recv(o->ctx, o->aio);
		return;
	case OP_RECV:
		if (rv != 0) {
			/* A failed receive may hand the try's request back on the aio (req0
			 * resets its context): ours to free, before the next try sets its own. */
			op_aio_msg_drop(o);
			o->unanswered = true;
			if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) {
				op_finish_closing(o);
				return;
			}
			/* the wait as it was (the try timeout, or what was left of the call's) */
			say(o->detail, sizeof(o->detail), "no reply from %s within %llu ms (%s)", url,
			    (unsigned long long)(now_ms(o->p) - o->try_start), nng_strerror(rv));
			o->heard = HEARD_NOTHING;
			op_retry(o, true, false);
			return;
		}
		if (nng_aio_get_msg(o->aio) == NULL) { /* never expected; a reply we cannot read */
			o->unanswered = true;
			say(o->detail, sizeof(o->detail), "no reply from %s", url);
			op_retry(o, true, false);
			return;
		}
		{
			nng_msg *m = nng_aio_get_msg(o->aio);

			nng_aio_set_msg(o->aio, NULL); /* the reply is ours: op_on_reply frees it */
			op_on_reply(o, m);
		}
		return;
	}
}

/* The timer: the zero sleep that moves the start off the caller's thread, and the back-off. */
static void
op_timer_cb(void *arg)
{
	op *o = arg;
	int rv = nng_aio_result(o->timer);

	if (rv != 0 && rv != NNG_ETIMEDOUT) { /* the sleep ended early: cancelled by studio_producer_free */
		op_finish_closing(o);
		return;
	}
	op_send(o);
}

/* ---- the API --------------------------------------------------------------- */

/* Counts a call that may wait on p; false (CLOSED) once free has begun. */
static bool
producer_enter(studio_producer *p)
{
	bool ok;

	pthread_mutex_lock(&p->mu);
	ok = !p->closing;
	if (ok)
		p->users++;
	pthread_mutex_unlock(&p->mu);
	return ok;
}

static void
producer_leave(studio_producer *p)
{
	pthread_mutex_lock(&p->mu);
	p->users--;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

static void
op_free_unstarted(op *o)
{
	if (o->aio != NULL)
		nng_aio_free(o->aio);
	if (o->timer != NULL)
		nng_aio_free(o->timer);
	st_buf_fini(&o->req);
	free(o->seqs);
	free(o);
}

/* studio_publish_async once the call is counted in p->users. */
static studio_status
publish_async_in(studio_producer *p, const studio_event *ev, size_t n, char *key_base, uint32_t timeout_ms,
		 unsigned flags, studio_publish_fn cb, void *arg, char *detail, size_t detail_len)
{
	const char *base = NULL;
	op *o = NULL;
	uint64_t deadline;
	studio_status st;
	int rv;

	deadline = now_ms(p) + timeout_ms;
	if ((o = st_try_calloc(1, sizeof(*o))) == NULL) {
		say(detail, detail_len, "out of memory");
		return STUDIO_NOMEM;
	}
	st_buf_init(&o->req);
	if (!p->o.no_keys) {
		if (key_base != NULL && key_base[0] != '\0') {
			if (!producer_key_base_valid(key_base)) {
				say(detail, detail_len,
				    "key base \"%.40s\": 1..%d bytes of printable ASCII without space", key_base,
				    STUDIO_KEY_BASE_MAX - 1);
				op_free_unstarted(o);
				return STUDIO_USAGE;
			}
			snprintf(o->key_base, sizeof(o->key_base), "%s", key_base);
		} else {
			/* Made once, here, and handed back: every try of this request, and the
			 * caller's next call with the same base, carries the same keys. */
			producer_key_base_format(p->id, atomic_fetch_add(&p->base_n, 1), o->key_base);
			if (key_base != NULL)
				memcpy(key_base, o->key_base, strlen(o->key_base) + 1);
		}
		base = o->key_base;
	}
	st = encode_checked(ev, n, base, &o->req, detail, detail_len);
	if (st != STUDIO_OK)
		goto fail;
	if ((rv = nng_aio_alloc(&o->aio, op_cb, o)) != 0 || (rv = nng_aio_alloc(&o->timer, op_timer_cb, o)) != 0) {
		say(detail, detail_len, "nng_aio_alloc: %s", nng_strerror(rv));
		st = STUDIO_NOMEM;
		goto fail;
	}
	if ((o->seqs = st_try_calloc(n, sizeof(*o->seqs))) == NULL) {
		say(detail, detail_len, "out of memory for %zu seqs", n);
		st = STUDIO_NOMEM;
		goto fail;
	}
	o->p = p;
	o->n = n;
	o->cb = cb;
	o->arg = arg;
	o->deadline = deadline;
	o->url_i = atomic_load(&p->url_good) % p->n_urls;
	say(o->detail, sizeof(o->detail), "no writer answered within %u ms", timeout_ms);
	/* A slot (back-pressure on the caller, unless STUDIO_NONBLOCK), then on the list. */
	pthread_mutex_lock(&p->mu);
	p->slot_waiters++;
	while (!(flags & STUDIO_NONBLOCK) && !p->closing && p->inflight >= p->o.max_inflight) {
		uint64_t now = now_ms(p);

		if (now >= deadline)
			break;
		producer_wait_ms(p, deadline - now);
	}
	p->slot_waiters--;
	if (p->closing || p->inflight >= p->o.max_inflight) {
		st = p->closing ? STUDIO_CLOSED : STUDIO_FULL;
		pthread_mutex_unlock(&p->mu);
		if (st == STUDIO_CLOSED)
			say(detail, detail_len, "the producer is being freed; nothing was sent");
		else
			say(detail, detail_len, "%u requests in flight (max_inflight)%s; nothing was sent",
			    p->o.max_inflight, (flags & STUDIO_NONBLOCK) ? "" : " for the whole timeout");
		goto fail;
	}
	p->inflight++;
	o->next = p->ops;
	if (o->next != NULL)
		o->next->pprev = &o->next;
	o->pprev = &p->ops;
	p->ops = o;
	pthread_mutex_unlock(&p->mu);
	/* The first step on an nng thread: the callback never runs on the caller's. */
	o->st = OP_START;
	nng_sleep_aio(0, o->timer);
	return STUDIO_OK;
fail:
	op_free_unstarted(o);
	return st;
}

studio_status
studio_publish_async(studio_producer *p, const studio_event *ev, size_t n, char *key_base, uint32_t timeout_ms,
		     unsigned flags, studio_publish_fn cb, void *arg, char *detail, size_t detail_len)
{
	studio_status st;

	if (p == NULL || cb == NULL || timeout_ms == 0) {
		say(detail, detail_len, "producer, callback and a timeout > 0 are required");
		return STUDIO_USAGE;
	}
	if (!producer_enter(p)) {
		say(detail, detail_len, "the producer is being freed; nothing was sent");
		return STUDIO_CLOSED;
	}
	st = publish_async_in(p, ev, n, key_base, timeout_ms, flags, cb, arg, detail, detail_len);
	producer_leave(p);
	return st;
}

/* The synchronous call waits on one of these. */
typedef struct waiter {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
	studio_status st;
	uint64_t *seqs_out;
	char *detail;
	size_t detail_len;
} waiter;

static void
waiter_cb(void *arg, studio_status st, const uint64_t *seqs, size_t n, const char *detail)
{
	waiter *w = arg;

	pthread_mutex_lock(&w->mu);
	if (st == STUDIO_OK && w->seqs_out != NULL)
		memcpy(w->seqs_out, seqs, n * sizeof(*seqs));
	if (st != STUDIO_OK)
		say(w->detail, w->detail_len, "%s", detail);
	w->st = st;
	w->done = true;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

studio_status
studio_publish(studio_producer *p, const studio_event *ev, size_t n, char *key_base, uint64_t *seqs_out,
	       uint32_t timeout_ms, char *detail, size_t detail_len)
{
	waiter w = { .seqs_out = seqs_out, .detail = detail, .detail_len = detail_len };
	studio_status st;

	if (p == NULL || timeout_ms == 0) {
		say(detail, detail_len, "producer and a timeout > 0 are required");
		return STUDIO_USAGE;
	}
	if (!producer_enter(p)) {
		say(detail, detail_len, "the producer is being freed; nothing was sent");
		return STUDIO_CLOSED;
	}
	pthread_mutex_init(&w.mu, NULL);
	pthread_cond_init(&w.cv, NULL);
	st = publish_async_in(p, ev, n, key_base, timeout_ms, 0, waiter_cb, &w, detail, detail_len);
	if (st == STUDIO_OK) {
		pthread_mutex_lock(&w.mu);
		while (!w.done)
			pthread_cond_wait(&w.cv, &w.mu);
		st = w.st;
		pthread_mutex_unlock(&w.mu);
	}
	pthread_cond_destroy(&w.cv);
	pthread_mutex_destroy(&w.mu);
	producer_leave(p);
	return st;
}

studio_status
studio_producer_flush(studio_producer *p, uint32_t timeout_ms)
{
	uint64_t deadline;
	studio_status st;

	if (p == NULL)
		return STUDIO_USAGE;
	if (!producer_enter(p))
		return STUDIO_CLOSED;
	deadline = now_ms(p) + timeout_ms;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		uint64_t now = now_ms(p);

		if (p->inflight == 0 || p->closing || now >= deadline)
			break;
		producer_wait_ms(p, deadline - now);
	}
	st = p->inflight == 0 ? STUDIO_OK : p->closing ? STUDIO_CLOSED : STUDIO_TIMEOUT;
	pthread_mutex_unlock(&p->mu);
	producer_leave(p);
	return st;
}

/* ---- TLS: this producer's own configuration ------------------------------ */

/* Reads a whole PEM file of at most MAX_PEM bytes (st_pem_read) into *out (owned by the caller). */
static studio_status
read_pem(const char *opt, const char *path, char **out, char *err, size_t cap)
{
	const char *reason = NULL;
	st_err rv = st_pem_read(path, MAX_PEM, out, &reason);

	if (rv == ST_OK)
		return STUDIO_OK;
	if (rv == ST_ENOMEM) {
		say(err, cap, "option %s: out of memory", opt);
		return STUDIO_NOMEM;
	}
	say(err, cap, "option %s: %s: %s", opt, path, reason);
	return STUDIO_USAGE;
}

typedef struct tls_pem {
	char *ca, *cert, *key; /* owned; NULL: not given */
} tls_pem;

static void
tls_pem_fini(tls_pem *t)
{
	free(t->ca);
	free(t->cert);
	free(t->key);
}

static studio_status
tls_pem_load(const studio_options *o, tls_pem *t, char *err, size_t cap)
{
	studio_status st;

	if (o == NULL || (o->tls_ca == NULL && o->tls_cert == NULL && o->tls_key == NULL))
		return STUDIO_OK;
	if ((o->tls_cert == NULL) != (o->tls_key == NULL)) {
		say(err, cap, "options tls_cert and tls_key go together");
		return STUDIO_USAGE;
	}
	if (o->tls_ca == NULL) {
		say(err, cap, "option tls_ca is required with tls_cert (the CA that signs the writers)");
		return STUDIO_USAGE;
	}
	if ((st = read_pem("tls_ca", o->tls_ca, &t->ca, err, cap)) != STUDIO_OK)
		return st;
	if (o->tls_cert != NULL && ((st = read_pem("tls_cert", o->tls_cert, &t->cert, err, cap)) != STUDIO_OK ||
				    (st = read_pem("tls_key", o->tls_key, &t->key, err, cap)) != STUDIO_OK))
		return st;
	if (t->cert != NULL && !st_pem_pair_matches(t->cert, t->key)) {
		say(err, cap, "option tls_key %s is not the key of tls_cert %s (or one of them is not PEM)", o->tls_key,
		    o->tls_cert);
		return STUDIO_USAGE;
	}
	return STUDIO_OK;
}

static bool
url_has_scheme(const char *url, const char *const *schemes)
{
	for (; *schemes != NULL; schemes++)
		if (strncmp(url, *schemes, strlen(*schemes)) == 0)
			return true;
	return false;
}

/* A dialer for url on s, with this producer's TLS configuration for tls+tcp, started in the background. */
static int
dial_writer(nng_socket s, const char *url, const tls_pem *t, char *err, size_t cap)
{
	static const char *const tls_schemes[] = { "tls+tcp://", "tls+tcp4://", "tls+tcp6://", NULL };
	static const char *const plain[] = { "tcp://", "tcp4://", "tcp6://", "ipc://", NULL };
	nng_tls_config *c = NULL;
	nng_dialer d;
	nng_url *u = NULL;
	int rv;

	if (url_has_scheme(url, tls_schemes)) {
		if (t->ca == NULL) {
			say(err, cap, "writer URL \"%s\": tls+tcp needs the options tls_ca, tls_cert and tls_key", url);
			return NNG_EINVAL;
		}
	} else if (!url_has_scheme(url, plain)) {
		say(err, cap, "writer URL \"%s\": the scheme must be tcp://, tls+tcp:// or ipc://", url);
		return NNG_EINVAL;
	}
	if ((rv = nng_dialer_create(&d, s, url)) != 0) {
		say(err, cap, "bad writer URL \"%s\": %s", url, nng_strerror(rv));
		return rv;
	}
	if (t->ca != NULL && url_has_scheme(url, tls_schemes)) {
		/* One configuration per dialer: the name checked is the URL's host. */
		if ((rv = nng_tls_config_alloc(&c, NNG_TLS_MODE_CLIENT)) != 0 ||
		    (rv = nng_tls_config_ca_chain(c, t->ca, NULL)) != 0 ||
		    (rv = nng_tls_config_auth_mode(c, NNG_TLS_AUTH_MODE_REQUIRED)) != 0 ||
		    (t->cert != NULL && (rv = nng_tls_config_own_cert(c, t->cert, t->key, NULL)) != 0) ||
		    (rv = nng_url_parse(&u, url)) != 0 || (rv = nng_tls_config_server_name(c, u->u_hostname)) != 0 ||
		    (rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, c)) != 0)
			say(err, cap, "writer URL \"%s\": TLS configuration refused: %s", url, nng_strerror(rv));
		if (c != NULL)
			nng_tls_config_free(c); /* the dialer holds its own reference */
		nng_url_free(u);
		if (rv != 0) {
			nng_dialer_close(d);
			return rv;
		}
	}
	/* In the background: a writer that is not up yet is dialed again and again. */
	if ((rv = nng_dialer_start(d, NNG_FLAG_NONBLOCK)) != 0) {
		say(err, cap, "writer URL \"%s\": %s", url, nng_strerror(rv));
		nng_dialer_close(d);
	}
	return rv;
}

studio_status
studio_producer_new(const char *urls, const studio_options *opt, studio_producer **out, char *err, size_t err_len)
{
	studio_producer *p = NULL;
	pthread_condattr_t ca;
	const char *cur = urls, *item;
	tls_pem t = { 0 };
	size_t len, n = 0;
	studio_status st = STUDIO_USAGE;
	int rv;

	if (out == NULL) {
		say(err, err_len, "out (where the producer goes) is NULL");
		return STUDIO_USAGE;
	}
	*out = NULL;
	if (urls == NULL) {
		say(err, err_len, "no writer URL");
		return STUDIO_USAGE;
	}
	if ((p = st_try_calloc(1, sizeof(*p))) == NULL) {
		say(err, err_len, "out of memory");
		return STUDIO_NOMEM;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (opt != NULL)
		p->o = *opt;
	else
		options_defaults(&p->o);
	p->o.tls_ca = p->o.tls_cert = p->o.tls_key = NULL; /* read below, not kept */
	p->o.token = NULL;
	if (opt != NULL && opt->token != NULL && (p->o.token = strdup(opt->token)) == NULL) {
		say(err, err_len, "out of memory");
		st = STUDIO_NOMEM;
		goto fail;
	}
	if (p->o.backoff_cap_ms < p->o.backoff_base_ms) {
		say(err, err_len, "option backoff_cap_ms %u is below backoff_base_ms %u", p->o.backoff_cap_ms,
		    p->o.backoff_base_ms);
		goto fail;
	}
	if ((st = tls_pem_load(opt, &t, err, err_len)) != STUDIO_OK)
		goto fail;
	st = STUDIO_NOMEM;
	if ((p->socks = st_try_calloc(MAX_URLS, sizeof(*p->socks))) == NULL ||
	    (p->urls = st_try_calloc(MAX_URLS, sizeof(*p->urls))) == NULL) {
		say(err, err_len, "out of memory");
		goto fail;
	}
	st = STUDIO_USAGE;
	while (st_list_next(&cur, &item, &len)) {
		nng_socket s = NNG_SOCKET_INITIALIZER;
		char *url;

		if (n == MAX_URLS) {
			say(err, err_len, "more than %d writer URLs", MAX_URLS);
			goto fail;
		}
		if ((url = st_try_strndup(item, len)) == NULL) {
			say(err, err_len, "out of memory");
			st = STUDIO_NOMEM;
			goto fail;
		}
		p->urls[n] = url;
		rv = nng_req0_open(&s);
		p->socks[n++] = s; /* freed with p even when it failed (closing id 0 is a no-op) */
		if (rv != 0) {
			say(err, err_len, "cannot open a req0 socket: %s", nng_strerror(rv));
			st = rv == NNG_ENOMEM ? STUDIO_NOMEM : STUDIO_USAGE;
			goto fail;
		}
		nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, MAX_REPLY);
		nng_socket_set_ms(s, NNG_OPT_RECONNMINT, 100);
		nng_socket_set_ms(s, NNG_OPT_RECONNMAXT, 2000);
		/* Our own tries resend (with a new context); nng's timer would only add copies. */
		nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
		if (dial_writer(s, url, &t, err, err_len) != 0)
			goto fail;
	}
	if (n == 0) {
		say(err, err_len, "no writer URL in \"%s\"", urls);
		goto fail;
	}
	p->n_urls = n;
	if (p->o.random64 != NULL) {
		uint64_t a = p->o.random64(p->o.test_arg), b = p->o.random64(p->o.test_arg);

		memcpy(p->id, &a, 8);
		memcpy(p->id + 8, &b, 8);
	} else if (getrandom(p->id, sizeof(p->id), 0) != (ssize_t)sizeof(p->id)) {
		say(err, err_len, "getrandom: %s", strerror(errno));
		goto fail;
	}
	{
		uint64_t seed;

		memcpy(&seed, p->id, sizeof(seed));
		atomic_store(&p->rng, seed);
	}
	tls_pem_fini(&t);
	*out = p;
	return STUDIO_OK;
fail:
	tls_pem_fini(&t);
	p->n_urls = n;
	studio_producer_free(p);
	return st;
}

void
studio_producer_free(studio_producer *p)
{
	if (p == NULL)
		return;
	pthread_mutex_lock(&p->mu);
	p->closing = true;
	pthread_cond_broadcast(&p->cv); /* slot waiters and flushes return CLOSED */
	pthread_mutex_unlock(&p->mu);
	/* Closed sockets end every send and receive with NNG_ECLOSED. */
	for (size_t i = 0; i < p->n_urls; i++)
		nng_close(p->socks[i]);
	/* Sleeping ops are not on a socket: cancel them, again until none is left
	 * (one may start its sleep right after a round).  Then wait for every
	 * call still inside (a waiter wakes, sees closing and leaves). */
	pthread_mutex_lock(&p->mu);
	while (p->inflight > 0 || p->users > 0) {
		for (op *o = p->ops; o != NULL; o = o->next) {
			nng_aio_cancel(o->aio);
			nng_aio_cancel(o->timer);
		}
		producer_wait_ms(p, 50);
	}
	pthread_mutex_unlock(&p->mu);
	for (size_t i = 0; p->urls != NULL && i < p->n_urls; i++)
		free(p->urls[i]);
	free(p->urls);
	free(p->socks);
	free(p->o.token);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p);
}
