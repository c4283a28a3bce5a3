/*
 * st_auth: access control of both programs - JWKS verification keys, JWT
 * checks and the topic claim (docs/security.md).  The edge checks
 * subscribers (--auth-keys, claim "topics"), the writer producers
 * (--ingest-keys, claim "publish").
 *
 * Three layers, each usable alone:
 *  - st_auth_keys: an immutable, reference-counted set of verification keys
 *    read from a JWKS document (RFC 7517): "oct" keys for HS256, "RSA" for
 *    RS256, "EC" P-256 for ES256, each with "kid" and "alg".  The JSON goes
 *    through st_json (bounded); RSA and EC parameters become PEM public keys
 *    through OpenSSL 3, which is what libjwt 1.x verifies with.
 *  - st_auth_verify: one token against a key set and a policy.  libjwt 1.x
 *    verifies with the algorithm the token's header names, so the header is
 *    read here first (bounded base64url + st_json): its kid selects the key
 *    and its alg must equal that key's alg ("none" never matches: no key
 *    has it), so an HS256 token can never be checked against an RSA public
 *    key used as an HMAC secret.  The claims are read here too (exp
 *    required; nbf, iat, aud, iss; the topics claim); libjwt only checks
 *    the signature.
 *  - st_auth_store (st_auth_store.h, its own module): what an edge shares
 *    between its loops: the current key set (swapped whole on reload; a
 *    reader holds its own reference, so a reload never frees keys under a
 *    check in progress) and the policy, built on the two layers here.
 *
 * Token extraction (st_auth_token_extract) is pure and allocation-free: it
 * points into the header values it is given.
 *
 * Nothing here logs a token.  Results say what failed only as one of
 * ST_AUTH_MISSING/INVALID/EXPIRED/FORBIDDEN (the client learns only RFC 6750's
 * codes); a static reason text is given for debug logs.
 */
#ifndef ST_AUTH_H
#define ST_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "st_clock.h"
#include "st_err.h"

/* A token longer than this is refused before anything is allocated for it. */
#define ST_AUTH_TOKEN_MAX 8192
/* A key file larger than this is refused (a JWKS of a few keys is a few KiB). */
#define ST_AUTH_KEYS_MAX_BYTES (1024 * 1024)
/* At most this many keys in one file, and this many topic patterns in one token. */
#define ST_AUTH_KEYS_MAX 64
#define ST_AUTH_PATTERNS_MAX 256

enum st_auth_result {
	ST_AUTH_OK = 0,
	ST_AUTH_MISSING, /* no token presented: 401, WWW-Authenticate: Bearer */
	ST_AUTH_INVALID, /* malformed, bad signature, unknown kid, other alg, not yet valid, aud/iss: 401 invalid_token */
	ST_AUTH_EXPIRED,   /* exp passed (beyond the leeway): 401 invalid_token */
	ST_AUTH_FORBIDDEN, /* valid, but a requested topic is not covered: 403 */
	ST_AUTH_RESULT_COUNT
};

/* "missing", "invalid", "expired", "forbidden" (the metric's reason label); "ok" for ST_AUTH_OK. */
const char *st_auth_result_name(enum st_auth_result r);

/* ---- key sets ---------------------------------------------------------- */

typedef struct st_auth_keys st_auth_keys;

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
st_err st_auth_keys_parse(const char *text, size_t len, st_auth_keys **out, char *why, size_t cap);
/*
 * Reads path (at most ST_AUTH_KEYS_MAX_BYTES; blocking file I/O) and parses
 * it.  A file writable by its group or by others is refused (ST_EINVAL,
 * why names the mode) before it is read: whoever can write it can add a
 * key of their own.
 */
st_err st_auth_keys_load(const char *path, st_auth_keys **out, char *why, size_t cap);
/* Takes a reference (atomic; any thread). */
st_auth_keys *st_auth_keys_ref(st_auth_keys *ks);
/* Drops a reference; the last one frees.  NULL-safe; any thread. */
void st_auth_keys_unref(st_auth_keys *ks);
size_t st_auth_keys_count(const st_auth_keys *ks);
/* True when ks holds the key with this id (st_auth_grant_key).  Any thread; ks referenced. */
bool st_auth_keys_has(const st_auth_keys *ks, uint64_t key_id);

/* ---- verification ------------------------------------------------------ */

typedef struct st_auth_policy {
	uint32_t leeway_s;        /* clock skew tolerated on exp, nbf and iat */
	uint32_t max_lifetime_s;  /* 0: no bound; else exp further than this (+ leeway) from now is refused */
	const char *audience;     /* NULL or "": aud not checked; else aud (string or array) must hold it */
	const char *issuer;       /* NULL or "": iss not checked; else iss must equal it */
	const char *topics_claim; /* the claim listing readable topics; NULL = "topics" */
} st_auth_policy;

/*
 * What a verified token allows: its expiry and its topic patterns.  A
 * pattern is a topic (exact), a prefix "a/b/" + "*" (every topic that starts
 * with "a/b/" and goes on), or "*" (every topic).  Owned by the caller.
 */
typedef struct st_auth_grant st_auth_grant;
void st_auth_grant_free(st_auth_grant *g); /* NULL-safe */
bool st_auth_grant_covers(const st_auth_grant *g, const char *topic, size_t len);
/* exp in ms since the epoch. */
uint64_t st_auth_grant_exp_ms(const st_auth_grant *g);
/* The id of the key that verified it (never 0): st_auth_store_has_key tells whether it is still trusted. */
uint64_t st_auth_grant_key(const st_auth_grant *g);

/*
 * Verifies token[0..len) (no NUL needed) against ks at wall-clock time
 * now_ms (ms since the epoch).  Refused (ST_AUTH_INVALID) beyond the
 * checks above: a header or a payload whose objects repeat a member name
 * (parsers disagree on which one counts), a signature segment that is not
 * canonical base64url, an exp further than pol->max_lifetime_s away.  ST_AUTH_OK gives *out (owned by the caller);
 * otherwise *out is NULL, and *why (when not NULL) gets a static reason
 * for debug logs.  Never ST_AUTH_FORBIDDEN (see st_auth_grant_covers) nor
 * ST_AUTH_MISSING.  Any thread; ks must stay referenced during the call.
 */
enum st_auth_result st_auth_verify(const st_auth_keys *ks, const char *token, size_t len, uint64_t now_ms,
				   const st_auth_policy *pol, st_auth_grant **out, const char **why);

/* ---- extraction -------------------------------------------------------- */

enum st_auth_source { ST_AUTH_SRC_NONE = 0, ST_AUTH_SRC_HEADER, ST_AUTH_SRC_COOKIE, ST_AUTH_SRC_QUERY };

/*
 * Where the token is, in this order: "Authorization: Bearer T" (scheme
 * case-insensitive); the cookie named cookie_name in the Cookie header
 * (a quoted value is unquoted); the query's access_token value, only when
 * allow_query.  Any argument may be NULL.  An Authorization header of
 * another scheme is not a bearer token (the cookie is looked at).  On a
 * source other than ST_AUTH_SRC_NONE, *tok and *len point into the argument it
 * came from (possibly empty or over-long: verification refuses those).
 * Pure, no allocation, bounded by its inputs.
 */
enum st_auth_source st_auth_token_extract(const char *authorization, const char *cookie, const char *cookie_name,
					  const char *query_token, bool allow_query, const char **tok, size_t *len);

#endif
