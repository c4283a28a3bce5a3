/*
 * producer_int: the pure parts of libstudio-producer, for its unit test.
 * Not installed.
 */
#ifndef PRODUCER_INT_H
#define PRODUCER_INT_H

#include <stddef.h>
#include <stdint.h>

/* "sp1-" + 32 hex digits of the producer's id + "-" + 16 hex digits of the event's number. */
#define PRODUCER_KEY_LEN 53

/* The key of the producer id's n-th event into out (PRODUCER_KEY_LEN + 1 bytes, NUL-terminated). */
void producer_key_format(const uint8_t id[16], uint64_t n, char *out);


#endif
