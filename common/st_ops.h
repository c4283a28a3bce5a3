/*
 * st_ops: the operations endpoints of both programs, answered the same way
 * on each program's HTTP listener (Kubernetes probes, Prometheus):
 *
 *   /healthz  200 "ok\n" while the loop answers (liveness);
 *   /readyz   200 "ready\n" when ready() says so, else a 503 problem
 *             document whose detail is ready()'s reason, with Retry-After: 1;
 *   /metrics  the registry in Prometheus text format 0.0.4, after
 *             refresh() (for gauges read only when scraped), and the gauge
 *             studio_ready: 1 when ready() says so at that moment, else 0.
 *
 * GET and HEAD only: another method gets 405 with Allow: GET, HEAD,
 * OPTIONS (st_http answers OPTIONS itself, for every path).
 */
#ifndef ST_OPS_H
#define ST_OPS_H

#include <stdbool.h>

#include "st_http.h"
#include "st_metrics.h"

typedef struct st_ops {
	st_metrics *metrics;                        /* borrowed */
	bool (*ready)(void *arg, const char **why); /* why: a static reason, also when ready ("ready") */
	void (*refresh)(void *arg);                 /* before /metrics renders; NULL: nothing to refresh */
	void *arg;
} st_ops;

/* True when req's path is one of the three and it has been answered; false: not an ops path, untouched. */
bool st_ops_handle(http_req *req, const st_ops *ops);

/* 405 for a method other than GET and HEAD (true: answered), for a program's own GET-only paths too. */
bool st_ops_refuse_method(http_req *req);

#endif
