/* Unit tests for st_mailbox: many posting threads against a running loop. */
#include "st_mailbox.h"
#include "st_test.h"
#include "st_util.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdlib.h>

#define NPOSTERS 4
#define TOTAL 100000

struct item {
	int thread, seq;
};

struct sink {
	struct event_base *base;
	int next[NPOSTERS]; /* the seq expected next from each poster */
	int got, disorder;
	st_mailbox *mb;
};

static void
on_item(void *p, void *arg)
{
	struct item *it = p;
	struct sink *s = arg;

	if (it->thread < 0 || it->thread >= NPOSTERS || it->seq != s->next[it->thread])
		s->disorder++;
	else
		s->next[it->thread]++;
	free(it);
	if (++s->got == TOTAL)
		event_base_loopbreak(s->base);
}

struct poster {
	st_mailbox *mb;
	int thread, n;
};

static void *
post_main(void *arg)
{
	struct poster *p = arg;

	for (int i = 0; i < p->n; i++) {
		struct item *it = st_xmalloc(sizeof(*it));

		it->thread = p->thread;
		it->seq = i;
		st_mailbox_post(p->mb, it);
	}
	return NULL;
}

static void *
loop_main(void *arg)
{
	event_base_loop(arg, EVLOOP_NO_EXIT_ON_EMPTY);
	return NULL;
}

static void
t_many_threads(void)
{
	struct sink s = { 0 };
	struct poster p[NPOSTERS];
	pthread_t loop, t[NPOSTERS];
	int sum = 0;

	s.base = event_base_new();
	ST_CHECK(s.base != NULL);
	s.mb = st_mailbox_new(s.base, on_item, &s);
	ST_CHECK(s.mb != NULL);
	pthread_create(&loop, NULL, loop_main, s.base);
	for (int i = 0; i < NPOSTERS; i++) {
		p[i].mb = s.mb;
		p[i].thread = i;
		p[i].n = TOTAL / NPOSTERS + (i == 0 ? TOTAL % NPOSTERS : 0);
		pthread_create(&t[i], NULL, post_main, &p[i]);
	}
	for (int i = 0; i < NPOSTERS; i++)
		pthread_join(t[i], NULL);
	pthread_join(loop, NULL); /* the callback breaks the loop at TOTAL */
	ST_CHECK_EQ_U64(s.got, TOTAL);
	ST_CHECK_EQ_U64(s.disorder, 0);
	for (int i = 0; i < NPOSTERS; i++) {
		ST_CHECK_EQ_U64(s.next[i], p[i].n);
		sum += s.next[i];
	}
	ST_CHECK_EQ_U64(sum, TOTAL);
	st_mailbox_free(s.mb);
	event_base_free(s.base);
}

/* Items still queued at free go to fn, in order, so nothing leaks. */
static int leftover_seen[8], leftover_n;

static void
on_leftover(void *p, void *arg)
{
	(void)arg;
	if (leftover_n < 8)
		leftover_seen[leftover_n] = *(int *)p;
	leftover_n++;
	free(p);
}

static void
t_free_leftovers(void)
{
	struct event_base *base = event_base_new();
	st_mailbox *mb = st_mailbox_new(base, on_leftover, NULL);

	for (int i = 0; i < 3; i++) {
		int *v = st_xmalloc(sizeof(*v));

		*v = 10 + i;
		st_mailbox_post(mb, v);
	}
	st_mailbox_free(mb); /* an activation is pending: it must not fire later */
	ST_CHECK_EQ_U64(leftover_n, 3);
	ST_CHECK(leftover_seen[0] == 10 && leftover_seen[1] == 11 && leftover_seen[2] == 12);
	event_base_loop(base, EVLOOP_NONBLOCK);
	ST_CHECK_EQ_U64(leftover_n, 3);
	event_base_free(base);
	st_mailbox_free(NULL);
}

/* A callback that posts: the new item arrives in a later callback. */
static int repost_n;

static void
on_repost(void *p, void *arg)
{
	st_mailbox *mb = *(st_mailbox **)arg;
	int v = *(int *)p;

	free(p);
	repost_n++;
	if (v < 5) {
		int *n = st_xmalloc(sizeof(*n));

		*n = v + 1;
		st_mailbox_post(mb, n);
	}
}

static void
t_repost(void)
{
	struct event_base *base = event_base_new();
	st_mailbox *mb = NULL;
	int *v = st_xmalloc(sizeof(*v));

	mb = st_mailbox_new(base, on_repost, &mb);
	*v = 0;
	st_mailbox_post(mb, v);
	/* Without NO_EXIT_ON_EMPTY the loop ends once nothing is active. */
	event_base_dispatch(base);
	ST_CHECK_EQ_U64(repost_n, 6);
	st_mailbox_free(mb);
	event_base_free(base);
}

int
main(void)
{
	evthread_use_pthreads();
	ST_RUN(t_many_threads);
	ST_RUN(t_free_leftovers);
	ST_RUN(t_repost);
	return st_test_done();
}
