/*
 * st_pem: checks on PEM files that both nng TLS users make (the programs'
 * st_tls and libstudio-producer's per-producer TLS).
 *
 * Thread: any.  Pure: OpenSSL parses, nothing is kept.
 */
#ifndef ST_PEM_H
#define ST_PEM_H

#include <stdbool.h>
#include <stddef.h>

#include "st_err.h"

/*
 * The private key belongs to the certificate (both NUL-terminated PEM
 * texts).  nng's TLS engine (mbedTLS) takes any pair and only the
 * handshakes would fail, so the caller makes a mismatch a configuration
 * error at once instead.
 */
bool st_pem_pair_matches(const char *cert_pem, const char *key_pem);

/*
 * Reads the whole file at path, at most max bytes, NUL-terminated, into
 * *out (owned by the caller).  Never aborts (the producer library uses it
 * too): ST_ESYS when it cannot be opened (errno kept, *why its text),
 * ST_ENOMEM, ST_EINVAL when it is larger than max, empty, or holds no
 * "-----BEGIN " line (*why says which).  The caller words the error with
 * its own flag or option name.
 */
st_err st_pem_read(const char *path, size_t max, char **out, const char **why);

#endif
