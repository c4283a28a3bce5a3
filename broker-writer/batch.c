/*
 * batch: requests accumulated between two flushes.
 *
 * Three growable arrays: reqs (owner, first event, count, bytes) in arrival
 * order; evs, every accepted event with its SQL row; rows, the distinct
 * events sent to SQL with the seq/fresh answer beside them.  An event whose
 * (topic, key) was already seen in this batch does not get a row of its
 * own: its row is the first one's, so both receive the same seq (a producer retrying
 * within one flush interval gets the seq stored first, just as it would for
 * a key committed earlier on that topic).  The key index is an
 * open-addressing table of row numbers keyed by (topic, key), at most half
 * full, rebuilt on growth.
 *
 * A request is checked against the bounds before anything is appended, and
 * its keys are only inserted after the check, so a refused request leaves no
 * trace.  All sizes are bounded by max_events, so the arrays never grow
 * past what the bounds allow.
 *
 * batch_take splits by whole requests.  The taken ones are re-added to the
 * destination and the rest to a fresh batch, so the folding is recomputed
 * on each side: an event whose first key occurrence went to the earlier
 * flush becomes a row of the later one, and SQL (which runs it after the
 * earlier commit) answers with the stored seq.  Each event keeps its own
 * pointer for that reason, not only its row's.
 *
 * SQL's answer is compact (broker_append2): prev, the first seq, the number
 * of fresh rows and the (ordinal, seq) of rows whose key was stored; fresh
 * row k (in row order) gets first + k - 1.  It is checked whole before any
 * row is touched.
 */
#include "batch.h"

#include <stdlib.h>
#include <string.h>

#include "st_pgarray.h"
#include "st_util.h"

typedef struct batch_req {
	void *owner;
	uint32_t first; /* index into evs */
	uint32_t n;
	size_t bytes;
} batch_req;

typedef struct batch_ev {
	const proto_event *ev; /* the event itself (its row may be an earlier one with its key) */
	uint32_t row;
} batch_ev;

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
	batch_ev *evs;
	size_t n_ev, cap_ev;
	batch_rowinfo *rows;
	size_t n_rows, cap_rows;
	uint32_t *keys;  /* row + 1, 0 = empty slot */
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

/*
 * A key is unique per (topic, key) (CONTRACT: the same key on another topic
 * is another event), so the table is indexed by both: folding by the key
 * alone let an event on junk/x take the row, and the seq, of the event with
 * the same key on payments/777.
 */
static size_t
key_hash(const proto_event *ev)
{
	uint64_t h = st_hash_bytes(ev->topic.p, ev->topic.len);

	/* combined, not concatenated: ("a", "bc") and ("ab", "c") must differ */
	return (size_t)(h * 0x9e3779b97f4a7c15ULL ^ st_hash_bytes(ev->key.p, ev->key.len));
}

static bool
same_key(const proto_event *a, const proto_event *b)
{
	return a->key.len == b->key.len && a->topic.len == b->topic.len &&
	       memcmp(a->key.p, b->key.p, a->key.len) == 0 && memcmp(a->topic.p, b->topic.p, a->topic.len) == 0;
}

