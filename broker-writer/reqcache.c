/*
 * reqcache: a chained hash table over (id, length) with every entry, plus a
 * FIFO of the answered entries in answer order, which is also their age
 * order: expiry and eviction both take from its head.  The bucket array is
 * sized once for the answered bound (pending entries are few: the writer's
 * works), so nothing rehashes while a lock is held.
 */
#include "reqcache.h"

#include <stdlib.h>
#include <string.h>

#include "st_util.h"

typedef struct ent {
	struct ent *next;          /* bucket chain */
	struct ent *older, *newer; /* answered FIFO */
	reqcache_key k;
	void *owner;          /* pending: non-NULL */
	unsigned char *reply; /* answered */
	size_t reply_len;
	uint64_t at;
} ent;

struct reqcache {
	ent **buckets;
	size_t mask;
	ent *oldest, *newest;
	size_t n_pending, n_answered, bytes;
	size_t max_answered, max_bytes;
	uint64_t ttl;
};

static size_t
bucket_of(const reqcache *c, uint32_t id, size_t len)
{
	uint64_t x = ((uint64_t)id << 32 | (uint32_t)len) * 0x9e3779b97f4a7c15ull;

	return (size_t)(x >> 32) & c->mask;
}

reqcache *
reqcache_new(size_t max_answered, size_t max_bytes, uint64_t ttl_ms)
{
	reqcache *c = st_xcalloc(1, sizeof(*c));
	size_t n = 1024;

	ST_ASSERT(max_answered >= 1 && max_bytes >= 1 && ttl_ms >= 1);
	while (n < max_answered + 1024)
		n *= 2;
	c->buckets = st_xcalloc(n, sizeof(*c->buckets));
	c->mask = n - 1;
	c->max_answered = max_answered;
	c->max_bytes = max_bytes;
	c->ttl = ttl_ms;
	return c;
}

static void
unlink_bucket(reqcache *c, ent *e)
{
	ent **pp = &c->buckets[bucket_of(c, e->k.id, e->k.len)];

	while (*pp != e)
		pp = &(*pp)->next;
	*pp = e->next;
}

static void
drop_answered(reqcache *c, ent *e)
{
	unlink_bucket(c, e);
	if (e->older)
		e->older->newer = e->newer;
	else
		c->oldest = e->newer;
	if (e->newer)
		e->newer->older = e->older;
	else
		c->newest = e->older;
	c->n_answered--;
	c->bytes -= e->reply_len + sizeof(*e);
	free(e->reply);
	free(e);
}

static void
expire(reqcache *c, uint64_t now)
{
	while (c->oldest != NULL && now - c->oldest->at >= c->ttl)
		drop_answered(c, c->oldest);
}

void
reqcache_free(reqcache *c)
{
	if (c == NULL)
		return;
	for (size_t i = 0; i <= c->mask; i++) {
		ent *e = c->buckets[i], *next;
		for (; e != NULL; e = next) {
			next = e->next;
			free(e->reply);
			free(e);
		}
	}
	free(c->buckets);
	free(c);
}

bool
reqcache_maybe(reqcache *c, uint32_t id, size_t len, uint64_t now)
{
	expire(c, now);
	for (const ent *e = c->buckets[bucket_of(c, id, len)]; e != NULL; e = e->next)
		if (e->k.id == id && e->k.len == len)
			return true;
	return false;
}

reqcache_state
reqcache_find(reqcache *c, const reqcache_key *k, uint64_t now, void **owner, const void **reply, size_t *reply_len)
{
	expire(c, now);
	for (ent *e = c->buckets[bucket_of(c, k->id, k->len)]; e != NULL; e = e->next) {
		if (e->k.id != k->id || e->k.len != k->len || e->k.hash != k->hash)
			continue;
		if (e->owner != NULL) {
			*owner = e->owner;
			return REQCACHE_PENDING;
		}
		*reply = e->reply;
		*reply_len = e->reply_len;
		return REQCACHE_ANSWERED;
	}
	return REQCACHE_NEW;
}

void
reqcache_add(reqcache *c, const reqcache_key *k, void *owner)
{
	ent *e = st_xcalloc(1, sizeof(*e));
	size_t b = bucket_of(c, k->id, k->len);

	ST_ASSERT(owner != NULL);
	e->k = *k;
	e->owner = owner;
	e->next = c->buckets[b];
	c->buckets[b] = e;
	c->n_pending++;
}

void
reqcache_answer(reqcache *c, const reqcache_key *k, void *owner, const void *reply, size_t reply_len, uint64_t now)
{
	ent *e = c->buckets[bucket_of(c, k->id, k->len)];

	while (e != NULL && e->owner != owner)
		e = e->next;
	if (e == NULL)
		return;
	c->n_pending--;
	if (reply == NULL || reply_len + sizeof(*e) > c->max_bytes) {
		unlink_bucket(c, e);
		free(e);
		return;
	}
	e->owner = NULL;
	e->reply = st_xmalloc(reply_len ? reply_len : 1);
	memcpy(e->reply, reply, reply_len);
	e->reply_len = reply_len;
	e->at = now;
	e->older = c->newest;
	e->newer = NULL;
	if (c->newest)
		c->newest->newer = e;
	else
		c->oldest = e;
	c->newest = e;
	c->n_answered++;
	c->bytes += reply_len + sizeof(*e);
	expire(c, now);
	while (c->n_answered > c->max_answered || c->bytes > c->max_bytes)
		drop_answered(c, c->oldest);
}

size_t
reqcache_pending(const reqcache *c)
{
	return c->n_pending;
}

size_t
reqcache_answered(const reqcache *c)
{
	return c->n_answered;
}

size_t
reqcache_bytes(const reqcache *c)
{
	return c->bytes;
}

size_t
reqcache_entry_size(void)
{
	return sizeof(ent);
}
