/*
 * Unit tests for st_tls_engine's pure parts (the suite and curve lists,
 * checked against mbedTLS's own description of each suite) and its
 * registration with nng (the description nng reports, the version range,
 * PEM that mbedTLS refuses).  Handshakes are
 * tests/integration/test_tls_roles.py's (real programs, openssl s_client).
 */
#include "st_tls_engine.h"

#include <stdio.h>
#include <string.h>

#include <mbedtls/cipher.h>
#include <mbedtls/ssl.h>
#include <mbedtls/ssl_ciphersuites.h>
#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

#include "st_log.h"
#include "st_test.h"

/* Every suite is TLS 1.2, ECDHE (ECDSA or RSA) and an AEAD cipher (GCM or ChaCha20-Poly1305); six of them. */
static void
t_suites_are_ecdhe_aead(void)
{
	static const char *const want[] = {
		"TLS-ECDHE-ECDSA-WITH-AES-128-GCM-SHA256",       "TLS-ECDHE-ECDSA-WITH-AES-256-GCM-SHA384",
		"TLS-ECDHE-ECDSA-WITH-CHACHA20-POLY1305-SHA256", "TLS-ECDHE-RSA-WITH-AES-128-GCM-SHA256",
		"TLS-ECDHE-RSA-WITH-AES-256-GCM-SHA384",         "TLS-ECDHE-RSA-WITH-CHACHA20-POLY1305-SHA256",
	};
	const int *s = st_tls_engine_suites();
	size_t n = 0;

	for (; s[n] != 0; n++) {
		const mbedtls_ssl_ciphersuite_t *cs = mbedtls_ssl_ciphersuite_from_id(s[n]);
		const mbedtls_cipher_info_t *ci;

		ST_CHECK(cs != NULL); /* known to (and enabled in) this mbedTLS */
		if (cs == NULL)
			continue;
		ci = mbedtls_cipher_info_from_type(cs->cipher);
		ST_CHECK(cs->key_exchange == MBEDTLS_KEY_EXCHANGE_ECDHE_ECDSA ||
			 cs->key_exchange == MBEDTLS_KEY_EXCHANGE_ECDHE_RSA);
		ST_CHECK(ci != NULL && (ci->mode == MBEDTLS_MODE_GCM || ci->mode == MBEDTLS_MODE_CHACHAPOLY));
		ST_CHECK(cs->min_minor_ver <= MBEDTLS_SSL_MINOR_VERSION_3 &&
			 cs->max_minor_ver >= MBEDTLS_SSL_MINOR_VERSION_3);
		if (n < sizeof(want) / sizeof(want[0]))
			ST_CHECK_STR(mbedtls_ssl_get_ciphersuite_name(s[n]), want[n]);
	}
	ST_CHECK_EQ_U64(n, sizeof(want) / sizeof(want[0]));
}

static void
t_curves(void)
{
	const mbedtls_ecp_group_id *c = st_tls_engine_curves();

	ST_CHECK(c[0] == MBEDTLS_ECP_DP_CURVE25519);
	ST_CHECK(c[1] == MBEDTLS_ECP_DP_SECP256R1);
	ST_CHECK(c[2] == MBEDTLS_ECP_DP_SECP384R1);
	ST_CHECK(c[3] == MBEDTLS_ECP_DP_NONE);
}

/* Registered, nng names it; configurations refuse a range without 1.2 and PEM that is not a certificate. */
static void
t_registered(void)
{
	char why[200] = "";
	nng_tls_config *c = NULL;

	ST_CHECK(st_tls_engine_register(NULL, why, sizeof(why)) == ST_OK);
	ST_CHECK(strstr(nng_tls_engine_description(), "st_tls_engine on mbed TLS 2.28") != NULL);
	ST_CHECK_STR(nng_tls_engine_name(), "st_tls_engine");
	ST_CHECK(st_tls_engine_register(NULL, why, sizeof(why)) == ST_OK); /* again: no change */
	ST_CHECK(nng_tls_config_alloc(&c, NNG_TLS_MODE_SERVER) == 0);
	if (c == NULL)
		return;
	ST_CHECK(nng_tls_config_version(c, NNG_TLS_1_3, NNG_TLS_1_3) == NNG_ENOTSUP);
	ST_CHECK(nng_tls_config_version(c, NNG_TLS_1_0, NNG_TLS_1_1) == NNG_ENOTSUP);
	ST_CHECK(nng_tls_config_version(c, NNG_TLS_1_0, NNG_TLS_1_3) == 0); /* holds 1.2: only 1.2 is offered */
	ST_CHECK(nng_tls_config_auth_mode(c, NNG_TLS_AUTH_MODE_OPTIONAL) == 0);
	ST_CHECK(nng_tls_config_ca_chain(c, "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n",
					 NULL) == NNG_EINVAL);
	ST_CHECK(nng_tls_config_own_cert(c, "not PEM", "not PEM", NULL) == NNG_EINVAL);
	nng_tls_config_free(c);
	ST_CHECK(nng_tls_config_alloc(&c, NNG_TLS_MODE_CLIENT) == 0);
	if (c != NULL) {
		ST_CHECK(nng_tls_config_server_name(c, "localhost") == 0);
		nng_tls_config_free(c);
	}
}

int
main(void)
{
	st_log_init("st_tls_engine_test");
	ST_RUN(t_suites_are_ecdhe_aead);
	ST_RUN(t_curves);
	ST_RUN(t_registered);
	return st_test_done();
}
