/*
 * dial: a producer's req0 sockets and their dialers (dial.h).
 *
 * Each URL gets a socket of its own, not one socket with many dialers: a
 * request's try goes to one chosen writer (op.c moves to the next URL on
 * no answer), which one socket with several pipes would not let us pick.
 * The sockets resend nothing themselves (REQ_RESENDTIME infinite): every
 * try is the request machine's, on a new context, so a timed-out try is
 * never doubled by nng's own timer.  A reply is at most 1 MiB
 * (RECVMAXSZ): one holds at most 10,000 seqs (~90 KB), anything larger is
 * not ours.  TLS: one nng configuration per dialer (the name checked is
 * that URL's host), from PEM texts read once per producer (st_pem).
 */
#include "dial.h"

#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "detail.h"
#include "options.h"
#include "st_pem.h"

#define MAX_PEM (64u * 1024)
/* A reply holds at most 10,000 seqs (~90 KB); anything larger is not ours. */
#define MAX_REPLY (1024u * 1024)

/* Reads a whole PEM file of at most MAX_PEM bytes (st_pem_read) into *out (owned by the caller). */
static studio_status
read_pem(const char *opt, const char *path, char **out, char *err, size_t cap)
{
	const char *reason = NULL;
	st_err rv = st_pem_read(path, MAX_PEM, out, &reason);

	if (rv == ST_OK)
		return STUDIO_OK;
	if (rv == ST_ENOMEM) {
		detail_say(err, cap, "option %s: out of memory", opt);
		return STUDIO_NOMEM;
	}
	detail_say(err, cap, "option %s: %s: %s", opt, path, reason);
	return STUDIO_USAGE;
}

void
dial_tls_fini(dial_tls *t)
{
	free(t->ca);
	free(t->cert);
	free(t->key);
}

studio_status
dial_tls_load(const studio_options *o, dial_tls *t, char *err, size_t cap)
{
	studio_status st;

	if (o == NULL || (o->tls_ca == NULL && o->tls_cert == NULL && o->tls_key == NULL))
		return STUDIO_OK;
	if ((o->tls_cert == NULL) != (o->tls_key == NULL)) {
		detail_say(err, cap, "options tls_cert and tls_key go together");
		return STUDIO_USAGE;
	}
	if (o->tls_ca == NULL) {
		detail_say(err, cap, "option tls_ca is required with tls_cert (the CA that signs the writers)");
		return STUDIO_USAGE;
	}
	if ((st = read_pem("tls_ca", o->tls_ca, &t->ca, err, cap)) != STUDIO_OK)
		return st;
	if (o->tls_cert != NULL && ((st = read_pem("tls_cert", o->tls_cert, &t->cert, err, cap)) != STUDIO_OK ||
				    (st = read_pem("tls_key", o->tls_key, &t->key, err, cap)) != STUDIO_OK))
		return st;
	if (t->cert != NULL && !st_pem_pair_matches(t->cert, t->key)) {
		detail_say(err, cap, "option tls_key %s is not the key of tls_cert %s (or one of them is not PEM)",
			   o->tls_key, o->tls_cert);
		return STUDIO_USAGE;
	}
	return STUDIO_OK;
}

static bool
url_has_scheme(const char *url, const char *const *schemes)
{
	for (; *schemes != NULL; schemes++)
		if (strncmp(url, *schemes, strlen(*schemes)) == 0)
			return true;
	return false;
}

/* A dialer for url on s, with this producer's TLS configuration for tls+tcp, started in the background. */
static int
dial_writer(nng_socket s, const char *url, const dial_tls *t, char *err, size_t cap)
{
	static const char *const tls_schemes[] = { "tls+tcp://", "tls+tcp4://", "tls+tcp6://", NULL };
	static const char *const plain[] = { "tcp://", "tcp4://", "tcp6://", "ipc://", NULL };
	nng_tls_config *c = NULL;
	nng_dialer d;
	nng_url *u = NULL;
	int rv;

	if (url_has_scheme(url, tls_schemes)) {
		if (t->ca == NULL) {
			detail_say(err, cap,
				   "writer URL \"%s\": tls+tcp needs the options tls_ca, tls_cert and tls_key", url);
			return NNG_EINVAL;
		}
	} else if (!url_has_scheme(url, plain)) {
		detail_say(err, cap, "writer URL \"%s\": the scheme must be tcp://, tls+tcp:// or ipc://", url);
		return NNG_EINVAL;
	}
	if ((rv = nng_dialer_create(&d, s, url)) != 0) {
		detail_say(err, cap, "bad writer URL \"%s\": %s", url, nng_strerror(rv));
		return rv;
	}
	if (t->ca != NULL && url_has_scheme(url, tls_schemes)) {
		/* One configuration per dialer: the name checked is the URL's host. */
		if ((rv = nng_tls_config_alloc(&c, NNG_TLS_MODE_CLIENT)) != 0 ||
		    (rv = nng_tls_config_ca_chain(c, t->ca, NULL)) != 0 ||
		    (rv = nng_tls_config_auth_mode(c, NNG_TLS_AUTH_MODE_REQUIRED)) != 0 ||
		    (t->cert != NULL && (rv = nng_tls_config_own_cert(c, t->cert, t->key, NULL)) != 0) ||
		    (rv = nng_url_parse(&u, url)) != 0 || (rv = nng_tls_config_server_name(c, u->u_hostname)) != 0 ||
		    (rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, c)) != 0)
			detail_say(err, cap, "writer URL \"%s\": TLS configuration refused: %s", url, nng_strerror(rv));
		if (c != NULL)
			nng_tls_config_free(c); /* the dialer holds its own reference */
		nng_url_free(u);
		if (rv != 0) {
			nng_dialer_close(d);
			return rv;
		}
	}
	/* In the background: a writer that is not up yet is dialed again and again. */
	if ((rv = nng_dialer_start(d, NNG_FLAG_NONBLOCK)) != 0) {
		detail_say(err, cap, "writer URL \"%s\": %s", url, nng_strerror(rv));
		nng_dialer_close(d);
	}
	return rv;
}

studio_status
dial_open(nng_socket *out, const char *url, const dial_tls *t, char *err, size_t cap)
{
	nng_socket s = NNG_SOCKET_INITIALIZER;
	int rv;

	rv = nng_req0_open(&s);
	*out = s; /* closed with the producer even when it failed (closing id 0 is a no-op) */
	if (rv != 0) {
		detail_say(err, cap, "cannot open a req0 socket: %s", nng_strerror(rv));
		return rv == NNG_ENOMEM ? STUDIO_NOMEM : STUDIO_USAGE;
	}
	nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, MAX_REPLY);
	nng_socket_set_ms(s, NNG_OPT_RECONNMINT, 100);
	nng_socket_set_ms(s, NNG_OPT_RECONNMAXT, 2000);
	/* Our own tries resend (with a new context); nng's timer would only add copies. */
	nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	if (dial_writer(s, url, t, err, cap) != 0)
		return STUDIO_USAGE;
	return STUDIO_OK;
}
