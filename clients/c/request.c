/*
 * request: the bytes of one ingest request (request.h) and
 * studio_events_check.
 *
 * DESIGN
 * A request is checked and encoded once, on the caller's thread, by the
 * writer's own code (proto/wire.c: encode, then decode as the writer will,
 * so the rules and the words of a refusal are the writer's).  Every try of
 * it then sends the same bytes (op.c), so events without a key get
 * BASE-INDEX here, before the first try: the base made by the producer
 * (request_key_base_format: its random id and a counter) or given by the
 * caller and handed back, so every try, and the caller's next call with
 * the same base, carries the same keys and the writer stores each event
 * once however many tries reach it.
 *
 * Memory: only st_try_* and the fallible forms of the shared encoder and
 * decoder (proto_request_try_encode, proto_request_try_decode): out of
 * memory is STUDIO_NOMEM, never an abort of the host program.
 */
#include "request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detail.h"
#include "st_util.h"
#include "wire.h"

/* BASE "-" INDEX: at most 127 + 1 + 4 digits (index < 10,000) + NUL. */
#define KEY_MAX (STUDIO_KEY_BASE_MAX + 8)

void
request_key_base_format(const uint8_t id[16], uint64_t n, char *out)
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
request_key_base_valid(const char *b)
{
	size_t len = strlen(b);

	if (len == 0 || len >= STUDIO_KEY_BASE_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)b[i] <= 0x20 || (unsigned char)b[i] >= 0x7f)
			return false;
	return true;
}

static size_t
len_or_strlen(const char *s, size_t len)
{
	return s == NULL ? 0 : len != 0 ? len : strlen(s);
}

studio_status
request_encode(const studio_event *ev, size_t n, const char *key_base, st_buf *out, char *detail, size_t cap)
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
		detail_say(detail, cap, "a request holds 1..%u events (got %zu%s)", PROTO_MAX_BATCH, n,
			   ev == NULL ? ", events NULL" : "");
		return STUDIO_USAGE;
	}
	for (size_t i = 0; i < n; i++) {
		/* the layout check of a growing ABI: an event of another size is not read as ours */
		if (ev[i].size != sizeof(studio_event)) {
			detail_say(detail, cap,
				   "event %zu: size %zu is not sizeof(studio_event) %zu: start every event with "
				   "STUDIO_EVENT_INIT",
				   i, ev[i].size, sizeof(studio_event));
			return STUDIO_USAGE;
		}
		if (ev[i].n_about > 0 && ev[i].about == NULL) {
			detail_say(detail, cap, "event %zu: n_about %zu with about NULL", i, ev[i].n_about);
			return STUDIO_USAGE;
		}
		/* the writer's bound and words (proto/wire.c), before anything is sized by the count */
		if (ev[i].n_about > PROTO_MAX_ABOUT) {
			detail_say(detail, cap, "event %zu: about: too many entries (%zu, max %u)", i, ev[i].n_about,
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
		detail_say(detail, cap, "out of memory for %zu events", n);
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
		detail_say(detail, cap, "out of memory encoding %zu events", n);
		st = STUDIO_NOMEM;
		goto done;
	}
	/* The writer's decoder, bounds and words: what it would refuse is refused here. */
	if (out->len > PROTO_MAX_REQUEST) {
		detail_say(detail, cap, "request of %zu bytes is larger than %u", out->len, PROTO_MAX_REQUEST);
		st = STUDIO_INVALID;
	} else if ((rv = proto_request_try_decode(out->p, out->len, &r, why, sizeof(why))) != ST_OK) {
		detail_say(detail, cap, "%s%s", rv == ST_ENOMEM ? "checking the request: " : "", why);
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
	st = request_encode(ev, n, NULL, &b, detail, detail_len);
	st_buf_fini(&b);
	return st;
}
