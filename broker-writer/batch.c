/*
 * batch: requests accumulated between two flushes.
 *
 * Three growable arrays: reqs (owner, first event, count) in arrival order;
 * ev_row, the SQL row of every accepted event; rows, the distinct events
 * sent to SQL with the seq/fresh answer beside them.  An event with a key
 * already seen in this batch does not get a row of its own: its ev_row
 * points at the first one's row, so both receive the same seq (a producer
 * retrying within one flush interval gets the seq stored first, just as it
 * would for a key committed earlier).  The key index is an open-addressing
 * table of row numbers, at most half full, rebuilt on growth.
 *
 * A request is checked against the bounds before anything is appended, and
 * its keys are only inserted after the check, so a refused request leaves no
 * trace.  All sizes are bounded by max_events, so the arrays never grow
 * past what the bounds allow.
 */
#include "batch.h"

#include <stdlib.h>
#include <string.h>

#include "pgarray.h"
#include "st_util.h"

typedef struct batch_req {
	void *owner;
	uint32_t first; /* index into ev_row */
	uint32_t n;
} batch_req;

typedef struct batch_rowinfo {
	const proto_event *ev;
	uint64_t seq;
	bool fresh;
} batch_rowinfo;

struct batch {
	size_t max_events, max_bytes;
	size_t bytes;
	batch_req *reqs;
	size_t n_reqs, cap_reqs;
	uint32_t *ev_row;
	size_t n_ev, cap_ev;
	batch_rowinfo *rows;
	size_t n_rows, cap_rows;
	uint32_t *keys; /* row + 1, 0 = empty slot */
	size_t cap_keys; /* power of two or 0 */
	size_t n_keys;
};

static void *
grow(void *p, size_t *cap, size_t need, size_t elem)
{
	size_t c = *cap ? *cap : 64;

	if (need <= *cap)
		return p;
	while (c < need)
		c *= 2;
	*cap = c;
	return st_xrealloc(p, c * elem);
}

static uint64_t
key_hash(const char *p, size_t len)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)p[i];
		h *= 1099511628211ull;
	}
	return h;
}

/* Returns the slot holding key, or the empty slot where it belongs. */
static size_t
key_slot(const batch *b, const char *p, size_t len)
{
	size_t mask = b->cap_keys - 1;
	size_t i = (size_t)key_hash(p, len) & mask;

	for (;;) {
		uint32_t r = b->keys[i];
		if (r == 0)
			return i;
		const proto_event *ev = b->rows[r - 1].ev;
		if (ev->key.len == len && memcmp(ev->key.p, p, len) == 0)
			return i;
		i = (i + 1) & mask;
	}
}

static void
keys_rehash(batch *b, size_t cap)
{
	uint32_t *old = b->keys;
	size_t old_cap = b->cap_keys;

	b->keys = st_xcalloc(cap, sizeof(*b->keys));
	b->cap_keys = cap;
	for (size_t i = 0; i < old_cap; i++) {
		if (old[i] == 0)
			continue;
		const proto_event *ev = b->rows[old[i] - 1].ev;
		b->keys[key_slot(b, ev->key.p, ev->key.len)] = old[i];
	}
	free(old);
}

batch *
batch_new(size_t max_events, size_t max_bytes)
{
	batch *b = st_xcalloc(1, sizeof(*b));

	ST_ASSERT(max_events > 0 && max_events < UINT32_MAX);
	b->max_events = max_events;
	b->max_bytes = max_bytes;
	return b;
}

void
batch_free(batch *b)
{
	if (b == NULL)
		return;
	free(b->reqs);
	free(b->ev_row);
	free(b->rows);
	free(b->keys);
	free(b);
}

st_err
batch_add(batch *b, void *owner, size_t n, size_t bytes, batch_event_fn at, const void *src)
{
	ST_ASSERT(n >= 1);
	if (b->n_reqs > 0 && (n > b->max_events - b->n_ev || bytes > b->max_bytes - ST_MIN(b->bytes, b->max_bytes)))
		return ST_EBUSY;
	if (b->n_reqs == 0 && n > b->max_events)
		return ST_EBUSY; /* larger than any batch: a caller bug, but never crash */

	b->reqs = grow(b->reqs, &b->cap_reqs, b->n_reqs + 1, sizeof(*b->reqs));
	b->ev_row = grow(b->ev_row, &b->cap_ev, b->n_ev + n, sizeof(*b->ev_row));
	b->rows = grow(b->rows, &b->cap_rows, b->n_rows + n, sizeof(*b->rows));
	b->reqs[b->n_reqs++] = (batch_req){ .owner = owner, .first = (uint32_t)b->n_ev, .n = (uint32_t)n };
	for (size_t i = 0; i < n; i++) {
		const proto_event *ev = at(src, i);
		size_t slot = 0;

		if (ev->has_key) {
			if ((b->n_keys + 1) * 2 > b->cap_keys)
				keys_rehash(b, b->cap_keys ? b->cap_keys * 2 : 256);
			slot = key_slot(b, ev->key.p, ev->key.len);
			if (b->keys[slot] != 0) {
				b->ev_row[b->n_ev++] = b->keys[slot] - 1;
				continue;
			}
		}
		b->rows[b->n_rows] = (batch_rowinfo){ .ev = ev };
		if (ev->has_key) {
			b->keys[slot] = (uint32_t)b->n_rows + 1;
			b->n_keys++;
		}
		b->ev_row[b->n_ev++] = (uint32_t)b->n_rows++;
	}
	b->bytes += bytes;
	return ST_OK;
}

