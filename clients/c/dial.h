/*
 * dial: the producer's links to the writers: one nng req0 socket per
 * writer URL, each with its own dialer (dialing in the background) and,
 * for tls+tcp://, its own TLS configuration made from this producer's PEM
 * files (producers of one process may use different identities).
 * Internal: not installed, not exported.  Called by studio_producer_new
 * on the caller's thread; reads files, never waits for the network.
 */
#ifndef DIAL_H
#define DIAL_H

#include <nng/nng.h>
#include <stddef.h>

#include "studio_producer.h"

/*
 * The PEM texts of the options tls_ca, tls_cert and tls_key, read once for
 * every dialer of a producer.  Embedded (dial_tls_load fills it,
 * dial_tls_fini frees it); its fields are dial.c's: hands off.
 */
typedef struct dial_tls {
	char *ca, *cert, *key; /* owned; NULL: not given */
} dial_tls;

/*
 * Reads o's TLS files into *t (zeroed by the caller; o NULL or no TLS
 * option: nothing read, STUDIO_OK).  Refuses (STUDIO_USAGE, err says which
 * option and why) a cert without its key or the other way round, a cert
 * without the CA, a file that is not PEM or larger than 64 KiB, and a key
 * that is not the cert's.  On any status *t holds what was read so far:
 * the caller calls dial_tls_fini either way.
 */
studio_status dial_tls_load(const studio_options *o, dial_tls *t, char *err, size_t cap);

/* Frees what *t holds; *t may be half loaded. */
void dial_tls_fini(dial_tls *t);

/*
 * Opens a req0 socket into *s (set before anything can fail, so the caller
 * closes it with the rest even on error: closing a socket that never
 * opened is a no-op) and starts its dialer for url in the background: a
 * writer that is not up yet is dialed again and again.  tls+tcp:// URLs
 * take t's configuration (t->ca required), checking the URL's host as the
 * server's name; the scheme must be tcp, tls+tcp (or their 4/6 forms) or
 * ipc.  STUDIO_USAGE (err says why) or STUDIO_NOMEM.
 */
studio_status dial_open(nng_socket *s, const char *url, const dial_tls *t, char *err, size_t cap);

#endif
