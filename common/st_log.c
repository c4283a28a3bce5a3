/*
 * st_log: one line per call to stderr.  The whole line is formatted into a
 * stack buffer first and written with one fputs, so lines from nng threads
 * and the loop thread never interleave.
 */
#include "st_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *log_prog = "studio";
static enum st_log_level log_level = ST_LOG_INFO;

void
st_log_init(const char *prog)
{
	const char *lv = getenv("STUDIO_LOG_LEVEL");

	log_prog = prog;
	if (lv == NULL)
		return;
	if (strcmp(lv, "error") == 0)
		log_level = ST_LOG_ERROR;
	else if (strcmp(lv, "warn") == 0)
		log_level = ST_LOG_WARN;
	else if (strcmp(lv, "debug") == 0)
		log_level = ST_LOG_DEBUG;
	else
		log_level = ST_LOG_INFO;
}

void
st_log_set_level(enum st_log_level lvl)
{
	log_level = lvl;
}

void
st_log(enum st_log_level lvl, const char *fmt, ...)
{
	static const char *names[] = { "error", "warn", "info", "debug" };
	char line[1024];
	struct timespec ts;
	struct tm tm;
	va_list ap;
	int n;

	if (lvl > log_level)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s: ", tm.tm_year + 1900,
		     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, names[lvl],
		     log_prog);
	if (n < 0 || (size_t)n >= sizeof(line))
		n = 0;
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	/* Room for the newline was kept by the "- 1" above. */
	n = (int)strlen(line);
	line[n] = '\n';
	line[n + 1] = '\0';
	fputs(line, stderr);
}
