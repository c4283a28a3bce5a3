/*
 * options: a producer's settings (studio_options of studio_producer.h),
 * set by name and copied by studio_producer_new.
 *
 * The layout is here, not in options.c: the producer copies the whole
 * struct at studio_producer_new and the request machine (op.c) reads its
 * numbers at every step.  Hands off outside the library's modules: users
 * see only the opaque type, and set it by name so that a new option never
 * changes the ABI.  Internal: not installed, not exported.
 */
#ifndef OPTIONS_H
#define OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "studio_producer.h"

struct studio_options {
	uint32_t try_timeout_ms, backoff_base_ms, backoff_cap_ms, max_inflight;
	bool no_keys;
	char *tls_ca, *tls_cert, *tls_key; /* owned paths, NULL: not set (read by dial_tls_load) */
	char *token;                       /* owned (a producer keeps its own copy), NULL: not set */
	studio_token_fn token_fn;          /* asked at every send; wins over token */
	void *token_arg;
	/* test hooks (options_hooks_set): the clock (ms, monotonic) and the random source */
	uint64_t (*clock_ms)(void *arg);
	uint64_t (*random64)(void *arg);
	void *test_arg;
};

/* Fills *o with the defaults (docs/clients.md "API"); nothing owned. */
void options_defaults(studio_options *o);

/* Now on o's clock, in ms (monotonic: the system's unless a test set its own). */
uint64_t options_now_ms(const studio_options *o);

/*
 * Test hooks, kept out of the public header: the clock (ms, monotonic;
 * NULL: the system's) and the random source (NULL: the producer's own),
 * both called with arg, from any thread.
 */
void options_hooks_set(studio_options *o, uint64_t (*clock_ms)(void *), uint64_t (*random64)(void *), void *arg);

#endif
