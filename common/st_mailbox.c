/*
 * st_mailbox: a locked FIFO that wakes the event loop.
 *
 * DESIGN
 * Posters append a node under the mutex and, only when the queue was empty,
 * make the mailbox event active (h2o lib/common/multithread.c).  The loop
 * callback detaches the whole list under the mutex and runs the callback
 * on each item with the mutex released, so a callback may itself post, and
 * posters never wait for the loop's work.  Every empty -> non-empty
 * transition is followed by an activation, so no item can be stranded: an
 * item appended after the detach makes the queue non-empty again and
 * activates again; an item detached before its poster's event_active()
 * call only costs one callback that finds nothing.  libevent merges
 * activations, which is why each callback drains everything there is.
 *
 * The event has no descriptor: it is never added, only activated
 * (event_active works on non-pending events), so it does not keep
 * event_base_dispatch alive on its own.
 */
#include "st_mailbox.h"
#include "st_util.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdlib.h>

struct node {
	struct node *next;
	void *item;
};

struct st_mailbox {
	pthread_mutex_t mu;
	struct node *head, *tail;
	struct event *ev;
	st_mailbox_fn fn;
	void *arg;
};

static void
deliver(struct node *n, st_mailbox_fn fn, void *arg)
{
	while (n) {
		struct node *next = n->next;

		fn(n->item, arg);
		free(n);
		n = next;
	}
}

static void
on_wake(evutil_socket_t fd, short what, void *arg)
{
	st_mailbox *mb = arg;
	struct node *list;

	(void)fd;
	(void)what;
	pthread_mutex_lock(&mb->mu);
	list = mb->head;
	mb->head = mb->tail = NULL;
	pthread_mutex_unlock(&mb->mu);
	deliver(list, mb->fn, mb->arg);
}

st_mailbox *
st_mailbox_new(struct event_base *base, st_mailbox_fn fn, void *arg)
{
	st_mailbox *mb = st_xcalloc(1, sizeof(*mb));

	ST_ASSERT(fn != NULL);
	pthread_mutex_init(&mb->mu, NULL);
	mb->fn = fn;
	mb->arg = arg;
	if ((mb->ev = event_new(base, -1, 0, on_wake, mb)) == NULL) {
		pthread_mutex_destroy(&mb->mu);
		free(mb);
		return NULL;
	}
	return mb;
}

void
st_mailbox_post(st_mailbox *mb, void *item)
{
	struct node *n = st_xmalloc(sizeof(*n));
	int was_empty;

	ST_ASSERT(item != NULL);
	n->next = NULL;
	n->item = item;
	pthread_mutex_lock(&mb->mu);
	was_empty = mb->head == NULL;
	if (mb->tail)
		mb->tail->next = n;
	else
		mb->head = n;
	mb->tail = n;
	pthread_mutex_unlock(&mb->mu);
	if (was_empty)
		event_active(mb->ev, EV_READ, 0);
}

void
st_mailbox_free(st_mailbox *mb)
{
	struct node *list;

	if (mb == NULL)
		return;
	/* event_free removes a pending activation too, so on_wake cannot run
	 * on freed memory afterwards. */
	event_free(mb->ev);
	pthread_mutex_lock(&mb->mu);
	list = mb->head;
	mb->head = mb->tail = NULL;
	pthread_mutex_unlock(&mb->mu);
	deliver(list, mb->fn, mb->arg);
	pthread_mutex_destroy(&mb->mu);
	free(mb);
}
