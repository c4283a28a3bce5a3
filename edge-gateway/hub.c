/*
 * hub: topic -> subscribers, for fan-out without scanning every stream.
 *
 * DESIGN.  Topics live in an open-addressing hash table (FNV-1a, linear
 * probing, at most half full, doubled when it would pass that, backward-
 * shift deletion so no tombstones accumulate).  Each topic holds a vector of
 * its subscriptions: a frame costs one lookup, then a walk of a contiguous
 * array, which is what fan-out to thousands of streams wants.  A
 * subscription records, for each of its topics, the topic and its own index
 * in that topic's vector, so unsubscribing is O(topics): swap the last
 * subscriber into the hole and fix that one's recorded index.  A topic whose
 * last subscriber leaves is removed from the table and freed.
 *
 * Callbacks may unsubscribe anything (a stream dropped by ADR-0197 leaves
 * the hub from inside its deliver callback).  Removing entries from a vector
 * that is being walked would skip or repeat subscribers, so while any hub
 * call is running (depth > 0) an unsubscribe only marks the subscription
 * dead - it is skipped from then on - and queues it; the outermost call
 * reaps the queue when it returns (nng's reap list, redis's
 * freeClientAsync).
 *
 * Delivery goes stream by stream (hub_publish): each subscription takes
 * all its frames of a batch, then its one flush, marked served for the
 * batch by a generation number (no marks to clear).  A one-topic
 * subscription is first offered the topic's frames as one array (take),
 * gathered once per topic and batch: a stream with nothing waiting writes
 * them as one shared copy instead of a deliver per frame (issue 27).
 */
#include "hub.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "st_dlist.h"
#include "st_slab.h"
#include "st_util.h"

#define TABLE_MIN 16u
#define VEC_MIN 2u

typedef struct topic {
	uint64_t hash;
	uint64_t gen; /* hub.gen of the last batch that delivered it */
	hub_sub **subs;
	uint32_t n, cap;
	uint32_t len;
	char name[];
} topic;

struct hub_sub {
	void *stream;
	st_dlink all;         /* on hub.all: the registry, for hub_each and hub_free */
	hub_sub *dead_next;   /* awaiting reap */
	uint64_t touched_gen; /* hub.gen of the last batch it was served in */
	uint32_t n;           /* topics */
	bool dead;
	bool slab;  /* from hub.one (subscribed to one topic), else malloc'd */
	topic *t[]; /* n topics, then uint32_t pos[n]: index in t[i]->subs */
};

struct hub {
	hub_deliver_fn deliver;
	hub_flush_fn flush;
	hub_take_fn take; /* NULL: frame by frame only */
	topic **table;
	uint32_t cap, n_topics;
	size_t count;
	st_dlink all; /* every hub_sub (hub_sub.all) */
	hub_sub *dead;
	topic **tf; /* owned scratch of hub_publish: each frame's topic (NULL: none here) */
	frame **tk; /* owned scratch of hub_publish: one topic's frames, offered to take */
	size_t tf_cap;
	uint64_t gen;
	unsigned depth; /* hub calls in progress (callbacks running) */
	st_slab *one;   /* owned: the hub_subs of one topic, the common case (st_slab.h) */
};

static uint32_t *
sub_pos(hub_sub *s)
{
	return (uint32_t *)(void *)(s->t + s->n);
}

/* ---- the topic table ------------------------------------------------------- */

static topic *
table_find(const hub *h, uint64_t hash, const char *name, size_t len)
{
	uint32_t m = h->cap - 1;

	for (uint32_t i = (uint32_t)hash & m; h->table[i] != NULL; i = (i + 1) & m) {
		topic *t = h->table[i];

		if (t->hash == hash && t->len == len && memcmp(t->name, name, len) == 0)
			return t;
	}
	return NULL;
}

static void
table_put(topic **table, uint32_t cap, topic *t)
{
	uint32_t i = (uint32_t)t->hash & (cap - 1);

	while (table[i] != NULL)
		i = (i + 1) & (cap - 1);
	table[i] = t;
}

static void
table_grow(hub *h)
{
	uint32_t cap = h->cap * 2;
	topic **nt = st_xcalloc(cap, sizeof(*nt));

	for (uint32_t i = 0; i < h->cap; i++)
		if (h->table[i] != NULL)
			table_put(nt, cap, h->table[i]);
	free(h->table);
	h->table = nt;
	h->cap = cap;
}

