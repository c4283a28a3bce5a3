/*
 * detail: the one formatter of the library's words (detail.h).  Kept apart
 * so that every module of the library writes its errors the same way: into
 * the caller's buffer, never to stderr (a library does not print).
 */
#include "detail.h"

#include <stdarg.h>
#include <stdio.h>

void
detail_say(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;

	if (buf == NULL || cap == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, cap, fmt, ap);
	va_end(ap);
}
