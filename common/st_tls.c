/* st_tls: mutual TLS on tls+tcp:// nng links (st_tls.h). */
#include "st_tls.h"
#include "st_pem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/supplemental/tls/tls.h>

#include "st_tls_engine.h"
#include "st_tlsstat.h"
#include "st_util.h"

static const char *const role_names[ST_TLS_ROLE_N] = { "ingest", "publish", "control" };

/* Read-only after st_tls_load (owned by this module). */
static struct {
	char *cert, *key, *ca, *crl;           /* PEM texts, NUL-terminated; NULL when not given */
	char *role_ca[ST_TLS_ROLE_N];          /* NULL: ca */
	nng_tls_config *server[ST_TLS_ROLE_N]; /* per role, for listeners; NULL without cert, key and a CA */
} tls;

bool
st_tls_role_of(const char *flag, st_tls_role *r)
{
	for (int i = 0; i < ST_TLS_ROLE_N; i++)
		if (strcmp(flag, role_names[i]) == 0) {
			*r = (st_tls_role)i;
			return true;
		}
	return false;
}

const char *
st_tls_role_name(st_tls_role r)
{
	return r < ST_TLS_ROLE_N ? role_names[r] : "unknown";
}

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

/*
 * A configuration with ca (and the CRL: st_tls_engine hands it to mbedTLS,
 * which refuses a listed certificate) and, when given, the own
 * certificate.  TLS 1.2 only: what st_tls_engine allows anyway, said here
 * too so that nng's stock engine, if ours were not registered, could not
 * go lower.
 */
