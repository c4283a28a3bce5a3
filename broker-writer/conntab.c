/*
 * conntab: a fixed array of `cap` entries searched linearly (cap is a few
 * hundred: a scan costs less than decoding one request).  id 0 marks a
 * free entry; nng never gives a pipe id 0.
 */
#include "conntab.h"

#include <stdlib.h>
#include <string.h>

#include "st_util.h"

typedef struct entry {
	uint32_t id;
	bool seen;       /* completed a request */
	uint64_t added;  /* ms: arrival (the age for displacement) */
	uint64_t active; /* ms: arrival, or when request bytes last arrived (the idle deadline counts from it) */
	conntab_addr addr;
} entry;

struct conntab {
	entry *e; /* owned, cap entries */
	size_t cap, per_addr, n;
	uint64_t idle_ms, displace_ms;
};

conntab *
conntab_new(size_t cap, size_t per_addr, uint64_t idle_ms, uint64_t displace_ms)
{
	conntab *t = st_xcalloc(1, sizeof(*t));

	ST_ASSERT(cap >= 1 && per_addr >= 1 && idle_ms >= 1);
	t->e = st_xcalloc(cap, sizeof(*t->e));
	t->cap = cap;
	t->per_addr = per_addr;
	t->idle_ms = idle_ms;
	t->displace_ms = displace_ms;
	return t;
}

void
conntab_free(conntab *t)
{
	if (t == NULL)
		return;
	free(t->e);
	free(t);
}

static bool
same_addr(const conntab_addr *a, const conntab_addr *b)
{
	return a->len == b->len && memcmp(a->b, b->b, a->len) == 0;
}

static entry *
find(conntab *t, uint32_t id)
{
	for (size_t i = 0; i < t->cap; i++)
		if (t->e[i].id == id)
			return &t->e[i];
	return NULL;
}

/*
 * The oldest entry that completed no request, sent nothing since its SP
 * header (active == added) and is displace_ms old, among those from a
 * (NULL: all).
 */
static entry *
oldest_unseen(conntab *t, const conntab_addr *a, uint64_t now)
{
	entry *best = NULL;

	for (size_t i = 0; i < t->cap; i++) {
		entry *x = &t->e[i];
		if (x->id == 0 || x->seen || x->active != x->added || (a != NULL && !same_addr(&x->addr, a)) ||
		    now < x->added + t->displace_ms)
			continue;
		if (best == NULL || x->added < best->added)
			best = x;
	}
	return best;
}

conntab_verdict
conntab_admit(conntab *t, uint32_t id, const conntab_addr *a, uint64_t now, uint32_t *displaced)
{
	entry *slot = NULL;

	ST_ASSERT(id != 0);
	*displaced = 0;
	if (a->len > 0) {
		size_t same = 0;
		for (size_t i = 0; i < t->cap; i++)
			if (t->e[i].id != 0 && same_addr(&t->e[i].addr, a))
				same++;
		if (same >= t->per_addr && (slot = oldest_unseen(t, a, now)) == NULL)
			return CONNTAB_REFUSE_ADDR;
	}
	if (slot == NULL && t->n >= t->cap && (slot = oldest_unseen(t, NULL, now)) == NULL)
		return CONNTAB_REFUSE_GLOBAL;
	if (slot != NULL) {
		*displaced = slot->id;
		t->n--;
	} else {
		slot = find(t, 0);
		ST_ASSERT(slot != NULL);
	}
	slot->id = id;
	slot->seen = false;
	slot->added = now;
	slot->active = now;
	slot->addr = *a;
	t->n++;
	return CONNTAB_ADMIT;
}

void
conntab_seen(conntab *t, uint32_t id)
{
	entry *x = id != 0 ? find(t, id) : NULL;

	if (x != NULL)
		x->seen = true;
}

void
conntab_remove(conntab *t, uint32_t id)
{
	entry *x = id != 0 ? find(t, id) : NULL;

	if (x != NULL) {
		memset(x, 0, sizeof(*x));
		t->n--;
	}
}

size_t
conntab_expired(conntab *t, uint64_t now, uint64_t behind_at, uint32_t *ids, size_t max)
{
	size_t k = 0;

	for (size_t i = 0; i < t->cap && k < max; i++) {
		entry *x = &t->e[i];
		if (x->id == 0 || x->seen || now < (x->active > behind_at ? x->active : behind_at) + t->idle_ms)
			continue;
		ids[k++] = x->id;
		memset(x, 0, sizeof(*x));
		t->n--;
	}
	return k;
}

size_t
conntab_count(const conntab *t)
{
	return t->n;
}

bool
conntab_peer(conntab *t, const unsigned char peer[18], uint64_t data_at)
{
	for (size_t i = 0; i < t->cap; i++) {
		entry *x = &t->e[i];
		if (x->id != 0 && memcmp(x->addr.peer, peer, 18) == 0) {
			if (!x->seen && data_at >= x->added + CONNTAB_DATA_MARGIN_MS && data_at > x->active)
				x->active = data_at;
			return true;
		}
	}
	return false;
}
