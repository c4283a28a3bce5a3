/*
 * st_http_cors: the server's Origin rules (internal; the configuration
 * check http_cors_origins_check is public, in st_http.h).  Pure functions:
 * any thread.
 */
#ifndef ST_HTTP_CORS_H
#define ST_HTTP_CORS_H

#include <stdbool.h>

#include "st_buf.h"

/* True when origin (a request's Origin header, may be NULL) is allowed by
 * list (cors_origins: a comma list or "*"; NULL allows none). */
bool http_cors_match(const char *list, const char *origin);
/* The response headers that echo an allowed origin (with
 * Access-Control-Allow-Credentials when credentials is on). */
void http_cors_head_put(st_buf *b, const char *origin, bool credentials);

#endif