static int
config_new(nng_tls_mode mode, const char *ca, nng_tls_config **out)
{
	nng_tls_config *c = NULL;
	int rv;

	if ((rv = nng_tls_config_alloc(&c, mode)) != 0)
		return rv;
	if ((rv = nng_tls_config_ca_chain(c, ca, tls.crl)) != 0 ||
	    (rv = nng_tls_config_auth_mode(c, NNG_TLS_AUTH_MODE_REQUIRED)) != 0 ||
	    (rv = nng_tls_config_version(c, NNG_TLS_1_2, NNG_TLS_1_2)) != 0 ||
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
st_tls_load(const st_tls_files *f, char *why, size_t cap)
{
	static const char *const role_flags[ST_TLS_ROLE_N] = { "ingest-tls-ca", "publish-tls-ca", "control-tls-ca" };
	nng_tls_config *probe = NULL;
	bool any_role = false;
	int rv;

	/*
	 * Our engine before any configuration (nng_tls_config_alloc takes the
	 * engine registered at that moment), TLS or not, so that every
	 * nng_tls_config of the process, the C client library's included, has
	 * the same policy.  Its refusals go to st_tlsstat.
	 */
	if (st_tls_engine_register(st_tlsstat_refused, why, cap) != ST_OK)
		return ST_EINVAL;
	for (int i = 0; i < ST_TLS_ROLE_N; i++)
		any_role |= given(f->role_ca[i]);
	if (!given(f->cert) && !given(f->key) && !given(f->ca) && !given(f->crl) && !any_role)
		return ST_OK;
	if (given(f->cert) != given(f->key)) {
		snprintf(why, cap, "--tls-cert and --tls-key go together");
		return ST_EINVAL;
	}
	if (!given(f->ca)) {
		snprintf(why, cap, "--tls-ca is required with --tls-cert (the CA that signs the peers)");
		return ST_EINVAL;
	}
	if ((any_role || given(f->crl)) && !given(f->cert)) {
		snprintf(why, cap,
			 "--tls-crl and the --*-tls-ca options need --tls-cert and --tls-key (they are for listeners)");
		return ST_EINVAL;
	}
	if (read_pem("tls-ca", f->ca, &tls.ca, why, cap) != ST_OK ||
	    (given(f->crl) && read_pem("tls-crl", f->crl, &tls.crl, why, cap) != ST_OK) ||
	    (given(f->cert) && (read_pem("tls-cert", f->cert, &tls.cert, why, cap) != ST_OK ||
				read_pem("tls-key", f->key, &tls.key, why, cap) != ST_OK)))
		goto fail;
	for (int i = 0; i < ST_TLS_ROLE_N; i++)
		if (given(f->role_ca[i]) && read_pem(role_flags[i], f->role_ca[i], &tls.role_ca[i], why, cap) != ST_OK)
			goto fail;
	if (tls.cert != NULL && !st_pem_pair_matches(tls.cert, tls.key)) {
		snprintf(why, cap, "--tls-key %s is not the key of --tls-cert %s (or one of them is not PEM)", f->key,
			 f->cert);
		goto fail;
	}
	/* Both modes once: a CA, CRL, certificate or key that mbedTLS refuses is found now. */
	if ((rv = config_new(NNG_TLS_MODE_CLIENT, tls.ca, &probe)) != 0) {
		if (rv == NNG_ENOTSUP)
			snprintf(why, cap, "TLS is not available in this nng: %s", nng_strerror(rv));
		else
			snprintf(why, cap, "--tls-ca/--tls-crl/--tls-cert/--tls-key refused: %s", nng_strerror(rv));
		goto fail;
	}
	nng_tls_config_free(probe);
	for (int i = 0; i < ST_TLS_ROLE_N && tls.cert != NULL; i++) {
		const char *ca = tls.role_ca[i] != NULL ? tls.role_ca[i] : tls.ca;

		st_tls_engine_label(role_names[i]); /* its refusals are this listener's (st_tlsstat) */
		rv = config_new(NNG_TLS_MODE_SERVER, ca, &tls.server[i]);
		st_tls_engine_label(NULL);
		if (rv != 0) {
			snprintf(why, cap, "--%s/--tls-crl/--tls-cert/--tls-key refused for listening: %s",
				 tls.role_ca[i] != NULL ? role_flags[i] : "tls-ca", nng_strerror(rv));
			goto fail;
		}
	}
	return ST_OK;
fail:
	st_tls_unload();
	return ST_EINVAL;
}

void
st_tls_unload(void)
{
	for (int i = 0; i < ST_TLS_ROLE_N; i++) {
		if (tls.server[i] != NULL)
			nng_tls_config_free(tls.server[i]);
		free(tls.role_ca[i]);
	}
	free(tls.cert);
	free(tls.key);
	free(tls.ca);
	free(tls.crl);
	memset(&tls, 0, sizeof(tls));
}

bool
st_tls_url(const char *url)
{
	return url != NULL && (strncmp(url, "tls+tcp://", 10) == 0 || strncmp(url, "tls+tcp4://", 11) == 0 ||
			       strncmp(url, "tls+tcp6://", 11) == 0);
}

const char *
st_tls_url_usable(const char *url, bool listen, st_tls_role role)
{
	if (!st_tls_url(url))
		return NULL;
	if (tls.ca == NULL)
		return "a tls+tcp URL needs --tls-ca (and --tls-cert, --tls-key)";
	if (listen && (role >= ST_TLS_ROLE_N || tls.server[role] == NULL))
		return "listening on a tls+tcp URL needs --tls-cert and --tls-key";
	return NULL;
}

int
st_tls_listen(nng_socket s, const char *url, st_tls_role role)
{
	nng_listener l;
	int rv;

	if (!st_tls_url(url))
		return nng_listen(s, url, NULL, 0);
	if (role >= ST_TLS_ROLE_N || tls.server[role] == NULL)
		return NNG_EINVAL;
	if ((rv = nng_listener_create(&l, s, url)) != 0)
		return rv;
	if ((rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, tls.server[role])) != 0 ||
	    (rv = nng_listener_start(l, 0)) != 0) {
		nng_listener_close(l);
		return rv;
	}
	st_tlsstat_track(role_names[role], l); /* its failed handshakes: nng's statistics, read by st_tlsstat */
	return 0;
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
	if ((rv = config_new(NNG_TLS_MODE_CLIENT, tls.ca, &c)) == 0 && (rv = nng_url_parse(&u, url)) == 0 &&
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
