/* st_ops: /healthz, /readyz and /metrics, one implementation for both programs (st_ops.h). */
#include "st_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st_util.h"

#define TEXT "text/plain; charset=utf-8"

/*
 * studio_ready: what /readyz answers now, as a gauge, so that a dashboard
 * shows readiness per pod and an alert sees an edge that stays unready
 * (Prometheus scrapes /metrics, not /readyz).  Asked of the same ready()
 * at the same moment, so the two never disagree.  Takes text (the
 * registry's rendering) and returns it grown; len follows.
 */
static char *
append_ready(char *text, size_t *len, bool ready)
{
	static const char fmt[] = "# HELP studio_ready 1 when /readyz answers 200, else 0.\n"
				  "# TYPE studio_ready gauge\nstudio_ready %d\n";
	size_t cap = *len + sizeof(fmt) + 1;
	char *out = st_xmalloc(cap);
	int n;

	memcpy(out, text, *len);
	n = snprintf(out + *len, cap - *len, fmt, ready ? 1 : 0);
	ST_ASSERT(n > 0 && (size_t)n < cap - *len);
	*len += (size_t)n;
	free(text);
	return out;
}

bool
st_ops_refuse_method(http_req *req)
{
	const char *m = http_req_method(req);

	if (strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0)
		return false;
	http_reply_problem(req, 405, NULL, "Method Not Allowed", "use GET or HEAD", "Allow: GET, HEAD, OPTIONS\r\n");
	return true;
}

bool
st_ops_handle(http_req *req, const st_ops *ops)
{
	const char *path = http_req_path(req), *why = "ready";

	if (strcmp(path, "/healthz") != 0 && strcmp(path, "/readyz") != 0 && strcmp(path, "/metrics") != 0)
		return false;
	if (st_ops_refuse_method(req))
		return true;
	if (strcmp(path, "/healthz") == 0) {
		http_reply(req, 200, TEXT, "ok\n", 3, NULL);
	} else if (strcmp(path, "/readyz") == 0) {
		if (ops->ready(ops->arg, &why))
			http_reply(req, 200, TEXT, "ready\n", 6, NULL);
		else
			http_reply_problem(req, 503, NULL, "Service Unavailable", why, "Retry-After: 1\r\n");
	} else {
		size_t len;
		char *text;

		if (ops->refresh)
			ops->refresh(ops->arg);
		text = st_metrics_render(ops->metrics, &len);
		text = append_ready(text, &len, ops->ready(ops->arg, &why));
		http_reply(req, 200, "text/plain; version=0.0.4; charset=utf-8", text, len, NULL);
		free(text);
	}
	return true;
}