size_t
batch_events(const batch *b)
{
	return b->n_ev;
}

size_t
batch_bytes(const batch *b)
{
	return b->bytes;
}

size_t
batch_requests(const batch *b)
{
	return b->n_reqs;
}

size_t
batch_rows(const batch *b)
{
	return b->n_rows;
}

bool
batch_empty(const batch *b)
{
	return b->n_reqs == 0;
}

const proto_event *
batch_row(const batch *b, size_t i)
{
	ST_ASSERT(i < b->n_rows);
	return b->rows[i].ev;
}

void
batch_json_string(st_buf *out, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t run = 0;

	st_buf_putc(out, '"');
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		st_buf_append(out, s + run, i - run);
		run = i + 1;
		if (c == '"' || c == '\\') {
			st_buf_putc(out, '\\');
			st_buf_putc(out, (char)c);
		} else {
			char e[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15] };
			st_buf_append(out, e, sizeof(e));
		}
	}
	st_buf_append(out, s + run, len - run);
	st_buf_putc(out, '"');
}

void
batch_encode(const batch *b, st_buf *topics, st_buf *abouts, st_buf *datas, st_buf *keys)
{
	pgarray_writer wt, wa, wd, wk;
	st_buf one;

	st_buf_init(&one);
	pgarray_begin(&wt, topics, (uint32_t)b->n_rows);
	pgarray_begin(&wa, abouts, (uint32_t)b->n_rows);
	pgarray_begin(&wd, datas, (uint32_t)b->n_rows);
	pgarray_begin(&wk, keys, (uint32_t)b->n_rows);
	for (size_t i = 0; i < b->n_rows; i++) {
		const proto_event *ev = b->rows[i].ev;

		pgarray_add(&wt, ev->topic.p, ev->topic.len);
		st_buf_reset(&one);
		st_buf_putc(&one, '[');
		for (uint32_t j = 0; j < ev->n_about; j++) {
			if (j > 0)
				st_buf_putc(&one, ',');
			batch_json_string(&one, ev->about[j].p, ev->about[j].len);
		}
		st_buf_putc(&one, ']');
		pgarray_add(&wa, one.p, one.len);
		if (ev->has_data)
			pgarray_add(&wd, ev->data.p, ev->data.len);
		else
			pgarray_add_null(&wd);
		if (ev->has_key)
			pgarray_add(&wk, ev->key.p, ev->key.len);
		else
			pgarray_add_null(&wk);
	}
	ST_ASSERT(pgarray_end(&wt) == ST_OK && pgarray_end(&wa) == ST_OK && pgarray_end(&wd) == ST_OK &&
	          pgarray_end(&wk) == ST_OK);
	st_buf_fini(&one);
}

void
batch_row_set(batch *b, size_t i, uint64_t seq, bool fresh)
{
	ST_ASSERT(i < b->n_rows);
	b->rows[i].seq = seq;
	b->rows[i].fresh = fresh;
}

uint64_t
batch_row_seq(const batch *b, size_t i)
{
	ST_ASSERT(i < b->n_rows);
	return b->rows[i].seq;
}

bool
batch_row_fresh(const batch *b, size_t i)
{
	ST_ASSERT(i < b->n_rows);
	return b->rows[i].fresh;
}

void *
batch_req_owner(const batch *b, size_t i)
{
	ST_ASSERT(i < b->n_reqs);
	return b->reqs[i].owner;
}

size_t
batch_req_count(const batch *b, size_t i)
{
	ST_ASSERT(i < b->n_reqs);
	return b->reqs[i].n;
}

void
batch_req_seqs(const batch *b, size_t i, uint64_t *seqs)
{
	ST_ASSERT(i < b->n_reqs);
	const batch_req *r = &b->reqs[i];

	for (uint32_t j = 0; j < r->n; j++)
		seqs[j] = b->rows[b->ev_row[r->first + j]].seq;
}

void
batch_reset(batch *b)
{
	size_t me = b->max_events, mb = b->max_bytes;

	free(b->reqs);
	free(b->ev_row);
	free(b->rows);
	free(b->keys);
	memset(b, 0, sizeof(*b));
	b->max_events = me;
	b->max_bytes = mb;
}
