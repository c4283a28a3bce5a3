/*
 * stream_impl: the edge stream's struct, for its two files only (everything
 * else sees stream.h, where the struct is opaque):
 *
 *   stream.c        the state machine: admission, the replay and its seam,
 *                   the hub's frames, the pump, registry events, the end;
 *   stream_write.c  the last step before the socket: a frame or a batch of
 *                   frame references to the connection, ids checked, and
 *                   the hub's take.  It reads the stream's fields and calls
 *                   nothing of stream.c: a terminal frame it hands over is
 *                   returned, and stream.c ends the stream.
 *
 * Threads: the registry's loop.
 */
#ifndef EDGE_STREAM_IMPL_H
#define EDGE_STREAM_IMPL_H

#include "replay.h"
#include "stream.h"
#include "stream_state.h"
#include "stream_token.h"

struct stream {
	stream_reg reg;        /* the registry's part (streams.c) */
	const stream_env *env; /* the registry's, borrowed */
	enum stream_state state;
	http_req *req;       /* until the response starts; then NULL */
	http_stream *hs;     /* after the response started; NULL once closed */
	hub_sub *sub;        /* NULL once out of the hub */
	subq *q;             /* live queue, owned */
	subq *hold;          /* replay hold buffer, owned, only while CHECKING/REPLAYING */
	replay_job *job;     /* the outstanding check or fetch, or NULL */
	replay_buf rows;     /* replay rows read and not yet written (the chunk and the one read ahead) */
	uint64_t fetch_from; /* the cursor of the fetch in flight */
	bool chunk_done;     /* the last fetch returned fewer rows than asked */
	char **topics;       /* owned copies; kept while a replay may need them */
	size_t *topic_lens;
	size_t n_topics;
	enum frame_format fmt;
	enum stream_outcome handed; /* ENDING: the terminal envelope handed to the connection */
	bool has_after, has_until;
	bool until_head;     /* until=head: resolved to the check's database head */
	bool until_known;    /* until holds its final value */
	uint64_t after;      /* Last-Event-ID */
	uint64_t until;      /* complete once the history reached this seq */
	uint64_t h0;         /* hub head when registered */
	uint64_t d;          /* database head of the replay snapshot */
	uint64_t seam;       /* live: items at or below it were covered at release (overlap) */
	uint64_t check_held; /* items put in the hold while CHECKING (bounds what a hold overflow adds) */
	uint64_t cursor;     /* last seq the replay fetched */
	uint64_t last_id;    /* last id written (items and resyncs) */
	stream_token *token; /* access control: ends it at exp or when its key goes; owned, NULL without */
	bool ip_held;        /* holds one of ip's slots in the registry's ip_limit */
	uint8_t ip[16];      /* the client's address (X-Forwarded-For from a trusted proxy) */
};

/*
 * Frames the pump hands to the socket in one go (http_stream_write_refs:
 * one writev, no copy, no allocation), bounded so the backlog check between
 * them stays meaningful.  A whole message of the writer (up to 256 events,
 * ~60 KiB of small ones) fits: one writev per stream per message, as the
 * same-shape floor does (issue 27; 64 / 16 KiB took four).
 */
#define STREAM_BATCH 256
#define STREAM_BATCH_BYTES (64u * 1024)

/* Frame references waiting for one hand-over to the connection. */
typedef struct ref_batch {
	http_ref r[STREAM_BATCH];
	size_t n;
	size_t bytes;
} ref_batch;

/* The collected references to the connection in one writev (one shared copy when the stream before
 * batched the same frames, frame_run.h), or released if the connection is gone; the batch is empty after. */
void ref_batch_hand_over(stream *s, ref_batch *b);
/*
 * The last step before the socket: ids strictly increase (a repeated or
 * regressing one is refused and counted).  Consumes the caller's reference
 * to f.  With b, the frame joins the batch (handed over when full, and
 * before a terminal frame).  True when f was a terminal frame handed to the
 * connection: the caller ends the stream (stream_end).
 */
bool stream_write_out(stream *s, frame *f, ref_batch *b);

#endif
