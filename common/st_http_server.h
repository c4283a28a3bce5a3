/*
 * st_http_server: the listener side of the HTTP server (internal; the
 * public calls - http_server_new*, http_server_free, http_conn_limit_*,
 * http_listen_parse - are declared in st_http.h).
 */
#ifndef ST_HTTP_SERVER_H
#define ST_HTTP_SERVER_H

#include "st_http_internal.h"

/* Gives back the slot a connection took at accept.  Thread-safe. */
void http_conn_limit_put(http_conn_limit *l);

#endif