/* Returns the slot holding ev's (topic, key), or the empty slot where it belongs. */
static size_t
key_slot(const batch *b, const proto_event *ev)
{
	size_t mask = b->cap_keys - 1;
	size_t i = key_hash(ev) & mask;

	for (;;) {
		uint32_t r = b->keys[i];
		if (r == 0 || same_key(b->rows[r - 1].ev, ev))
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
		b->keys[key_slot(b, b->rows[old[i] - 1].ev)] = old[i];
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
	free(b->evs);
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
	b->evs = grow(b->evs, &b->cap_ev, b->n_ev + n, sizeof(*b->evs));
	b->rows = grow(b->rows, &b->cap_rows, b->n_rows + n, sizeof(*b->rows));
	b->reqs[b->n_reqs++] =
		(batch_req){ .owner = owner, .first = (uint32_t)b->n_ev, .n = (uint32_t)n, .bytes = bytes };
	for (size_t i = 0; i < n; i++) {
		const proto_event *ev = at(src, i);
		size_t slot = 0;

		if (ev->has_key) {
			if ((b->n_keys + 1) * 2 > b->cap_keys)
				keys_rehash(b, b->cap_keys ? b->cap_keys * 2 : 256);
			slot = key_slot(b, ev);
			if (b->keys[slot] != 0) {
				b->evs[b->n_ev++] = (batch_ev){ .ev = ev, .row = b->keys[slot] - 1 };
				continue;
			}
		}
		b->rows[b->n_rows] = (batch_rowinfo){ .ev = ev };
		if (ev->has_key) {
			b->keys[slot] = (uint32_t)b->n_rows + 1;
			b->n_keys++;
		}
		b->evs[b->n_ev++] = (batch_ev){ .ev = ev, .row = (uint32_t)b->n_rows++ };
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

bool
batch_has_keys(const batch *b)
{
	return b->n_keys > 0;
}

void
batch_encode(const batch *b, st_buf *topics, st_buf *abouts, st_buf *datas, st_buf *keys)
{
	st_pgarray_writer wt, wa, wd, wk;
	bool with_keys = batch_has_keys(b);
	st_buf one;

	st_buf_init(&one);
	st_pgarray_begin(&wt, topics, (uint32_t)b->n_rows);
	st_pgarray_begin(&wa, abouts, (uint32_t)b->n_rows);
	st_pgarray_begin(&wd, datas, (uint32_t)b->n_rows);
	if (with_keys)
		st_pgarray_begin(&wk, keys, (uint32_t)b->n_rows);
	for (size_t i = 0; i < b->n_rows; i++) {
		const proto_event *ev = b->rows[i].ev;

		st_pgarray_add(&wt, ev->topic.p, ev->topic.len);
		if (ev->n_about == 0) {
			st_pgarray_add(&wa, "{}", 2);
		} else {
			st_buf_reset(&one);
			st_pgarray_literal_begin(&one);
			for (uint32_t j = 0; j < ev->n_about; j++)
				st_pgarray_literal_add(&one, j, ev->about[j].p, ev->about[j].len);
			st_pgarray_literal_end(&one);
			st_pgarray_add(&wa, one.p, one.len);
		}
		if (ev->has_data)
			st_pgarray_add(&wd, ev->data.p, ev->data.len);
		else
			st_pgarray_add_null(&wd);
		if (!with_keys)
			continue;
		if (ev->has_key)
			st_pgarray_add(&wk, ev->key.p, ev->key.len);
		else
			st_pgarray_add_null(&wk);
	}
	ST_ASSERT(st_pgarray_end(&wt) == ST_OK && st_pgarray_end(&wa) == ST_OK && st_pgarray_end(&wd) == ST_OK &&
		  (!with_keys || st_pgarray_end(&wk) == ST_OK));
	st_buf_fini(&one);
}

st_err
batch_apply(batch *b, uint64_t prev, uint64_t first, uint64_t n_fresh, const uint64_t *dup_ords,
	    const uint64_t *dup_seqs, size_t n_dup)
{
	uint64_t next = first;
	size_t d = 0;

	/* the whole answer is checked before any row changes */
	if (n_dup > b->n_rows || n_fresh != b->n_rows - n_dup)
		return ST_EINVAL;
	if (n_fresh > 0 && (first <= prev || first > INT64_MAX - n_fresh))
		return ST_EINVAL;
	for (size_t i = 0; i < n_dup; i++) {
		if (dup_ords[i] < 1 || dup_ords[i] > b->n_rows || (i > 0 && dup_ords[i] <= dup_ords[i - 1]))
			return ST_EINVAL;
		/* a stored key's event was committed before this flush read prev */
		if (dup_seqs[i] < 1 || dup_seqs[i] > prev)
			return ST_EINVAL;
	}
	for (size_t i = 0; i < b->n_rows; i++) {
		if (d < n_dup && dup_ords[d] == i + 1) {
			b->rows[i].seq = dup_seqs[d++];
			b->rows[i].fresh = false;
		} else {
			b->rows[i].seq = next++;
			b->rows[i].fresh = true;
		}
	}
	return ST_OK;
}

static const proto_event *
at_ev(const void *src, size_t i)
{
	return ((const batch_ev *)src)[i].ev;
}

static void
swap(batch *a, batch *b)
{
	batch t = *a;
	size_t me = a->max_events, mb = a->max_bytes;

	*a = *b;
	*b = t;
	/* the bounds belong to the object, the contents move */
	b->max_events = a->max_events;
	b->max_bytes = a->max_bytes;
	a->max_events = me;
	a->max_bytes = mb;
}

void
batch_take(batch *dst, batch *src, size_t max_events, size_t max_bytes)
{
	size_t k = 0, n = 0, bytes = 0;

	ST_ASSERT(batch_empty(dst) && max_events > 0);
	if (src->n_ev <= max_events && src->bytes <= max_bytes) {
		swap(dst, src);
		return;
	}
	/* whole requests, in arrival order, at least one */
	while (k < src->n_reqs &&
	       (k == 0 || (n + src->reqs[k].n <= max_events && bytes + src->reqs[k].bytes <= max_bytes))) {
		n += src->reqs[k].n;
		bytes += src->reqs[k++].bytes;
	}
	batch *rest = batch_new(src->max_events, src->max_bytes);

	for (size_t i = 0; i < src->n_reqs; i++) {
		const batch_req *r = &src->reqs[i];
		/* cannot fail: each side holds a prefix or a suffix of what src accepted */
		st_err rv = batch_add(i < k ? dst : rest, r->owner, r->n, r->bytes, at_ev, &src->evs[r->first]);
		ST_ASSERT(rv == ST_OK);
	}
	swap(src, rest);
	batch_free(rest);
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
		seqs[j] = b->rows[b->evs[r->first + j].row].seq;
}

void
batch_reset(batch *b)
{
	size_t me = b->max_events, mb = b->max_bytes;

	free(b->reqs);
	free(b->evs);
	free(b->rows);
	free(b->keys);
	memset(b, 0, sizeof(*b));
	b->max_events = me;
	b->max_bytes = mb;
}
