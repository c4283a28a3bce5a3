/*
 * frame_run: see frame_run.h.
 */
#include "frame_run.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "st_util.h"

/* One allocation: the count, then the bytes. */
typedef struct run {
	atomic_uint refs;
	size_t len;
	char bytes[];
} run;

/* The last list seen for one format, and its copy once a second stream matched it. */
typedef struct slot {
	frame *f[FRAME_RUN_MAX]; /* a reference each */
	size_t n;
	run *r; /* the cache's reference; NULL until matched */
} slot;

struct frame_run_cache {
	slot s[FRAME_NFORMATS];
	size_t copies, takes;
};

static void
run_unref(run *r)
{
	if (r != NULL && atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1)
		free(r);
}

static void
run_release_cb(const void *data, size_t len, void *arg)
{
	(void)data;
	(void)len;
	run_unref(arg);
}

static void
slot_clear(slot *sl)
{
	for (size_t i = 0; i < sl->n; i++)
		frame_unref(sl->f[i]);
	sl->n = 0;
	run_unref(sl->r);
	sl->r = NULL;
}

static bool
slot_matches(const slot *sl, const http_ref *refs, size_t n)
{
	if (sl->n != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (sl->f[i] != refs[i].arg)
			return false;
	return true;
}

/* One reference to the copy of sl's frames in fmt, made the first time. */
static http_ref
slot_run(frame_run_cache *c, slot *sl, enum frame_format fmt, uint64_t origin_ns)
{
	if (sl->r == NULL) {
		size_t len = 0, off = 0, l;

		for (size_t i = 0; i < sl->n; i++) {
			(void)frame_bytes(sl->f[i], fmt, &l);
			len += l;
		}
		sl->r = st_xmalloc(sizeof(run) + len);
		atomic_init(&sl->r->refs, 1);
		sl->r->len = len;
		for (size_t i = 0; i < sl->n; i++) {
			const char *b = frame_bytes(sl->f[i], fmt, &l);

			memcpy(sl->r->bytes + off, b, l);
			off += l;
		}
		c->copies++;
	}
	atomic_fetch_add_explicit(&sl->r->refs, 1, memory_order_relaxed);
	return (http_ref){ sl->r->bytes, sl->r->len, run_release_cb, sl->r, origin_ns };
}

frame_run_cache *
frame_run_cache_new(void)
{
	return st_xcalloc(1, sizeof(frame_run_cache));
}

void
frame_run_cache_free(frame_run_cache *c)
{
	if (c == NULL)
		return;
	for (size_t k = 0; k < FRAME_NFORMATS; k++)
		slot_clear(&c->s[k]);
	free(c);
}

bool
frame_run_share(frame_run_cache *c, enum frame_format fmt, const http_ref *refs, size_t n, http_ref *out)
{
	slot *sl;
	uint64_t origin_ns = 0;

	if ((unsigned)fmt >= FRAME_NFORMATS || n < 2 || n > FRAME_RUN_MAX)
		return false;
	sl = &c->s[fmt];
	if (!slot_matches(sl, refs, n)) {
		slot_clear(sl);
		for (size_t i = 0; i < n; i++)
			sl->f[i] = frame_ref(refs[i].arg);
		sl->n = n;
		return false;
	}
	for (size_t i = 0; i < n && origin_ns == 0; i++)
		origin_ns = refs[i].origin_ns;
	*out = slot_run(c, sl, fmt, origin_ns);
	for (size_t i = 0; i < n; i++)
		frame_unref(refs[i].arg); /* the cache still holds each */
	return true;
}

bool
frame_run_take(frame_run_cache *c, enum frame_format fmt, frame *const *frames, size_t n, http_ref *out)
{
	slot *sl;
	uint64_t origin_ns = 0;

	if ((unsigned)fmt >= FRAME_NFORMATS || n < 2 || n > FRAME_RUN_MAX)
		return false;
	sl = &c->s[fmt];
	if (sl->n != n || memcmp(sl->f, frames, n * sizeof(*frames)) != 0)
		return false;
	for (size_t i = 0; i < n && origin_ns == 0; i++)
		origin_ns = frame_origin_ns(frames[i]);
	*out = slot_run(c, sl, fmt, origin_ns);
	c->takes++;
	return true;
}

size_t
frame_run_copies(const frame_run_cache *c)
{
	return c->copies;
}

size_t
frame_run_takes(const frame_run_cache *c)
{
	return c->takes;
}