static topic *
topic_get(hub *h, const char *name, size_t len)
{
	uint64_t hash = st_hash_bytes(name, len);
	topic *t = table_find(h, hash, name, len);

	if (t != NULL)
		return t;
	if ((h->n_topics + 1) * 2 > h->cap)
		table_grow(h);
	t = st_xcalloc(1, sizeof(*t) + len + 1);
	t->hash = hash;
	t->len = (uint32_t)len;
	memcpy(t->name, name, len);
	table_put(h->table, h->cap, t);
	h->n_topics++;
	return t;
}

static void
topic_remove(hub *h, topic *t)
{
	uint32_t m = h->cap - 1, i = (uint32_t)t->hash & m, j;

	while (h->table[i] != t)
		i = (i + 1) & m;
	for (j = i;;) {
		uint32_t k;

		j = (j + 1) & m;
		if (h->table[j] == NULL)
			break;
		k = (uint32_t)h->table[j]->hash & m;
		/* The entry at j may move back to i only if its home is not in (i, j]. */
		if ((i < j) ? (k <= i || k > j) : (k <= i && k > j)) {
			h->table[i] = h->table[j];
			i = j;
		}
	}
	h->table[i] = NULL;
	h->n_topics--;
	free(t->subs);
	free(t);
}

/* ---- subscriptions ----------------------------------------------------------- */

static uint32_t
topic_add_sub(topic *t, hub_sub *s)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? t->cap * 2 : VEC_MIN;
		t->subs = st_xrealloc(t->subs, t->cap * sizeof(*t->subs));
	}
	t->subs[t->n] = s;
	return t->n++;
}

/* Takes s out of every topic and the registry, then frees it. */
static void
sub_destroy(hub *h, hub_sub *s)
{
	uint32_t *pos = sub_pos(s);

	for (uint32_t i = 0; i < s->n; i++) {
		topic *t = s->t[i];
		hub_sub *last = t->subs[--t->n];

		if (last != s) {
			uint32_t *lpos = sub_pos(last), j = 0;

			t->subs[pos[i]] = last;
			while (last->t[j] != t)
				j++;
			lpos[j] = pos[i];
		}
		if (t->n == 0) {
			topic_remove(h, t);
		} else if (t->cap > VEC_MIN * 4 && t->n <= t->cap / 4) {
			/* give back what a crowd of subscribers grew */
			t->cap /= 2;
			t->subs = st_xrealloc(t->subs, t->cap * sizeof(*t->subs));
		}
	}
	st_dlink_unlink(&s->all);
	if (s->slab)
		st_slab_put(h->one, s);
	else
		free(s);
}

static void
enter(hub *h)
{
	h->depth++;
}

static void
leave(hub *h)
{
	if (--h->depth > 0)
		return;
	while (h->dead != NULL) {
		hub_sub *s = h->dead;

		h->dead = s->dead_next;
		sub_destroy(h, s);
	}
}

/* ---- the API ----------------------------------------------------------------- */

hub *
hub_new(hub_deliver_fn deliver, hub_flush_fn flush, hub_take_fn take)
{
	hub *h = st_xcalloc(1, sizeof(*h));

	h->deliver = deliver;
	h->flush = flush;
	h->take = take;
	h->cap = TABLE_MIN;
	h->table = st_xcalloc(h->cap, sizeof(*h->table));
	h->one = st_slab_new(sizeof(hub_sub) + sizeof(topic *) + sizeof(uint32_t));
	st_dlist_init(&h->all);
	return h;
}

void
hub_free(hub *h)
{
	if (h == NULL)
		return;
	ST_ASSERT(h->depth == 0);
	for (st_dlink *l; (l = st_dlist_first(&h->all)) != NULL;)
		sub_destroy(h, ST_CONTAINER_OF(l, hub_sub, all)); /* the last one out frees each topic */
	free(h->tf);
	free(h->tk);
	free(h->table);
	st_slab_free(h->one);
	free(h);
}

