/*
 * st_tls_engine: the programs' own TLS engine for nng 1.5, on mbedTLS 2.28,
 * registered through nng's public engine interface
 * (<nng/supplemental/tls/engine.h>: nng_tls_engine_register, and
 * nng_tls_engine_send/recv for the bytes).  Written from that header's
 * comments and mbedTLS's API documentation; it replaces nng's stock engine
 * because that one cannot be told which cipher suites to accept
 * (docs/security.md "nng links").
 *
 * Policy, the same for every configuration, server or client:
 *  - TLS 1.2 only (minimum and maximum, whatever range nng passes that
 *    contains 1.2; a range without it is NNG_ENOTSUP);
 *  - the six suites of st_tls_engine_suites: ECDHE-ECDSA and ECDHE-RSA with
 *    AES-128-GCM, AES-256-GCM or ChaCha20-Poly1305 (forward secrecy and an
 *    AEAD cipher; no CBC, CCM, CCM-8, static RSA or DHE);
 *  - ECDHE groups and peer EC keys: x25519, secp256r1, secp384r1;
 *  - the authentication mode and CA chain (with its CRL) nng passes; a
 *    client checks the server name nng passes (the URL's host).
 *
 * Each refused handshake (a TLS-level error: a certificate refused by
 * either side, no common version or suite, bytes that are not TLS; not a
 * connection closed mid-way, not nng's timeout) is reported once to the
 * hook given at registration, with the configuration's label and a reason
 * (mbedTLS's text, the certificate verification flags in words, and the
 * subject of the peer's certificate when one was presented).  The peer's
 * address is not in it: the engine interface hands an engine only an
 * opaque pointer for nng_tls_engine_send/recv (docs/security.md says why
 * nothing else is used).
 *
 * Threads: nng calls the connection operations from its own threads, one
 * connection at a time under that connection's lock; connections of one
 * configuration run in parallel and share its mbedTLS configuration, which
 * is read-only once built, except its random generator, which has a mutex
 * of its own.
 */
#ifndef ST_TLS_ENGINE_H
#define ST_TLS_ENGINE_H

#include <stddef.h>

#include <mbedtls/ecp.h>

#include "st_err.h"

/*
 * Called for each refused handshake, on nng's thread with the connection
 * locked: must not block nor call nng.  label: the one set with
 * st_tls_engine_label when the configuration was made (NULL: none, e.g.
 * a dialer's); reason: one line, at most ST_TLS_ENGINE_REASON_MAX bytes.
 */
typedef void st_tls_engine_hook(const char *label, const char *reason);

#define ST_TLS_ENGINE_REASON_MAX 400

/*
 * Registers the engine with nng (process-wide, from then on every
 * nng_tls_config_alloc uses it).  nng is initialised first: nng's own
 * initialisation registers its stock engine and would replace one
 * registered before it.  hook may be NULL.  Main thread, before any TLS
 * configuration; calling it again only replaces the hook.  ST_EINVAL with
 * nng's reason in why when nng refuses it (an nng without TLS support).
 */
st_err st_tls_engine_register(st_tls_engine_hook *hook, char *why, size_t cap);

/*
 * The label of the configurations this thread makes next (a static
 * string, e.g. the listener's role; NULL: none).  The engine interface
 * passes no argument to a configuration's init, so the caller sets it
 * around nng_tls_config_alloc.
 */
void st_tls_engine_label(const char *label);

/* The accepted suites (mbedTLS ids), 0-terminated: pure, for the unit test. */
const int *st_tls_engine_suites(void);
/* The accepted ECDHE groups (mbedTLS ids), MBEDTLS_ECP_DP_NONE-terminated. */
const mbedtls_ecp_group_id *st_tls_engine_curves(void);

#endif
