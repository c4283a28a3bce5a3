/*
 * st_pem: checks on PEM files that both nng TLS users make (the programs'
 * st_tls and libstudio-producer's per-producer TLS).
 *
 * Thread: any.  Pure: OpenSSL parses, nothing is kept.
 */
#ifndef ST_PEM_H
#define ST_PEM_H

#include <stdbool.h>

/*
 * The private key belongs to the certificate (both NUL-terminated PEM
 * texts).  nng's TLS engine (mbedTLS) takes any pair and only the
 * handshakes would fail, so the caller makes a mismatch a configuration
 * error at once instead.
 */
bool st_pem_pair_matches(const char *cert_pem, const char *key_pem);

#endif
