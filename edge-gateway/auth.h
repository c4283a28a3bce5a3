/*
 * auth: subscriber access control - JWKS verification keys, JWT checks and
 * the topic claim (docs/security.md).
 *
 * Three layers, each usable alone:
 *  - auth_keys: an immutable, reference-counted set of verification keys
 *    read from a JWKS document (RFC 7517): "oct" keys for HS256, "RSA" for
 *    RS256, "EC" P-256 for ES256, each with "kid" and "alg".  The JSON goes
 *    through st_json (bounded); RSA and EC parameters become PEM public keys
 *    through OpenSSL 3, which is what libjwt 1.x verifies with.
 *  - auth_verify: one token against a key set and a policy.  libjwt 1.x
 *    verifies with the algorithm the token's header names, so the header is
 *    read here first (bounded base64url + st_json): its kid selects the key
 *    and its alg must equal that key's alg ("none" never matches: no key
 *    has it), so an HS256 token can never be checked against an RSA public
 *    key used as an HMAC secret.  The claims are read here too (exp
 *    required; nbf, iat, aud, iss; the topics claim); libjwt only checks
 *    the signature.
 *  - auth_store: what an edge shares between its loops: the current key
 *    set (swapped whole on reload; a reader holds its own reference, so a
 *    reload never frees keys under a check in progress) and the policy.
 *
 * Token extraction (auth_token_extract) is pure and allocation-free: it
 * points into the header values it is given.
 *
 * Nothing here logs a token.  Results say what failed only as one of
 * AUTH_MISSING/INVALID/EXPIRED/FORBIDDEN (the client learns only RFC 6750's
 * codes); a static reason text is given for debug logs.
 */
#ifndef EDGE_AUTH_H
#define EDGE_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "st_clock.h"
#include "st_err.h"

/* A token longer than this is refused before anything is allocated for it. */
#define AUTH_TOKEN_MAX 8192
/* A key file larger than this is refused (a JWKS of a few keys is a few KiB). */
#define AUTH_KEYS_MAX_BYTES (1024 * 1024)
/* At most this many keys in one file, and this many topic patterns in one token. */
#define AUTH_KEYS_MAX 64
#define AUTH_PATTERNS_MAX 256

enum auth_result {
	AUTH_OK = 0,
	AUTH_MISSING, /* no token presented: 401, WWW-Authenticate: Bearer */
	AUTH_INVALID, /* malformed, bad signature, unknown kid, other alg, not yet valid, aud/iss: 401 invalid_token */
	AUTH_EXPIRED,   /* exp passed (beyond the leeway): 401 invalid_token */
	AUTH_FORBIDDEN, /* valid, but a requested topic is not covered: 403 */
	AUTH_RESULT_COUNT
};

/* "missing", "invalid", "expired", "forbidden" (the metric's reason label); "ok" for AUTH_OK. */
const char *auth_result_name(enum auth_result r);

/* ---- key sets ---------------------------------------------------------- */

typedef struct auth_keys auth_keys;

/*
 * Parses a JWKS document text[0..len).  Every key must be usable: kty
 * "oct" with alg "HS256" and k of at least 32 bytes (RFC 7518 3.2); "RSA"
 * with alg "RS256", n of at least 2048 bits, e; "EC" with alg "ES256",
 * crv "P-256", x and y on the curve.  kid is required (1..256 bytes) and
 * unique; "use", when present, must be "sig"; private members ("d", ...)
 * are refused, so a private key is never deployed by mistake.  On error
 * returns ST_EINVAL and writes a one-line reason (naming the key by its
 * index and kid) into why.  On ST_OK the caller owns *out (one reference).
 * Pure: no I/O, any thread.
 */
st_err auth_keys_parse(const char *text, size_t len, auth_keys **out, char *why, size_t cap);
/* Reads path (at most AUTH_KEYS_MAX_BYTES; blocking file I/O) and parses it. */
st_err auth_keys_load(const char *path, auth_keys **out, char *why, size_t cap);
/* Takes a reference (atomic; any thread). */
auth_keys *auth_keys_ref(auth_keys *ks);
/* Drops a reference; the last one frees.  NULL-safe; any thread. */
void auth_keys_unref(auth_keys *ks);
size_t auth_keys_count(const auth_keys *ks);

