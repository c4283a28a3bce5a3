/*
 * request: a batch of events checked and encoded into the bytes of one
 * ingest request, by the writer's own code, and the key bases that give
 * events without a key of their own BASE-INDEX.  Pure: no I/O, no state;
 * any thread.  Internal: not installed, not exported (its unit test,
 * request_test, is built from the sources).
 */
#ifndef REQUEST_H
#define REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "st_buf.h"
#include "studio_producer.h"

/* "sp2-" + 32 hex digits of the producer's id + "-" + 16 hex digits of the base's number. */
#define REQUEST_KEY_BASE_LEN 53

/* The producer id's n-th key base into out (REQUEST_KEY_BASE_LEN + 1 bytes, NUL-terminated). */
void request_key_base_format(const uint8_t id[16], uint64_t n, char *out);

/* A caller's key base: 1..STUDIO_KEY_BASE_MAX-1 bytes of printable ASCII, no space. */
bool request_key_base_valid(const char *base);

/*
 * Encodes ev[0..n) as one batch request into out (reset first; the caller
 * owns it), with BASE-i (key_base not NULL) as the key of every event i
 * without one, then decodes it as the writer will: what the writer would
 * refuse is STUDIO_INVALID here, in the writer's words (into detail, cap
 * bytes).  STUDIO_USAGE: bad arguments (n outside 1..PROTO_MAX_BATCH, an
 * event not started with STUDIO_EVENT_INIT, about NULL with n_about > 0);
 * STUDIO_NOMEM: out of memory (nothing is left allocated but out's room).
 */
studio_status request_encode(const studio_event *ev, size_t n, const char *key_base, st_buf *out, char *detail,
			     size_t cap);

#endif
