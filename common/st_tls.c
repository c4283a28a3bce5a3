/* st_tls: mutual TLS on tls+tcp:// nng links (st_tls.h). */
#include "st_tls.h"
#include "st_pem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/supplemental/tls/tls.h>

#include "st_util.h"

/* Read-only after st_tls_load (owned by this module). */
static struct {
	char *cert, *key, *ca;     /* PEM texts, NUL-terminated; cert/key NULL when not given */
	nng_tls_config *server;    /* for listeners; NULL without cert and key */
} tls;

/* Reads a whole PEM file of at most ST_TLS_MAX_FILE bytes (st_pem_read), the flag named in why. */
static st_err
read_pem(const char *flag, const char *path, char **out, char *why, size_t cap)
{
	const char *reason = NULL;
	st_err rv = st_pem_read(path, ST_TLS_MAX_FILE, out, &reason);

	if (rv == ST_ENOMEM)
		st_oom("a PEM file", ST_TLS_MAX_FILE); /* the programs' policy (st_util.h) */
	if (rv != ST_OK) {
		snprintf(why, cap, "--%s %s: %s", flag, path, reason);
		return ST_EINVAL;
	}
	return ST_OK;
}

/* A configuration with the CA and, when given, the own certificate. */
static int
config_new(nng_tls_mode mode, nng_tls_config **out)
{
	nng_tls_config *c = NULL;
	int rv;

	if ((rv = nng_tls_config_alloc(&c, mode)) != 0)
		return rv;
	if ((rv = nng_tls_config_ca_chain(c, tls.ca, NULL)) != 0 ||
	    (rv = nng_tls_config_auth_mode(c, NNG_TLS_AUTH_MODE_REQUIRED)) != 0 ||
	    (tls.cert != NULL && (rv = nng_tls_config_own_cert(c, tls.cert, tls.key, NULL)) != 0)) {
		nng_tls_config_free(c);
		return rv;
	}
	*out = c;
	return 0;
}

static bool
given(const char *s)
{
	return s != NULL && s[0] != '\0';
}

st_err
st_tls_load(const char *cert, const char *key, const char *ca, char *why, size_t cap)
{
	nng_tls_config *probe = NULL;
	int rv;

	if (!given(cert) && !given(key) && !given(ca))
		return ST_OK;
	if (given(cert) != given(key)) {
		snprintf(why, cap, "--tls-cert and --tls-key go together");
		return ST_EINVAL;
	}
	if (!given(ca)) {
		snprintf(why, cap, "--tls-ca is required with --tls-cert (the CA that signs the peers)");
		return ST_EINVAL;
	}
	if (read_pem("tls-ca", ca, &tls.ca, why, cap) != ST_OK ||
	    (given(cert) && (read_pem("tls-cert", cert, &tls.cert, why, cap) != ST_OK ||
	                     read_pem("tls-key", key, &tls.key, why, cap) != ST_OK)))
		goto fail;
	if (tls.cert != NULL && !st_pem_pair_matches(tls.cert, tls.key)) {
		snprintf(why, cap, "--tls-key %s is not the key of --tls-cert %s (or one of them is not PEM)", key, cert);
		goto fail;
	}
	/* Both modes once: a CA, certificate or key that mbedTLS refuses is found now. */
	if ((rv = config_new(NNG_TLS_MODE_CLIENT, &probe)) != 0) {
		snprintf(why, cap, "--tls-ca/--tls-cert/--tls-key refused: %s", nng_strerror(rv));
		goto fail;
	}
	nng_tls_config_free(probe);
	if (tls.cert != NULL && (rv = config_new(NNG_TLS_MODE_SERVER, &tls.server)) != 0) {
		snprintf(why, cap, "--tls-cert/--tls-key refused for listening: %s", nng_strerror(rv));
		goto fail;
	}
	return ST_OK;
fail:
	st_tls_unload();
	return ST_EINVAL;
}

void
st_tls_unload(void)
{
	if (tls.server != NULL)
		nng_tls_config_free(tls.server);
	free(tls.cert);
	free(tls.key);
	free(tls.ca);
	memset(&tls, 0, sizeof(tls));
}

bool
st_tls_url(const char *url)
{
	return url != NULL && (strncmp(url, "tls+tcp://", 10) == 0 || strncmp(url, "tls+tcp4://", 11) == 0 ||
	                       strncmp(url, "tls+tcp6://", 11) == 0);
}

const char *
st_tls_url_usable(const char *url, bool listen)
{
	if (!st_tls_url(url))
		return NULL;
	if (tls.ca == NULL)
		return "a tls+tcp URL needs --tls-ca (and --tls-cert, --tls-key)";
	if (listen && tls.server == NULL)
		return "listening on a tls+tcp URL needs --tls-cert and --tls-key";
	return NULL;
}

int
st_tls_listen(nng_socket s, const char *url)
{
	nng_listener l;
	int rv;

	if (!st_tls_url(url))
		return nng_listen(s, url, NULL, 0);
	if (tls.server == NULL)
		return NNG_EINVAL;
	if ((rv = nng_listener_create(&l, s, url)) != 0)
		return rv;
	if ((rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, tls.server)) != 0 || (rv = nng_listener_start(l, 0)) != 0)
		nng_listener_close(l);
	return rv;
}

int
st_tls_dialer_create(nng_dialer *d, nng_socket s, const char *url, const char *server_name)
{
	nng_tls_config *c = NULL;
	nng_url *u = NULL;
	int rv;

	if ((rv = nng_dialer_create(d, s, url)) != 0 || !st_tls_url(url))
		return rv;
	if (tls.ca == NULL) {
		rv = NNG_EINVAL;
		goto done;
	}
	/* One configuration per dialer: the name checked is the dialer's own. */
	if ((rv = config_new(NNG_TLS_MODE_CLIENT, &c)) == 0 && (rv = nng_url_parse(&u, url)) == 0 &&
	    (rv = nng_tls_config_server_name(c, server_name ? server_name : u->u_hostname)) == 0)
		rv = nng_dialer_set_ptr(*d, NNG_OPT_TLS_CONFIG, c);
done:
	if (c != NULL)
		nng_tls_config_free(c); /* the dialer holds its own reference */
	nng_url_free(u);
	if (rv != 0)
		nng_dialer_close(*d);
	return rv;
}

int
st_tls_dial(nng_socket s, const char *url, int flags)
{
	nng_dialer d;
	int rv;

	if (!st_tls_url(url))
		return nng_dial(s, url, NULL, flags);
	if ((rv = st_tls_dialer_create(&d, s, url, NULL)) != 0)
		return rv;
	if ((rv = nng_dialer_start(d, flags)) != 0)
		nng_dialer_close(d);
	return rv;
}
