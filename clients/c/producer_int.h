/*
 * producer_int: the internal parts of libstudio-producer, for its unit
 * test.  Not installed, and not exported: the libraries export studio_*
 * only, so these are reachable by a test built from the sources.
 */
#ifndef PRODUCER_INT_H
#define PRODUCER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "studio_producer.h"

/* "sp2-" + 32 hex digits of the producer's id + "-" + 16 hex digits of the base's number. */
#define PRODUCER_KEY_BASE_LEN 53

/* The producer id's n-th key base into out (PRODUCER_KEY_BASE_LEN + 1 bytes, NUL-terminated). */
void producer_key_base_format(const uint8_t id[16], uint64_t n, char *out);
/* A caller's key base: 1..STUDIO_KEY_BASE_MAX-1 bytes of printable ASCII, no space. */
bool producer_key_base_valid(const char *base);

/* Test hooks, kept out of the public header: the clock (ms, monotonic; NULL: the system's) and the random source. */
void producer_test_hooks(studio_options *o, uint64_t (*clock_ms)(void *), uint64_t (*random64)(void *), void *arg);
/* Calls waiting for a slot now (a test waits for one before it frees the producer). */
size_t producer_slot_waiters(studio_producer *p);

#endif
