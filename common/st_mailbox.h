/*
 * st_mailbox: the one place where other threads hand work to the event loop.
 *
 * A mutex-protected FIFO of items plus a libevent event made active on the
 * empty -> non-empty transition only (h2o's multithread.c pattern).  The
 * loop callback drains the whole queue each time, because libevent merges
 * several activations into one callback.
 *
 * Requires evthread_use_pthreads() before event_base_new().
 */
#ifndef ST_MAILBOX_H
#define ST_MAILBOX_H

struct event_base;
typedef struct st_mailbox st_mailbox;

/* Called on the loop thread for every posted item, in post order.
 * The callback owns item. */
typedef void (*st_mailbox_fn)(void *item, void *arg);

/* Loop thread.  Returns NULL only if libevent fails to create the event. */
st_mailbox *st_mailbox_new(struct event_base *base, st_mailbox_fn fn, void *arg);

/* Any thread; never blocks beyond the mutex.  After st_mailbox_free it is a
 * bug to post.  item must not be NULL. */
void st_mailbox_post(st_mailbox *mb, void *item);

/* Loop thread, after every poster has stopped.  Items still queued are
 * passed to fn first so nothing leaks.  NULL-safe. */
void st_mailbox_free(st_mailbox *mb);

#endif
