/*
 * st_test_metric: one series' value out of a registry, for unit tests,
 * header only.  The tests that check a counter or a histogram through what
 * /metrics would show (st_http_test, st_tlsstat_test, fanout_test) read it
 * here instead of each parsing st_metrics_render's text their own way.
 *
 *   double v = st_test_metric(m, "studio_sse_cut_total{reason=\"slow_consumer\"}");
 *
 * series is the name with its labels exactly as rendered; the value is the
 * rest of that line.  Absent: -1 (every value the registry renders is >= 0),
 * so a check prints the difference between "missing" and "zero".
 */
#ifndef ST_TEST_METRIC_H
#define ST_TEST_METRIC_H

#include <stdlib.h>
#include <string.h>

#include "st_metrics.h"

static inline double
st_test_metric(st_metrics *m, const char *series)
{
	size_t len = 0, n = strlen(series);
	char *text = st_metrics_render(m, &len);
	double v = -1;

	/* a whole line's start: "series " at the text's start or after a newline */
	for (const char *p = text; p != NULL && (p = strstr(p, series)) != NULL; p += n) {
		if ((p == text || p[-1] == '\n') && p[n] == ' ') {
			v = strtod(p + n + 1, NULL);
			break;
		}
	}
	free(text);
	return v;
}

#endif