/* ---- verification ------------------------------------------------------ */

typedef struct auth_policy {
	uint32_t leeway_s;        /* clock skew tolerated on exp, nbf and iat */
	const char *audience;     /* NULL or "": aud not checked; else aud (string or array) must hold it */
	const char *issuer;       /* NULL or "": iss not checked; else iss must equal it */
	const char *topics_claim; /* the claim listing readable topics; NULL = "topics" */
} auth_policy;

/*
 * What a verified token allows: its expiry and its topic patterns.  A
 * pattern is a topic (exact), a prefix "a/b/" + "*" (every topic that starts
 * with "a/b/" and goes on), or "*" (every topic).  Owned by the caller.
 */
typedef struct auth_grant auth_grant;
void auth_grant_free(auth_grant *g); /* NULL-safe */
bool auth_grant_covers(const auth_grant *g, const char *topic, size_t len);
/* exp in ms since the epoch. */
uint64_t auth_grant_exp_ms(const auth_grant *g);

/*
 * Verifies token[0..len) (no NUL needed) against ks at wall-clock time
 * now_ms (ms since the epoch).  AUTH_OK gives *out (owned by the caller);
 * otherwise *out is NULL, and *why (when not NULL) gets a static reason
 * for debug logs.  Never AUTH_FORBIDDEN (see auth_grant_covers) nor
 * AUTH_MISSING.  Any thread; ks must stay referenced during the call.
 */
enum auth_result auth_verify(const auth_keys *ks, const char *token, size_t len, uint64_t now_ms,
			     const auth_policy *pol, auth_grant **out, const char **why);

/* ---- extraction -------------------------------------------------------- */

enum auth_source { AUTH_SRC_NONE = 0, AUTH_SRC_HEADER, AUTH_SRC_COOKIE, AUTH_SRC_QUERY };

/*
 * Where the token is, in this order: "Authorization: Bearer T" (scheme
 * case-insensitive); the cookie named cookie_name in the Cookie header
 * (a quoted value is unquoted); the query's access_token value, only when
 * allow_query.  Any argument may be NULL.  An Authorization header of
 * another scheme is not a bearer token (the cookie is looked at).  On a
 * source other than AUTH_SRC_NONE, *tok and *len point into the argument it
 * came from (possibly empty or over-long: verification refuses those).
 * Pure, no allocation, bounded by its inputs.
 */
enum auth_source auth_token_extract(const char *authorization, const char *cookie, const char *cookie_name,
				    const char *query_token, bool allow_query, const char **tok, size_t *len);

/* ---- the shared store --------------------------------------------------- */

typedef struct auth_config {
	auth_policy policy;   /* strings copied */
	const char *cookie;   /* cookie name; NULL = "studio_token"; copied */
	bool query_token;     /* access_token= in the query is accepted */
	const st_clock *wall; /* ms since the epoch (st_clock_realtime(), or a fake); borrowed */
} auth_config;

typedef struct auth_store auth_store;

/* Takes over ks's reference.  Main thread, at start. */
auth_store *auth_store_new(auth_keys *ks, const auth_config *cfg);
/* After every loop that uses it stopped.  NULL-safe. */
void auth_store_free(auth_store *st);
/* Replaces the key set (takes over ks's reference); checks in progress keep the old one.  Any thread. */
void auth_store_swap(auth_store *st, auth_keys *ks);
/* Keys in the current set.  Any thread. */
size_t auth_store_key_count(auth_store *st);
bool auth_store_query_token(const auth_store *st);

/*
 * The whole check of one request: extraction from the given header values
 * and query token, verification with the current keys at the store's wall
 * clock, and coverage of every topic[i][0..lens[i]).  On AUTH_OK, *exp_ms
 * is the token's exp (ms since the epoch).  *why: a static reason for
 * debug logs (never the token).  Any thread.
 */
enum auth_result auth_store_check(auth_store *st, const char *authorization, const char *cookie,
				  const char *query_token, const char *const *topics, const size_t *lens, size_t n,
				  uint64_t *exp_ms, const char **why);
/* The store's wall clock now (ms since the epoch). */
uint64_t auth_store_now_ms(const auth_store *st);

#endif
