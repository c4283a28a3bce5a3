/*
 * st_tls_engine: nng's TLS engine interface implemented on mbedTLS 2.28
 * (st_tls_engine.h).
 *
 * DESIGN.  nng allocates our two structures (zeroed) behind its own and
 * calls the operations below: config_* while a configuration is built
 * (nng refuses changes once a connection uses it), conn_* per connection,
 * each under that connection's lock.  A configuration owns one
 * mbedtls_ssl_config and everything it points to (CA chain, CRL, own
 * certificates and keys, the random generator), so they live exactly as
 * long as nng's configuration.  A connection owns one mbedtls_ssl_context
 * whose BIO callbacks move bytes through nng_tls_engine_send/recv with
 * the opaque pointer nng gave at init; NNG_EAGAIN there becomes mbedTLS's
 * WANT_READ/WANT_WRITE and back, so mbedTLS never blocks.
 *
 * The policy (versions, suites, curves) is applied at config init and
 * cannot be widened through nng's API: version() only checks that 1.2 is
 * in the range asked for.  Errors: a refused handshake is reported to the
 * hook once and returned as NNG_EPEERAUTH, which nng's listener treats as
 * a remote condition (it accepts again at once; any other error pauses
 * accepting for 100 ms, so a peer sending garbage would slow everyone
 * else's handshakes); a transport error is returned as nng gave it (a
 * connection closed mid-handshake is not a refusal); an allocation
 * failure is NNG_ENOMEM.
 */
#include "st_tls_engine.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/version.h>
#include <mbedtls/x509_crl.h>
#include <mbedtls/x509_crt.h>
#include <nng/nng.h>
#include <nng/supplemental/tls/engine.h>

/* Own certificates per configuration (nng allows one per key type: RSA and EC make two). */
#define OWN_MAX 4

static const int suites[] = {
	MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	MBEDTLS_TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	MBEDTLS_TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	MBEDTLS_TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
	0,
};

static const mbedtls_ecp_group_id curves[] = {
	MBEDTLS_ECP_DP_CURVE25519,
	MBEDTLS_ECP_DP_SECP256R1,
	MBEDTLS_ECP_DP_SECP384R1,
	MBEDTLS_ECP_DP_NONE,
};

struct nng_tls_engine_config {
	mbedtls_ssl_config ssl;
	mbedtls_x509_crt ca;
	mbedtls_x509_crl crl;
	bool has_crl;
	mbedtls_x509_crt own_crt[OWN_MAX];
	mbedtls_pk_context own_key[OWN_MAX];
	int n_own;
	mbedtls_entropy_context entropy;
	mbedtls_ctr_drbg_context drbg; /* rng_mu: every connection's handshake draws from it */
	pthread_mutex_t rng_mu;
	char *server_name; /* owned; NULL: not checked (a client always gets one from nng) */
	const char *label; /* static, from st_tls_engine_label; NULL: none */
	bool client;
	bool inited; /* fini on a half-built configuration frees only what init made */
};

struct nng_tls_engine_conn {
	void *tls; /* nng's, for nng_tls_engine_send/recv only */
	nng_tls_engine_config *cfg;
	mbedtls_ssl_context ssl;
	int io_err;        /* nng's error from the last BIO call that failed; 0: none */
	int failed;        /* the nng error of a handshake that failed (reported once); 0: none */
	char subject[160]; /* the peer's end-entity certificate, when it presented one */
	char peer[64];     /* the peer's address and port (peer_of); "": unknown */
};

static st_tls_engine_hook *fail_hook; /* set on the main thread before any connection */
static bool peer_known;               /* the running nng is 1.5 (peer_of); set with fail_hook */
static _Thread_local const char *next_label;

const int *
st_tls_engine_suites(void)
{
	return suites;
}

const mbedtls_ecp_group_id *
st_tls_engine_curves(void)
{
	return curves;
}

void
st_tls_engine_label(const char *label)
{
	next_label = label;
}

static int
rng(void *arg, unsigned char *out, size_t len)
{
	nng_tls_engine_config *c = arg;
	int rv;

	pthread_mutex_lock(&c->rng_mu);
	rv = mbedtls_ctr_drbg_random(&c->drbg, out, len);
	pthread_mutex_unlock(&c->rng_mu);
	return rv;
}

