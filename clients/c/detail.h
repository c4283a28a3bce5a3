/*
 * detail: the words libstudio-producer hands back.  Every call of the
 * library that can fail fills a caller's buffer (err, detail) with one
 * line saying why; a request keeps its own (DETAIL_MAX) until its callback.
 * Internal: not installed, not exported.
 */
#ifndef DETAIL_H
#define DETAIL_H

#include <stddef.h>

/* A request's detail, and the room for a decoder's reason. */
#define DETAIL_MAX 512

/*
 * Formats into buf (cap bytes, NUL-terminated, cut to fit).  Nothing when
 * buf is NULL or cap 0: the caller's buffer is optional everywhere.  Any
 * thread; never blocks.
 */
void detail_say(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
