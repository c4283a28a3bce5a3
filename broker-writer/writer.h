/*
 * writer: one broker-writer process, from its configuration to its exit
 * (main.c parses and checks the configuration; this builds the parts and
 * runs their life).  See docs/writer.md.
 *
 * Construct (writer_new: never fails), run (writer_run: the schema check,
 * the parts, the loop until the process is done; its exit code), tear
 * down (writer_free).  A listen address that cannot be opened exits the
 * process with status 2 (st_config_fail), as a bad flag does.
 *
 * Threads: the caller's; everything but ingest's nng receivers lives on
 * the loop writer_run makes.
 */
#ifndef WRITER_WRITER_H
#define WRITER_WRITER_H

#include <signal.h>
#include <stdint.h>

#include "st_auth_store.h"

#define WRITER_PROG "broker-writer"

typedef struct writer_config {
	const char *pg_dsn;
	const char *ingest_url, *publish_url; /* nng listen URLs */
	const char *control_url;              /* "" or NULL: no control socket */
	const char *http_addr;                /* ops endpoints; "" or NULL: none */
	const char *ingest_http_addr;         /* POST /v1/events; "" or NULL: none */
	const char *instance;                 /* this process's name in the table and the stats */
	int flush_interval_ms;
	int64_t lock_key;            /* the flush's advisory lock; retention takes key + 1 */
	int64_t retention_ms;        /* 0 keeps everything */
	st_auth_store *auth;         /* producer credentials, taken over (freed by writer_free); NULL: none */
	const char *keys_path;       /* the --ingest-keys file behind auth, watched */
	uint64_t keys_watch_ms;      /* how often it is looked at; 0: only reload and SIGHUP */
	uint64_t crash_after;        /* tests (STUDIO_TEST_CRASH_AFTER_COMMIT); 0: never */
	volatile sig_atomic_t *stop; /* set by a signal before the loop runs: the schema wait ends, exit 0 */
} writer_config;

typedef struct writer writer;

/* c's strings are borrowed and must outlive the writer; c->auth is taken. */
writer *writer_new(const writer_config *c);
/* 0 done, 1 gave up (database, flush, a part that could not be made), 2 a database this writer must not use. */
int writer_run(writer *w);
void writer_free(writer *w); /* NULL-safe */

#endif