hub_sub *
hub_subscribe(hub *h, void *stream, const char *const *topics, const size_t *lens, size_t n)
{
	hub_sub *s;
	uint32_t *pos, k = 0;

	ST_ASSERT(h->depth == 0);
	if (n == 0 || n > HUB_MAX_TOPICS)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (lens[i] == 0 || lens[i] > HUB_MAX_TOPIC_LEN)
			return NULL;
	/* Sized for n; duplicates leave a little slack, at most 64 entries. */
	if (n == 1) {
		s = st_slab_get(h->one);
		s->slab = true;
	} else {
		s = st_xcalloc(1, sizeof(*s) + n * (sizeof(topic *) + sizeof(uint32_t)));
	}
	s->stream = stream;
	s->n = (uint32_t)n; /* so that sub_pos points past n topics */
	pos = sub_pos(s);
	for (size_t i = 0; i < n; i++) {
		topic *t = topic_get(h, topics[i], lens[i]);
		uint32_t j;

		for (j = 0; j < k && s->t[j] != t; j++)
			;
		if (j < k)
			continue; /* repeated topic: folded */
		s->t[k] = t;
		pos[k] = topic_add_sub(t, s);
		k++;
	}
	if (k < n) /* close the gap between the topics and their positions */
		memmove(s->t + k, pos, k * sizeof(uint32_t));
	s->n = k;
	st_dlist_push_front(&h->all, &s->all);
	h->count++;
	return s;
}

void
hub_unsubscribe(hub *h, hub_sub *s)
{
	if (s == NULL || s->dead)
		return;
	s->dead = true;
	h->count--;
	if (h->depth > 0) {
		s->dead_next = h->dead;
		h->dead = s;
		return;
	}
	sub_destroy(h, s);
}

/* Whether t is one of s's topics (s holds at most HUB_MAX_TOPICS). */
static bool
sub_has_topic(const hub_sub *s, const topic *t)
{
	for (uint32_t i = 0; i < s->n; i++)
		if (s->t[i] == t)
			return true;
	return false;
}

/*
 * Stream by stream: a subscriber gets every frame of the batch it wants, in
 * order, then its flush, before the next subscriber gets anything.  So its
 * burst reaches the socket in one go, at once (the first streams do not
 * wait for the last to be queued), and its queue and connection are touched
 * while they are in the cache, not once per frame across every stream.
 * Topics are taken in the order they first appear: a subscriber met at
 * frame i has no topic among frames[0..i) (it would have been met there),
 * so its frames are those of frames[i..n) whose topic is one of its own.
 */
void
hub_publish(hub *h, frame *const *frames, size_t n)
{
	topic *t = NULL;

	ST_ASSERT(h->depth == 0);
	enter(h);
	h->gen++;
	if (n > h->tf_cap) {
		h->tf_cap = n;
		h->tf = st_xrealloc(h->tf, n * sizeof(*h->tf));
		h->tk = st_xrealloc(h->tk, n * sizeof(*h->tk));
	}
	for (size_t i = 0; i < n; i++) {
		size_t len;
		const char *name = frame_topic(frames[i], &len);

		/* Batches often repeat a topic: skip the lookup then. */
		if (name != NULL && (t == NULL || t->len != len || memcmp(t->name, name, len) != 0))
			t = table_find(h, st_hash_bytes(name, len), name, len);
		h->tf[i] = name != NULL ? t : NULL;
	}
	for (size_t i = 0; i < n; i++) {
		topic *ti = h->tf[i];
		size_t nk = 0;

		if (ti == NULL || ti->gen == h->gen)
			continue;
		ti->gen = h->gen;
		/* i is the topic's first frame: its frames are tf[k] == ti from here on. */
		for (size_t k = i; k < n && h->take != NULL; k++)
			if (h->tf[k] == ti)
				h->tk[nk++] = frames[k];
		/* Unsubscribes are deferred (depth > 0), so ti->subs is stable here. */
		for (uint32_t j = 0; j < ti->n; j++) {
			hub_sub *s = ti->subs[j];

			if (s->dead || s->touched_gen == h->gen)
				continue;
			s->touched_gen = h->gen;
			if (s->n == 1 && h->take != NULL && h->take(s->stream, h->tk, nk))
				continue;
			for (size_t k = i; k < n && !s->dead; k++)
				if (h->tf[k] == ti || (h->tf[k] != NULL && s->n > 1 && sub_has_topic(s, h->tf[k])))
					h->deliver(s->stream, frames[k]);
			if (!s->dead)
				h->flush(s->stream);
		}
	}
	leave(h);
}

size_t
hub_count(const hub *h)
{
	return h->count;
}

void
hub_each(hub *h, void (*fn)(void *stream, void *arg), void *arg)
{
	ST_ASSERT(h->depth == 0);
	enter(h);
	for (st_dlink *l = st_dlist_first(&h->all); l != NULL; l = st_dlist_after(&h->all, l)) {
		hub_sub *s = ST_CONTAINER_OF(l, hub_sub, all);

		if (!s->dead)
			fn(s->stream, arg);
	}
	leave(h);
}