static void
config_fini(nng_tls_engine_config *c)
{
	if (!c->inited)
		return;
	mbedtls_ssl_config_free(&c->ssl);
	mbedtls_x509_crt_free(&c->ca);
	mbedtls_x509_crl_free(&c->crl);
	for (int i = 0; i < c->n_own; i++) {
		mbedtls_x509_crt_free(&c->own_crt[i]);
		mbedtls_pk_free(&c->own_key[i]);
	}
	mbedtls_ctr_drbg_free(&c->drbg);
	mbedtls_entropy_free(&c->entropy);
	pthread_mutex_destroy(&c->rng_mu);
	free(c->server_name);
	c->inited = false;
}

static int
config_init(nng_tls_engine_config *c, nng_tls_mode mode)
{
	static const char pers[] = "st_tls_engine";
	int rv;

	mbedtls_ssl_config_init(&c->ssl);
	mbedtls_x509_crt_init(&c->ca);
	mbedtls_x509_crl_init(&c->crl);
	mbedtls_entropy_init(&c->entropy);
	mbedtls_ctr_drbg_init(&c->drbg);
	pthread_mutex_init(&c->rng_mu, NULL);
	c->inited = true;
	c->label = next_label;
	c->client = mode != NNG_TLS_MODE_SERVER;
	if (mbedtls_ctr_drbg_seed(&c->drbg, mbedtls_entropy_func, &c->entropy, (const unsigned char *)pers,
				  sizeof(pers) - 1) != 0)
		goto fail;
	rv = mbedtls_ssl_config_defaults(&c->ssl,
					 mode == NNG_TLS_MODE_SERVER ? MBEDTLS_SSL_IS_SERVER : MBEDTLS_SSL_IS_CLIENT,
					 MBEDTLS_SSL_TRANSPORT_STREAM, MBEDTLS_SSL_PRESET_DEFAULT);
	if (rv != 0)
		goto fail;
	mbedtls_ssl_conf_rng(&c->ssl, rng, c);
	mbedtls_ssl_conf_ciphersuites(&c->ssl, suites);
	mbedtls_ssl_conf_curves(&c->ssl, curves);
	mbedtls_ssl_conf_min_version(&c->ssl, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
	mbedtls_ssl_conf_max_version(&c->ssl, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
	/* engine.h's defaults: a server asks nothing of its peer until told, a client verifies. */
	mbedtls_ssl_conf_authmode(&c->ssl,
				  mode == NNG_TLS_MODE_SERVER ? MBEDTLS_SSL_VERIFY_NONE : MBEDTLS_SSL_VERIFY_REQUIRED);
	mbedtls_ssl_conf_renegotiation(&c->ssl, MBEDTLS_SSL_RENEGOTIATION_DISABLED);
	return 0;
fail:
	config_fini(c);
	return NNG_ENOMEM; /* seeding or defaults fail only without memory (or entropy) */
}

static int
config_server(nng_tls_engine_config *c, const char *name)
{
	char *dup = name != NULL ? strdup(name) : NULL;

	if (name != NULL && dup == NULL)
		return NNG_ENOMEM;
	free(c->server_name);
	c->server_name = dup;
	return 0;
}

static int
config_auth(nng_tls_engine_config *c, nng_tls_auth_mode mode)
{
	switch (mode) {
	case NNG_TLS_AUTH_MODE_NONE: mbedtls_ssl_conf_authmode(&c->ssl, MBEDTLS_SSL_VERIFY_NONE); return 0;
	case NNG_TLS_AUTH_MODE_OPTIONAL: mbedtls_ssl_conf_authmode(&c->ssl, MBEDTLS_SSL_VERIFY_OPTIONAL); return 0;
	case NNG_TLS_AUTH_MODE_REQUIRED: mbedtls_ssl_conf_authmode(&c->ssl, MBEDTLS_SSL_VERIFY_REQUIRED); return 0;
	}
	return NNG_EINVAL;
}

/* mbedTLS's parse error as nng's: out of memory, or input it refuses. */
static int
parse_err(int rv)
{
	return rv == MBEDTLS_ERR_X509_ALLOC_FAILED || rv == MBEDTLS_ERR_PK_ALLOC_FAILED ? NNG_ENOMEM : NNG_EINVAL;
}

static int
config_ca_chain(nng_tls_engine_config *c, const char *certs, const char *crl)
{
	int rv;

	if (certs == NULL)
		return NNG_EINVAL;
	/* PEM: the length counts the NUL.  A positive result is a block that did not parse: refused too. */
	if ((rv = mbedtls_x509_crt_parse(&c->ca, (const unsigned char *)certs, strlen(certs) + 1)) != 0)
		return rv > 0 ? NNG_EINVAL : parse_err(rv);
	if (crl != NULL) {
		if ((rv = mbedtls_x509_crl_parse(&c->crl, (const unsigned char *)crl, strlen(crl) + 1)) != 0)
			return parse_err(rv);
		c->has_crl = true;
	}
	mbedtls_ssl_conf_ca_chain(&c->ssl, &c->ca, c->has_crl ? &c->crl : NULL);
	return 0;
}

static int
config_own_cert(nng_tls_engine_config *c, const char *cert, const char *key, const char *pass)
{
	mbedtls_x509_crt *crt;
	mbedtls_pk_context *pk;
	int rv;

	if (cert == NULL || key == NULL)
		return NNG_EINVAL;
	if (c->n_own == OWN_MAX)
		return NNG_ENOSPC;
	crt = &c->own_crt[c->n_own];
	pk = &c->own_key[c->n_own];
	mbedtls_x509_crt_init(crt);
	mbedtls_pk_init(pk);
	c->n_own++; /* fini frees it whatever happens below */
	if ((rv = mbedtls_x509_crt_parse(crt, (const unsigned char *)cert, strlen(cert) + 1)) != 0)
		return rv > 0 ? NNG_EINVAL : parse_err(rv);
	if ((rv = mbedtls_pk_parse_key(pk, (const unsigned char *)key, strlen(key) + 1, (const unsigned char *)pass,
				       pass != NULL ? strlen(pass) : 0)) != 0)
		return parse_err(rv);
	if ((rv = mbedtls_ssl_conf_own_cert(&c->ssl, crt, pk)) != 0)
		return NNG_ENOMEM;
	return 0;
}

static int
config_version(nng_tls_engine_config *c, nng_tls_version min, nng_tls_version max)
{
	(void)c;
	/* 1.2 is the only version: the range must hold it; what it asks beyond is not offered. */
	if (min > max || min > NNG_TLS_1_2 || max < NNG_TLS_1_2)
		return NNG_ENOTSUP;
	return 0;
}

static int
bio_send(void *arg, const unsigned char *buf, size_t len)
{
	nng_tls_engine_conn *k = arg;
	size_t n = len;
	int rv = nng_tls_engine_send(k->tls, buf, &n);

	if (rv == NNG_EAGAIN)
		return MBEDTLS_ERR_SSL_WANT_WRITE;
	if (rv != 0) {
		k->io_err = rv;
		return MBEDTLS_ERR_NET_SEND_FAILED;
	}
	return (int)n;
}

static int
bio_recv(void *arg, unsigned char *buf, size_t len)
{
	nng_tls_engine_conn *k = arg;
	size_t n = len;
	int rv = nng_tls_engine_recv(k->tls, buf, &n);

	if (rv == NNG_EAGAIN)
		return MBEDTLS_ERR_SSL_WANT_READ;
	if (rv != 0) {
		k->io_err = rv;
		return MBEDTLS_ERR_NET_RECV_FAILED;
	}
	return (int)n;
}

/* Called by mbedTLS for each certificate of the peer's chain: remembers the end entity's subject for the report. */
static int
on_verify(void *arg, mbedtls_x509_crt *crt, int depth, uint32_t *flags)
{
	nng_tls_engine_conn *k = arg;

	(void)flags; /* the decision stays mbedTLS's */
	if (depth == 0 && mbedtls_x509_dn_gets(k->subject, sizeof(k->subject), &crt->subject) < 0)
		k->subject[0] = '\0';
	return 0;
}

/*
 * The peer's address for the refusal report, "" when unknown.  engine.h
 * documents the pointer nng gives conn_init only as the context of
 * nng_tls_engine_send/recv.  In nng 1.5 (tls_common.c, tls_start) it is
 * the framework's connection, whose first member is its nng_stream, with
 * the TCP stream already attached, and whose option getter forwards
 * NNG_OPT_REMADDR to that TCP stream without taking a lock.  So the cast
 * below is used only when both the headers built against and the library
 * running say 1.5 (peer_known, from nng_version() at registration);
 * otherwise the report goes without the address, as before.  Issue 25:
 * a failed handshake is logged with the peer's address.
 */
static void
peer_of(void *tls, char *out, size_t cap)
{
	nng_sockaddr sa;
	char ip[INET6_ADDRSTRLEN];

	out[0] = '\0';
#if NNG_MAJOR_VERSION == 1 && NNG_MINOR_VERSION == 5
	if (!peer_known || nng_stream_get_addr((nng_stream *)tls, NNG_OPT_REMADDR, &sa) != 0)
		return;
	if (sa.s_family == NNG_AF_INET && inet_ntop(AF_INET, &sa.s_in.sa_addr, ip, sizeof(ip)) != NULL)
		snprintf(out, cap, "%s:%u", ip, (unsigned)ntohs(sa.s_in.sa_port));
	else if (sa.s_family == NNG_AF_INET6 && inet_ntop(AF_INET6, sa.s_in6.sa_addr, ip, sizeof(ip)) != NULL)
		snprintf(out, cap, "[%s]:%u", ip, (unsigned)ntohs(sa.s_in6.sa_port));
#else
	(void)tls;
	(void)sa;
	(void)ip;
	(void)cap;
#endif
}

static int
conn_init(nng_tls_engine_conn *k, void *tls, nng_tls_engine_config *c)
{
	k->tls = tls;
	k->cfg = c;
	peer_of(tls, k->peer, sizeof(k->peer));
	mbedtls_ssl_init(&k->ssl);
	if (mbedtls_ssl_setup(&k->ssl, &c->ssl) != 0)
		return NNG_ENOMEM;
	mbedtls_ssl_set_bio(&k->ssl, k, bio_send, bio_recv, NULL);
	mbedtls_ssl_set_verify(&k->ssl, on_verify, k);
	if (c->server_name != NULL && mbedtls_ssl_set_hostname(&k->ssl, c->server_name) != 0)
		return NNG_ENOMEM;
	return 0;
}

/*
 * fini and close check cfg (set first by init): nng's framework may free
 * a connection whose TCP connect failed without having called init (its
 * dial callback's error path), leaving our part zeroed.
 */
static void
conn_fini(nng_tls_engine_conn *k)
{
	if (k->cfg != NULL)
		mbedtls_ssl_free(&k->ssl);
}

static void
conn_close(nng_tls_engine_conn *k)
{
	/* Best effort: a close_notify when the handshake is over (mbedTLS sends nothing before). */
	if (k->cfg != NULL)
		(void)mbedtls_ssl_close_notify(&k->ssl);
}

/* Appends to the NUL-terminated text at out (cap bytes in all), truncating. */
static void
append(char *out, size_t cap, const char *s)
{
	size_t n = strlen(out);

	if (n + 1 < cap)
		snprintf(out + n, cap - n, "%s", s);
}

/* The reason for the refusal rv, in one line: mbedTLS's words, the verification flags, the peer's subject. */
static void
reason_of(const nng_tls_engine_conn *k, int rv, char *out, size_t cap)
{
	char buf[ST_TLS_ENGINE_REASON_MAX];
	uint32_t flags;

	out[0] = '\0';
	if (k->cfg->client) {
		snprintf(buf, sizeof(buf), "server %s%s%s: ", k->cfg->server_name != NULL ? k->cfg->server_name : "",
			 k->cfg->server_name != NULL && k->peer[0] != '\0' ? " at " : "", k->peer);
		if (k->cfg->server_name != NULL || k->peer[0] != '\0')
			append(out, cap, buf);
	} else if (k->peer[0] != '\0') {
		snprintf(buf, sizeof(buf), "client %s: ", k->peer);
		append(out, cap, buf);
	}
	if (rv == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED && (flags = mbedtls_ssl_get_verify_result(&k->ssl)) != 0 &&
	    flags != (uint32_t)-1 && mbedtls_x509_crt_verify_info(buf, sizeof(buf), "", flags) > 0) {
		/* one flag per line in mbedTLS's text: one line here */
		for (char *p = buf; *p != '\0'; p++)
			if (*p == '\n')
				*p = p[1] != '\0' ? ';' : '\0';
		append(out, cap, "certificate refused: ");
	} else {
		mbedtls_strerror(rv, buf, sizeof(buf));
	}
	append(out, cap, buf);
	if (k->subject[0] != '\0') {
		append(out, cap, " (peer certificate ");
		append(out, cap, k->subject);
		append(out, cap, ")");
	}
}

static int
conn_handshake(nng_tls_engine_conn *k)
{
	char why[ST_TLS_ENGINE_REASON_MAX];
	int rv;

	if (k->failed != 0)
		return k->failed; /* mbedTLS's state after a fatal error is not to be driven again */
	rv = mbedtls_ssl_handshake(&k->ssl);
	if (rv == 0)
		return 0;
	if (rv == MBEDTLS_ERR_SSL_WANT_READ || rv == MBEDTLS_ERR_SSL_WANT_WRITE)
		return NNG_EAGAIN;
	if (k->io_err != 0)
		return k->failed = k->io_err; /* the connection went away: not a refusal */
	if (rv == MBEDTLS_ERR_SSL_ALLOC_FAILED)
		return k->failed = NNG_ENOMEM;
	k->failed = NNG_EPEERAUTH;
	if (fail_hook != NULL) {
		reason_of(k, rv, why, sizeof(why));
		fail_hook(k->cfg->label, why);
	}
	return k->failed;
}

/* mbedTLS's result of a read or write as nng's. */
static int
io_result(nng_tls_engine_conn *k, int rv, size_t *szp)
{
	if (rv > 0) {
		*szp = (size_t)rv;
		return 0;
	}
	if (rv == MBEDTLS_ERR_SSL_WANT_READ || rv == MBEDTLS_ERR_SSL_WANT_WRITE)
		return NNG_EAGAIN;
	if (k->io_err != 0)
		return k->io_err;
	if (rv == 0 || rv == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY)
		return NNG_ECLOSED;
	return NNG_ECRYPTO;
}

static int
conn_recv(nng_tls_engine_conn *k, uint8_t *buf, size_t *szp)
{
	return io_result(k, mbedtls_ssl_read(&k->ssl, buf, *szp), szp);
}

static int
conn_send(nng_tls_engine_conn *k, const uint8_t *buf, size_t *szp)
{
	return io_result(k, mbedtls_ssl_write(&k->ssl, buf, *szp), szp);
}

static bool
conn_verified(nng_tls_engine_conn *k)
{
	return mbedtls_ssl_get_verify_result(&k->ssl) == 0;
}

static nng_tls_engine_config_ops config_ops = {
	.size = sizeof(nng_tls_engine_config),
	.init = config_init,
	.fini = config_fini,
	.server = config_server,
	.auth = config_auth,
	.ca_chain = config_ca_chain,
	.own_cert = config_own_cert,
	.version = config_version,
};

static nng_tls_engine_conn_ops conn_ops = {
	.size = sizeof(nng_tls_engine_conn),
	.init = conn_init,
	.fini = conn_fini,
	.close = conn_close,
	.handshake = conn_handshake,
	.recv = conn_recv,
	.send = conn_send,
	.verified = conn_verified,
};

static char description[96];

static nng_tls_engine engine = {
	.version = NNG_TLS_ENGINE_VERSION,
	.config_ops = &config_ops,
	.conn_ops = &conn_ops,
	.name = "st_tls_engine",
	.description = description,
	.fips_mode = false,
};

st_err
st_tls_engine_register(st_tls_engine_hook *hook, char *why, size_t cap)
{
	char v[18] = "";
	int rv;

	fail_hook = hook;
	peer_known = strncmp(nng_version(), "1.5.", 4) == 0;
	if (engine.description[0] != '\0')
		return ST_OK;
	mbedtls_version_get_string(v);
	snprintf(description, sizeof(description), "st_tls_engine on mbed TLS %s (TLS 1.2, ECDHE with AEAD only)", v);
	/* nng's initialisation registers its stock engine: let it happen first (any call that initialises nng). */
	(void)nng_tls_engine_name();
	if ((rv = nng_tls_engine_register(&engine)) != 0) {
		description[0] = '\0';
		snprintf(why, cap, "the TLS engine: nng refused it: %s", nng_strerror(rv));
		return ST_EINVAL;
	}
	return ST_OK;
}
