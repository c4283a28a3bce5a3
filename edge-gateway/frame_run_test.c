/*
 * frame_run_test: the shared contiguous copy of a batch of frames
 * (frame_run.h).  The first list is remembered, not copied; the same
 * frames in the same format again share one copy of exactly their bytes;
 * another list, format or size does not; a copy handed out outlives the
 * cache (its cleanup frees it: AddressSanitizer would report a leak or a
 * use after free).
 */
#include "frame_run.h"

#include <stdlib.h>
#include <string.h>

#include "st_buf.h"
#include "st_test.h"
#include "st_util.h"

#define N 5

static frame *F[N + 1];

/* A stream's batch of frames [from, from + n) in fmt, as stream.c builds it (the caller's references). */
static void
batch(http_ref *refs, size_t from, size_t n, enum frame_format fmt, st_buf *want)
{
	st_buf_reset(want);
	for (size_t i = 0; i < n; i++) {
		size_t len;
		const char *p = frame_bytes(F[from + i], fmt, &len);

		refs[i] = (http_ref){ p, len, frame_release_cb, frame_ref(F[from + i]), i == 0 ? 0 : 1000 + i };
		st_buf_append(want, p, len);
	}
}

static void
drop(http_ref *refs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		refs[i].cleanup(refs[i].data, refs[i].len, refs[i].arg);
}

/* One stream's hand-over of frames [from, from + n) in fmt: shared or not; its references spent either way. */
static bool
share(frame_run_cache *c, size_t from, size_t n, enum frame_format fmt, st_buf *want, http_ref *out)
{
	http_ref refs[N];
	bool shared;

	batch(refs, from, n, fmt, want);
	shared = frame_run_share(c, fmt, refs, n, out);
	if (!shared)
		drop(refs, n); /* written frame by frame: the connection would drop them */
	return shared;
}

static void
t_share(void)
{
	frame_run_cache *c = frame_run_cache_new();
	http_ref out, out2, other;
	st_buf want;

	st_buf_init(&want);
	/* first stream: remembered, written frame by frame */
	ST_CHECK(!share(c, 0, N, FRAME_SSE, &want, &out));
	ST_CHECK_EQ_U64(frame_run_copies(c), 0);
	/* second: one copy of all the bytes, in order; origin the first non-zero */
	ST_CHECK(share(c, 0, N, FRAME_SSE, &want, &out));
	ST_CHECK_MEM(out.data, out.len, want.p);
	ST_CHECK_EQ_U64(out.len, want.len);
	ST_CHECK_EQ_U64(out.origin_ns, 1001);
	ST_CHECK_EQ_U64(frame_run_copies(c), 1);
	/* third: the same copy */
	ST_CHECK(share(c, 0, N, FRAME_SSE, &want, &out2));
	ST_CHECK(out2.data == out.data);
	ST_CHECK_EQ_U64(frame_run_copies(c), 1);
	out2.cleanup(out2.data, out2.len, out2.arg);
	/* another format: its own list (not the SSE copy) */
	ST_CHECK(!share(c, 0, N, FRAME_NDJSON, &want, &other));
	ST_CHECK(share(c, 0, N, FRAME_NDJSON, &want, &other));
	ST_CHECK_MEM(other.data, other.len, want.p);
	ST_CHECK_EQ_U64(frame_run_copies(c), 2);
	other.cleanup(other.data, other.len, other.arg);
	/* one frame different (a stream that got one frame fewer, or another one): not shared */
	ST_CHECK(!share(c, 1, N, FRAME_SSE, &want, &out2));
	ST_CHECK(!share(c, 1, N - 1, FRAME_SSE, &want, &out2));
	/* one frame, or a format out of range: never */
	ST_CHECK(!share(c, 0, 1, FRAME_SSE, &want, &out2));
	ST_CHECK(!share(c, 0, 1, FRAME_SSE, &want, &out2));
	{
		http_ref one[1];

		batch(one, 0, 1, FRAME_SSE, &want);
		ST_CHECK(!frame_run_share(c, FRAME_NFORMATS, one, 1, &out2));
		drop(one, 1);
	}
	ST_CHECK_EQ_U64(frame_run_copies(c), 2);
	/* the first copy still held by a "connection": it outlives the cache */
	frame_run_cache_free(c);
	ST_CHECK(out.len > 6 && memcmp(out.data, "id: 1\n", 6) == 0);
	out.cleanup(out.data, out.len, out.arg);
	st_buf_fini(&want);
}

/* The cache keeps its frames alive: the list compared is never a freed frame's address reused. */
static void
t_holds_frames(void)
{
	frame_run_cache *c = frame_run_cache_new();
	frame *a = frame_item_new(7, "t", 1, NULL, 0, "1", 1), *b = frame_item_new(8, "t", 1, NULL, 0, "2", 1);
	size_t la, lb;
	const char *pa = frame_bytes(a, FRAME_SSE, &la), *pb = frame_bytes(b, FRAME_SSE, &lb);
	http_ref refs[2] = { { pa, la, frame_release_cb, a, 0 }, { pb, lb, frame_release_cb, b, 0 } };
	http_ref out;

	ST_CHECK(!frame_run_share(c, FRAME_SSE, refs, 2, &out));
	drop(refs, 2); /* the caller's only references: the cache's keep them */
	ST_CHECK_EQ_U64(frame_seq(a), 7);
	ST_CHECK_EQ_U64(frame_seq(b), 8);
	frame_run_cache_free(c); /* the last references: freed here (ASan: no leak) */
}

int
main(void)
{
	for (size_t i = 0; i < ST_ARRAY_LEN(F); i++)
		F[i] = frame_item_new(i + 1, "t", 1, NULL, 0, "{\"x\":1}", 7);
	ST_RUN(t_share);
	ST_RUN(t_holds_frames);
	for (size_t i = 0; i < ST_ARRAY_LEN(F); i++)
		frame_unref(F[i]);
	return st_test_done();
}
