/*
 * op: one request of a producer, from its events to its callback: the
 * state machine that sends it, waits for the writer's answer and retries
 * (docs/clients.md "Retries").  Internal: not installed, not exported.
 */
#ifndef OP_H
#define OP_H

#include <stddef.h>
#include <stdint.h>

#include "studio_producer.h"

/*
 * studio_publish_async's work, called with the call counted in p->users
 * (so p outlives it).  Gives the events their keys (key_base as
 * studio_publish_async says: the caller's, or one made here and written
 * back), encodes and checks them on the caller's thread, then waits for a
 * slot (at most timeout_ms; STUDIO_NONBLOCK in flags: not at all) and
 * starts the machine: its first step runs on an nng thread, so cb never
 * runs on the caller's.  On STUDIO_OK cb(arg, ...) runs exactly once,
 * later; on any other status it never runs, nothing was sent, and detail
 * says why.  May block up to timeout_ms for a slot; never for the network.
 */
studio_status op_start(studio_producer *p, const studio_event *ev, size_t n, char *key_base, uint32_t timeout_ms,
		       unsigned flags, studio_publish_fn cb, void *arg, char *detail, size_t detail_len);

/*
 * Cancels the sends, receives and sleeps of every request of p, p->mu
 * held, p->closing set: each ends (STUDIO_CLOSED or STUDIO_TIMEOUT, by the
 * rule of op.c) on an nng thread soon after.  Never blocks; never waits
 * for a callback (the caller waits on p->inflight).
 */
void op_cancel_all(studio_producer *p);

#endif
