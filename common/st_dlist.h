/*
 * st_dlist: the one intrusive doubly linked list of the project (the
 * Linux / h2o linklist shape).  A list is a sentinel st_dlink initialised
 * with st_dlist_init; an element embeds an st_dlink per list it can be on
 * and is found back with ST_CONTAINER_OF.  Every operation is O(1) and
 * allocates nothing, so a stream can leave every list it is on from any
 * callback.  A link that is on no list has next == NULL (a zeroed struct
 * qualifies), so st_dlink_unlink is safe to call twice.
 *
 * Iteration that may unlink the current element reads the next one first:
 *     for (n = st_dlist_first(&l); n != NULL; n = next) {
 *             next = st_dlist_after(&l, n);
 *             ...
 *     }
 * Not thread-safe: a list belongs to one loop.
 */
#ifndef ST_DLIST_H
#define ST_DLIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct st_dlink {
	struct st_dlink *prev, *next;
} st_dlink;

/* The element of type `type` whose member `member` is at p. */
#define ST_CONTAINER_OF(p, type, member) ((type *)(void *)((char *)(p)-offsetof(type, member)))

static inline void
st_dlist_init(st_dlink *l)
{
	l->prev = l->next = l;
}

static inline bool
st_dlist_empty(const st_dlink *l)
{
	return l->next == l;
}

static inline bool
st_dlink_linked(const st_dlink *n)
{
	return n->next != NULL;
}

static inline void
st_dlink_insert_(st_dlink *prev, st_dlink *n)
{
	n->prev = prev;
	n->next = prev->next;
	prev->next->prev = n;
	prev->next = n;
}

static inline void
st_dlist_push_front(st_dlink *l, st_dlink *n)
{
	st_dlink_insert_(l, n);
}

static inline void
st_dlist_push_back(st_dlink *l, st_dlink *n)
{
	st_dlink_insert_(l->prev, n);
}

/* Takes n off its list; nothing when it is on none. */
static inline void
st_dlink_unlink(st_dlink *n)
{
	if (n->next == NULL)
		return;
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->prev = n->next = NULL;
}

/* The first element's link, or NULL when l is empty. */
static inline st_dlink *
st_dlist_first(const st_dlink *l)
{
	return l->next == l ? NULL : l->next;
}

/* The link after n on l, or NULL when n is the last. */
static inline st_dlink *
st_dlist_after(const st_dlink *l, const st_dlink *n)
{
	return n->next == l ? NULL : n->next;
}

#endif
