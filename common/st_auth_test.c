/*
 * st_auth_test: JWKS parsing, token verification, topic patterns and token
 * extraction, table-driven, with real keys: RSA and EC keys are generated
 * by OpenSSL for the run, exported as JWK members, and tokens are signed by
 * libjwt (the forged ones by hand).  Time is a fake wall clock.
 */
#include "st_auth.h"
#include "st_auth_store.h"

#include <jwt.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "st_buf.h"
#include "st_test.h"
#include "st_util.h"

#define NOW_S 1900000000ull /* the fake wall clock, in seconds since the epoch */

static const char hs_secret[] = "0123456789abcdef0123456789abcdef"; /* 32 bytes */

static EVP_PKEY *rsa_key, *ec_key;
static char *rsa_priv_pem, *ec_priv_pem, *rsa_pub_pem;
static char jwks[8192];

/* ---- helpers ------------------------------------------------------------ */

static void
b64url(const unsigned char *in, size_t len, char *out)
{
	static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	size_t o = 0, i = 0;

	for (; i + 2 < len; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];

		out[o++] = tbl[v >> 18];
		out[o++] = tbl[(v >> 12) & 63];
		out[o++] = tbl[(v >> 6) & 63];
		out[o++] = tbl[v & 63];
	}
	if (len - i == 1) {
		uint32_t v = (uint32_t)in[i] << 16;

		out[o++] = tbl[v >> 18];
		out[o++] = tbl[(v >> 12) & 63];
	} else if (len - i == 2) {
		uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;

		out[o++] = tbl[v >> 18];
		out[o++] = tbl[(v >> 12) & 63];
		out[o++] = tbl[(v >> 6) & 63];
	}
	out[o] = '\0';
}

static char *
pem_of(EVP_PKEY *pk, bool priv)
{
	BIO *mem = BIO_new(BIO_s_mem());
	char *data, *out;
	long n;

	ST_ASSERT(mem && (priv ? PEM_write_bio_PrivateKey(mem, pk, NULL, NULL, 0, NULL, NULL)
			       : PEM_write_bio_PUBKEY(mem, pk)) == 1);
	n = BIO_get_mem_data(mem, &data);
	out = st_xstrndup(data, (size_t)n);
	BIO_free(mem);
	return out;
}

static void
bn_b64(EVP_PKEY *pk, const char *param, char *out)
{
	BIGNUM *bn = NULL;
	unsigned char buf[1024];
	int n;

	ST_ASSERT(EVP_PKEY_get_bn_param(pk, param, &bn) == 1);
	n = BN_bn2bin(bn, buf);
	b64url(buf, (size_t)n, out);
	BN_free(bn);
}

static void
keys_setup(void)
{
	char n[800], e[16], x[64], y[64], k[64];
	unsigned char pt[65];
	size_t ptlen;

	rsa_key = EVP_RSA_gen(2048);
	ec_key = EVP_EC_gen("P-256");
	ST_ASSERT(rsa_key && ec_key);
	rsa_priv_pem = pem_of(rsa_key, true);
	rsa_pub_pem = pem_of(rsa_key, false);
	ec_priv_pem = pem_of(ec_key, true);
	bn_b64(rsa_key, OSSL_PKEY_PARAM_RSA_N, n);
	bn_b64(rsa_key, OSSL_PKEY_PARAM_RSA_E, e);
	ST_ASSERT(EVP_PKEY_get_octet_string_param(ec_key, OSSL_PKEY_PARAM_PUB_KEY, pt, sizeof(pt), &ptlen) == 1 &&
		  ptlen == 65);
	b64url(pt + 1, 32, x);
	b64url(pt + 33, 32, y);
	b64url((const unsigned char *)hs_secret, 32, k);
	snprintf(jwks, sizeof(jwks),
		 "{\"keys\":["
		 "{\"kty\":\"oct\",\"kid\":\"hs1\",\"alg\":\"HS256\",\"k\":\"%s\"},"
		 "{\"kty\":\"RSA\",\"kid\":\"rsa1\",\"alg\":\"RS256\",\"use\":\"sig\",\"n\":\"%s\",\"e\":\"%s\"},"
		 "{\"kty\":\"EC\",\"kid\":\"ec1\",\"alg\":\"ES256\",\"crv\":\"P-256\",\"x\":\"%s\",\"y\":\"%s\"}]}",
		 k, n, e, x, y);
}

static st_auth_keys *
load_jwks(void)
{
	st_auth_keys *ks = NULL;
	char why[256] = "";

	if (st_auth_keys_parse(jwks, strlen(jwks), &ks, why, sizeof(why)) != ST_OK)
		fprintf(stderr, "jwks refused: %s\n", why);
	return ks;
}

/* A token signed by libjwt: alg/kid in the header, claims as JSON.  Caller frees. */
static char *
sign(const char *alg, const char *kid, const char *claims)
{
	jwt_t *jwt = NULL;
	jwt_alg_t a = jwt_str_alg(alg);
	const char *key = a == JWT_ALG_HS256 ? hs_secret : a == JWT_ALG_RS256 ? rsa_priv_pem : ec_priv_pem;
	size_t klen = a == JWT_ALG_HS256 ? 32 : strlen(key);
	char *tok, *out;

	ST_ASSERT(jwt_new(&jwt) == 0);
	ST_ASSERT(jwt_add_grants_json(jwt, claims) == 0);
	if (kid)
		ST_ASSERT(jwt_add_header(jwt, "kid", kid) == 0);
	ST_ASSERT(jwt_set_alg(jwt, a, (const unsigned char *)key, (int)klen) == 0);
	tok = jwt_encode_str(jwt);
	ST_ASSERT(tok != NULL);
	out = st_xstrdup(tok);
	free(tok); /* libjwt 1.10 allocates with malloc */
	jwt_free(jwt);
	return out;
}

/* A token assembled by hand: header and claims JSON, HS256 over the given secret, or no signature. */
static char *
forge(const char *header, const char *claims, const void *secret, size_t slen)
{
	char h[1024], p[2048], sig[128], *out = st_xmalloc(4096);
	unsigned char mac[32];
	unsigned int maclen = 0;

	b64url((const unsigned char *)header, strlen(header), h);
	b64url((const unsigned char *)claims, strlen(claims), p);
	snprintf(out, 4096, "%s.%s", h, p);
	sig[0] = '\0';
	if (secret) {
		ST_ASSERT(HMAC(EVP_sha256(), secret, (int)slen, (const unsigned char *)out, strlen(out), mac, &maclen));
		b64url(mac, maclen, sig);
	}
	strcat(out, ".");
	strcat(out, sig);
	return out;
}

/* ---- key files ------------------------------------------------------------ */

static void
t_keys_valid(void)
{
	st_auth_keys *ks = load_jwks();

	ST_CHECK(ks != NULL);
	ST_CHECK_EQ_U64(st_auth_keys_count(ks), 3);
	st_auth_keys_unref(ks);
}

static void
t_keys_refused(void)
{
	static const struct {
		const char *doc;
		const char *why; /* a part of the reason */
	} cases[] = {
		{ "", "not a JSON" },
		{ "[]", "\"keys\" array" },
		{ "{\"keys\":{}}", "\"keys\" array" },
		{ "{\"keys\":[]}", "1..64" },
		{ "{\"keys\":[1]}", "object" },
		{ "{\"keys\":[{\"kty\":\"oct\",\"alg\":\"HS256\",\"k\":\"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY\"}"
		  "]}",
		  "kid" },
		{ "{\"keys\":[{\"kty\":\"oct\",\"kid\":\"a\",\"k\":\"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY\"}]}",
		  "alg is required" },
		{ "{\"keys\":[{\"kty\":\"oct\",\"kid\":\"a\",\"alg\":\"RS256\",\"k\":"
		  "\"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY\"}]}",
		  "must be HS256" },
		{ "{\"keys\":[{\"kty\":\"oct\",\"kid\":\"a\",\"alg\":\"none\",\"k\":"
		  "\"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY\"}]}",
		  "must be HS256" },
		{ "{\"keys\":[{\"kty\":\"oct\",\"kid\":\"a\",\"alg\":\"HS256\",\"k\":\"c2hvcnQ\"}]}",
		  "shorter than 32" },
		{ "{\"keys\":[{\"kty\":\"oct\",\"kid\":\"a\",\"alg\":\"HS256\",\"k\":\"MDEy+zQ1\"}]}", "base64url" },
		{ "{\"keys\":[{\"kty\":\"oct\",\"kid\":\"a\",\"alg\":\"HS256\",\"use\":\"enc\",\"k\":"
		  "\"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY\"}]}",
		  "use must be sig" },
		{ "{\"keys\":[{\"kty\":\"oct\",\"kid\":\"a\",\"alg\":\"HS256\",\"k\":"
		  "\"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY\"},"
		  "{\"kty\":\"oct\",\"kid\":\"a\",\"alg\":\"HS256\",\"k\":"
		  "\"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY\"}]}",
		  "not unique" },
		{ "{\"keys\":[{\"kty\":\"OKP\",\"kid\":\"a\",\"alg\":\"EdDSA\"}]}", "kty must be" },
		{ "{\"keys\":[{\"kty\":\"OKP\",\"kid\":\"a\\nb\\\"c\",\"alg\":\"EdDSA\"}]}",
		  "(kid \"a?b?c\"): kty must be" },
		{ "{\"keys\":[{\"kty\":\"RSA\",\"kid\":\"r\",\"alg\":\"RS256\",\"n\":\"AQAB\",\"e\":\"AQAB\"}]}",
		  "RSA" },
		{ "{\"keys\":[{\"kty\":\"RSA\",\"kid\":\"r\",\"alg\":\"RS256\",\"n\":\"AQAB\",\"e\":\"AQAB\",\"d\":"
		  "\"AQAB\"}]}",
		  "private key" },
		{ "{\"keys\":[{\"kty\":\"EC\",\"kid\":\"e\",\"alg\":\"ES256\",\"crv\":\"P-384\",\"x\":\"AA\",\"y\":"
		  "\"AA\"}]}",
		  "P-256" },
		/* x, y of 32 bytes each that are not a point of the curve */
		{ "{\"keys\":[{\"kty\":\"EC\",\"kid\":\"e\",\"alg\":\"ES256\",\"crv\":\"P-256\","
		  "\"x\":\"AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE\",\"y\":"
		  "\"AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE\"}]}",
		  "not on P-256" },
		{ "{\"keys\":[{\"kty\":\"EC\",\"kid\":\"e\",\"alg\":\"ES256\",\"crv\":\"P-256\",\"x\":\"AQ\",\"y\":"
		  "\"AQ\"}]}",
		  "32 bytes" },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		st_auth_keys *ks = NULL;
		char why[256] = "";
		st_err rv = st_auth_keys_parse(cases[i].doc, strlen(cases[i].doc), &ks, why, sizeof(why));

		if (rv == ST_OK || strstr(why, cases[i].why) == NULL)
			fprintf(stderr, "case %zu: rv %d why \"%s\" (want \"%s\")\n", i, (int)rv, why, cases[i].why);
		ST_CHECK(rv == ST_EINVAL);
		ST_CHECK(ks == NULL);
		ST_CHECK(strstr(why, cases[i].why) != NULL);
	}
}

static void
t_keys_short_rsa(void)
{
	EVP_PKEY *small = EVP_RSA_gen(1024);
	char n[400], e[16], doc[1024], why[256] = "";
	st_auth_keys *ks = NULL;

	bn_b64(small, OSSL_PKEY_PARAM_RSA_N, n);
	bn_b64(small, OSSL_PKEY_PARAM_RSA_E, e);
	snprintf(doc, sizeof(doc),
		 "{\"keys\":[{\"kty\":\"RSA\",\"kid\":\"r\",\"alg\":\"RS256\",\"n\":\"%s\",\"e\":\"%s\"}]}", n, e);
	ST_CHECK(st_auth_keys_parse(doc, strlen(doc), &ks, why, sizeof(why)) == ST_EINVAL);
	ST_CHECK(strstr(why, "2048") != NULL);
	EVP_PKEY_free(small);
}

static void
t_keys_load(void)
{
	char path[] = "/tmp/auth_test_XXXXXX";
	int fd = mkstemp(path);
	st_auth_keys *ks = NULL;
	char why[256] = "";

	ST_ASSERT(fd != -1);
	ST_ASSERT(write(fd, jwks, strlen(jwks)) == (ssize_t)strlen(jwks));
	close(fd);
	ST_ASSERT(chmod(path, 0644) == 0);
	ST_CHECK(st_auth_keys_load(path, &ks, why, sizeof(why)) == ST_OK);
	ST_CHECK_EQ_U64(st_auth_keys_count(ks), 3);
	st_auth_keys_unref(ks);
	/* Writable by the group or by others: refused, nothing parsed. */
	ST_ASSERT(chmod(path, 0664) == 0);
	ks = NULL;
	ST_CHECK(st_auth_keys_load(path, &ks, why, sizeof(why)) == ST_EINVAL);
	ST_CHECK(ks == NULL);
	ST_CHECK(strstr(why, "writable by its group (mode 0664)") != NULL);
	ST_ASSERT(chmod(path, 0602) == 0);
	ST_CHECK(st_auth_keys_load(path, &ks, why, sizeof(why)) == ST_EINVAL);
	ST_CHECK(strstr(why, "writable by others (mode 0602)") != NULL);
	unlink(path);
	ST_CHECK(st_auth_keys_load(path, &ks, why, sizeof(why)) == ST_EINVAL);
	ST_CHECK(strstr(why, "cannot read") != NULL);
	ST_CHECK(st_auth_keys_load("/tmp", &ks, why, sizeof(why)) == ST_EINVAL);
}

/* ---- verification ----------------------------------------------------------- */

#define GOOD_CLAIMS "{\"exp\":1900000600,\"topics\":[\"orders/*\"]}"

static void
t_verify_table(void)
{
	st_auth_keys *ks = load_jwks();
	st_auth_policy pol = { .leeway_s = 30 };
	st_auth_policy aud = { .leeway_s = 30, .audience = "studio", .issuer = "https://idp.example" };
	st_auth_policy day = { .leeway_s = 30, .max_lifetime_s = 86400 };
	char big[16384 + 1];
	struct {
		const char *name;
		char *tok;
		const st_auth_policy *pol;
		enum st_auth_result want;
	} cases[] = {
		{ "HS256", sign("HS256", "hs1", GOOD_CLAIMS), &pol, ST_AUTH_OK },
		{ "RS256", sign("RS256", "rsa1", GOOD_CLAIMS), &pol, ST_AUTH_OK },
		{ "ES256", sign("ES256", "ec1", GOOD_CLAIMS), &pol, ST_AUTH_OK },
		{ "alg none", forge("{\"alg\":\"none\",\"kid\":\"hs1\"}", GOOD_CLAIMS, NULL, 0), &pol,
		  ST_AUTH_INVALID },
		{ "alg none, no kid", forge("{\"alg\":\"none\"}", GOOD_CLAIMS, NULL, 0), &pol, ST_AUTH_INVALID },
		{ "HS256 keyed with the RSA public key",
		  forge("{\"alg\":\"HS256\",\"kid\":\"rsa1\"}", GOOD_CLAIMS, rsa_pub_pem, strlen(rsa_pub_pem)), &pol,
		  ST_AUTH_INVALID },
		{ "repeated alg member",
		  forge("{\"alg\":\"RS256\",\"kid\":\"rsa1\",\"alg\":\"HS256\"}", GOOD_CLAIMS, rsa_pub_pem,
			strlen(rsa_pub_pem)),
		  &pol, ST_AUTH_INVALID },
		{ "RS256 header on the HS key",
		  forge("{\"alg\":\"RS256\",\"kid\":\"hs1\"}", GOOD_CLAIMS, hs_secret, 32), &pol, ST_AUTH_INVALID },
		{ "hand-made HS256",
		  forge("{\"alg\":\"HS256\",\"kid\":\"hs1\",\"typ\":\"JWT\"}", GOOD_CLAIMS, hs_secret, 32), &pol,
		  ST_AUTH_OK },
		{ "crit header",
		  forge("{\"alg\":\"HS256\",\"kid\":\"hs1\",\"crit\":[\"x\"]}", GOOD_CLAIMS, hs_secret, 32), &pol,
		  ST_AUTH_INVALID },
		{ "unknown kid", sign("HS256", "nope", GOOD_CLAIMS), &pol, ST_AUTH_INVALID },
		{ "no kid", sign("HS256", NULL, GOOD_CLAIMS), &pol, ST_AUTH_INVALID },
		{ "expired", sign("HS256", "hs1", "{\"exp\":1899999000,\"topics\":[\"*\"]}"), &pol, ST_AUTH_EXPIRED },
		{ "expired within leeway", sign("HS256", "hs1", "{\"exp\":1899999980,\"topics\":[\"*\"]}"), &pol,
		  ST_AUTH_OK },
		{ "exp missing", sign("HS256", "hs1", "{\"topics\":[\"*\"]}"), &pol, ST_AUTH_INVALID },
		{ "exp a string", sign("HS256", "hs1", "{\"exp\":\"1900000600\"}"), &pol, ST_AUTH_INVALID },
		{ "exp with a fraction", sign("HS256", "hs1", "{\"exp\":1900000600.5}"), &pol, ST_AUTH_OK },
		{ "exp far away", sign("HS256", "hs1", "{\"exp\":1000000000000000}"), &pol, ST_AUTH_OK },
		{ "exp past the bound", sign("HS256", "hs1", "{\"exp\":1000000000000001}"), &pol, ST_AUTH_INVALID },
		/* libjwt's JSON parser refuses to encode an integer past int64: signed by hand. */
		{ "exp huge",
		  forge("{\"alg\":\"HS256\",\"kid\":\"hs1\"}", "{\"exp\":99999999999999999999999}", hs_secret, 32),
		  &pol, ST_AUTH_INVALID },
		{ "exp negative", sign("HS256", "hs1", "{\"exp\":-1}"), &pol, ST_AUTH_INVALID },
		/* libjwt would re-encode 1.9e9 as 1900000000.0: signed by hand to keep the exponent. */
		{ "exp with an exponent",
		  forge("{\"alg\":\"HS256\",\"kid\":\"hs1\"}", "{\"exp\":1.9e9}", hs_secret, 32), &pol,
		  ST_AUTH_INVALID },
		{ "nbf in the future", sign("HS256", "hs1", "{\"exp\":1900000600,\"nbf\":1900000300}"), &pol,
		  ST_AUTH_INVALID },
		{ "nbf within leeway", sign("HS256", "hs1", "{\"exp\":1900000600,\"nbf\":1900000020}"), &pol,
		  ST_AUTH_OK },
		{ "iat in the future", sign("HS256", "hs1", "{\"exp\":1900000600,\"iat\":1900000300}"), &pol,
		  ST_AUTH_INVALID },
		{ "iat in the past", sign("HS256", "hs1", "{\"exp\":1900000600,\"iat\":1899999000}"), &pol,
		  ST_AUTH_OK },
		{ "aud and iss right",
		  sign("HS256", "hs1", "{\"exp\":1900000600,\"aud\":\"studio\",\"iss\":\"https://idp.example\"}"), &aud,
		  ST_AUTH_OK },
		{ "aud in an array",
		  sign("HS256", "hs1",
		       "{\"exp\":1900000600,\"aud\":[\"x\",\"studio\"],\"iss\":\"https://idp.example\"}"),
		  &aud, ST_AUTH_OK },
		{ "aud wrong",
		  sign("HS256", "hs1", "{\"exp\":1900000600,\"aud\":\"other\",\"iss\":\"https://idp.example\"}"), &aud,
		  ST_AUTH_INVALID },
		{ "aud missing", sign("HS256", "hs1", "{\"exp\":1900000600,\"iss\":\"https://idp.example\"}"), &aud,
		  ST_AUTH_INVALID },
		{ "iss wrong", sign("HS256", "hs1", "{\"exp\":1900000600,\"aud\":\"studio\",\"iss\":\"https://evil\"}"),
		  &aud, ST_AUTH_INVALID },
		{ "aud ignored when not configured", sign("HS256", "hs1", "{\"exp\":1900000600,\"aud\":\"other\"}"),
		  &pol, ST_AUTH_OK },
		{ "topics not an array", sign("HS256", "hs1", "{\"exp\":1900000600,\"topics\":\"orders/1\"}"), &pol,
		  ST_AUTH_INVALID },
		{ "topics holds a number", sign("HS256", "hs1", "{\"exp\":1900000600,\"topics\":[1]}"), &pol,
		  ST_AUTH_INVALID },
		{ "claims not an object", forge("{\"alg\":\"HS256\",\"kid\":\"hs1\"}", "[1]", hs_secret, 32), &pol,
		  ST_AUTH_INVALID },
		{ "claims not JSON", forge("{\"alg\":\"HS256\",\"kid\":\"hs1\"}", "{", hs_secret, 32), &pol,
		  ST_AUTH_INVALID },
		/* A repeated claim: the first would be read here, the last by many other parsers. */
		{ "repeated claim",
		  forge("{\"alg\":\"HS256\",\"kid\":\"hs1\"}",
			"{\"exp\":1900000600,\"topics\":[\"orders/*\"],\"topics\":[\"*\"]}", hs_secret, 32),
		  &pol, ST_AUTH_INVALID },
		{ "repeated exp",
		  forge("{\"alg\":\"HS256\",\"kid\":\"hs1\"}", "{\"exp\":1900000600,\"exp\":1999999999}", hs_secret,
			32),
		  &pol, ST_AUTH_INVALID },
		{ "repeated member in a nested object",
		  forge("{\"alg\":\"HS256\",\"kid\":\"hs1\"}", "{\"exp\":1900000600,\"x\":[{\"a\":1,\"a\":2}]}",
			hs_secret, 32),
		  &pol, ST_AUTH_INVALID },
		{ "same name in two objects",
		  forge("{\"alg\":\"HS256\",\"kid\":\"hs1\"}", "{\"exp\":1900000600,\"x\":{\"exp\":1}}", hs_secret, 32),
		  &pol, ST_AUTH_OK },
		/* --auth-max-lifetime 24h: exp at most a day (+ leeway) away. */
		{ "30-day token, 24 h lifetime", sign("HS256", "hs1", "{\"exp\":1902592000}"), &day, ST_AUTH_INVALID },
		{ "exp a day away, 24 h lifetime", sign("HS256", "hs1", "{\"exp\":1900086400}"), &day, ST_AUTH_OK },
		{ "exp a day and the leeway away", sign("HS256", "hs1", "{\"exp\":1900086430}"), &day, ST_AUTH_OK },
		{ "exp past a day and the leeway", sign("HS256", "hs1", "{\"exp\":1900086431}"), &day,
		  ST_AUTH_INVALID },
		{ "30-day token, no bound", sign("HS256", "hs1", "{\"exp\":1902592000}"), &pol, ST_AUTH_OK },
		{ "empty", st_xstrdup(""), &pol, ST_AUTH_INVALID },
		{ "one segment", st_xstrdup("abc"), &pol, ST_AUTH_INVALID },
		{ "four segments", st_xstrdup("a.b.c.d"), &pol, ST_AUTH_INVALID },
		{ "header not base64url", st_xstrdup("a+b.c.d"), &pol, ST_AUTH_INVALID },
		{ "16 KiB", NULL, &pol, ST_AUTH_INVALID },
	};

	memset(big, 'A', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	memcpy(big + 100, ".", 1);
	memcpy(big + 200, ".", 1);
	cases[ST_ARRAY_LEN(cases) - 1].tok = st_xstrdup(big);
	ST_ASSERT(ks != NULL);
	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		st_auth_grant *g = NULL;
		const char *why = NULL;
		enum st_auth_result r =
			st_auth_verify(ks, cases[i].tok, strlen(cases[i].tok), NOW_S * 1000, cases[i].pol, &g, &why);

		if (r != cases[i].want)
			fprintf(stderr, "case \"%s\": got %s (%s), want %s\n", cases[i].name, st_auth_result_name(r),
				why ? why : "-", st_auth_result_name(cases[i].want));
		ST_CHECK(r == cases[i].want);
		ST_CHECK((r == ST_AUTH_OK) == (g != NULL));
		ST_CHECK(r == ST_AUTH_OK || why != NULL);
		st_auth_grant_free(g);
		free(cases[i].tok);
	}
	/* Tampering: every good token with one signature byte changed, and truncated. */
	{
		const char *algs[] = { "HS256", "RS256", "ES256" }, *kids[] = { "hs1", "rsa1", "ec1" };

		for (size_t i = 0; i < 3; i++) {
			char *tok = sign(algs[i], kids[i], GOOD_CLAIMS);
			size_t len = strlen(tok);
			st_auth_grant *g = NULL;

			tok[len - 3] = tok[len - 3] == 'A' ? 'B' : 'A';
			ST_CHECK(st_auth_verify(ks, tok, len, NOW_S * 1000, &pol, &g, NULL) == ST_AUTH_INVALID);
			ST_CHECK(st_auth_verify(ks, tok, len - 10, NOW_S * 1000, &pol, &g, NULL) == ST_AUTH_INVALID);
			ST_CHECK(g == NULL);
			free(tok);
		}
		/*
		 * Non-canonical signatures: the last character with a leftover bit
		 * set decodes to the same bytes in a lenient decoder (libjwt's),
		 * so only the canonical check refuses it.
		 */
		for (size_t i = 0; i < 3; i++) {
			static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
			char *tok = sign(algs[i], kids[i], GOOD_CLAIMS);
			size_t len = strlen(tok);
			const char *at = strchr(tbl, tok[len - 1]);
			st_auth_grant *g = NULL;
			const char *why = NULL;

			ST_ASSERT(at != NULL && ((at - tbl) & 1) == 0);
			ST_CHECK(st_auth_verify(ks, tok, len, NOW_S * 1000, &pol, &g, NULL) == ST_AUTH_OK);
			st_auth_grant_free(g);
			g = NULL;
			tok[len - 1] = tbl[(at - tbl) | 1];
			ST_CHECK(st_auth_verify(ks, tok, len, NOW_S * 1000, &pol, &g, &why) == ST_AUTH_INVALID);
			ST_CHECK(why != NULL && strstr(why, "canonical") != NULL);
			/* Padding is not base64url either. */
			tok[len - 1] = '=';
			ST_CHECK(st_auth_verify(ks, tok, len, NOW_S * 1000, &pol, &g, NULL) == ST_AUTH_INVALID);
			ST_CHECK(g == NULL);
			free(tok);
		}
	}
	st_auth_keys_unref(ks);
}

static void
t_grant_exp(void)
{
	st_auth_keys *ks = load_jwks();
	st_auth_policy pol = { 0 };
	char *tok = sign("ES256", "ec1", GOOD_CLAIMS);
	st_auth_grant *g = NULL;

	ST_CHECK(st_auth_verify(ks, tok, strlen(tok), NOW_S * 1000, &pol, &g, NULL) == ST_AUTH_OK);
	ST_CHECK_EQ_U64(st_auth_grant_exp_ms(g), 1900000600000ull);
	st_auth_grant_free(g);
	/* No leeway: expired exactly at exp. */
	ST_CHECK(st_auth_verify(ks, tok, strlen(tok), 1900000600000ull, &pol, &g, NULL) == ST_AUTH_EXPIRED);
	ST_CHECK(st_auth_verify(ks, tok, strlen(tok), 1900000599999ull, &pol, &g, NULL) == ST_AUTH_OK);
	st_auth_grant_free(g);
	free(tok);
	st_auth_keys_unref(ks);
}

static void
t_topics_claim_renamed(void)
{
	st_auth_keys *ks = load_jwks();
	st_auth_policy pol = { .topics_claim = "scope_topics" };
	char *tok = sign("HS256", "hs1", "{\"exp\":1900000600,\"scope_topics\":[\"a\"],\"topics\":[\"b\"]}");
	st_auth_grant *g = NULL;

	ST_CHECK(st_auth_verify(ks, tok, strlen(tok), NOW_S * 1000, &pol, &g, NULL) == ST_AUTH_OK);
	ST_CHECK(st_auth_grant_covers(g, "a", 1));
	ST_CHECK(!st_auth_grant_covers(g, "b", 1));
	st_auth_grant_free(g);
	free(tok);
	st_auth_keys_unref(ks);
}

static void
t_covers_table(void)
{
	static const struct {
		const char *claims;
		const char *topic;
		bool want;
	} cases[] = {
		{ "[\"orders/*\"]", "orders/1", true },
		{ "[\"orders/*\"]", "orders/1/lines", true },
		{ "[\"orders/*\"]", "orders", false },
		{ "[\"orders/*\"]", "orders/", false },
		{ "[\"orders/*\"]", "ordersx/1", false },
		{ "[\"orders/*\"]", "users/1", false },
		{ "[\"orders/1\"]", "orders/1", true },
		{ "[\"orders/1\"]", "orders/10", false },
		{ "[\"orders/1\"]", "orders/", false },
		{ "[\"*\"]", "anything", true },
		{ "[\"a\",\"b/*\"]", "b/c", true },
		{ "[\"a\",\"b/*\"]", "a", true },
		{ "[\"a\",\"b/*\"]", "c", false },
		{ "[\"orders*\"]", "orders1", false }, /* a star not after '/' is a literal */
		{ "[]", "a", false },
		{ "null", "a", false }, /* no claim at all */
	};
	st_auth_keys *ks = load_jwks();
	st_auth_policy pol = { 0 };

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		char claims[256];
		char *tok;
		st_auth_grant *g = NULL;

		if (strcmp(cases[i].claims, "null") == 0)
			snprintf(claims, sizeof(claims), "{\"exp\":1900000600}");
		else
			snprintf(claims, sizeof(claims), "{\"exp\":1900000600,\"topics\":%s}", cases[i].claims);
		tok = sign("HS256", "hs1", claims);
		ST_CHECK(st_auth_verify(ks, tok, strlen(tok), NOW_S * 1000, &pol, &g, NULL) == ST_AUTH_OK);
		if (g && st_auth_grant_covers(g, cases[i].topic, strlen(cases[i].topic)) != cases[i].want) {
			fprintf(stderr, "case %zu: %s covers %s: want %d\n", i, cases[i].claims, cases[i].topic,
				(int)cases[i].want);
			ST_CHECK(false);
		}
		st_auth_grant_free(g);
		free(tok);
	}
	st_auth_keys_unref(ks);
}

/* ---- extraction --------------------------------------------------------------- */

static void
t_extract_table(void)
{
	static const struct {
		const char *authz, *cookie, *query;
		bool allow_query;
		enum st_auth_source src;
		const char *tok;
	} cases[] = {
		{ "Bearer abc.def.ghi", NULL, NULL, false, ST_AUTH_SRC_HEADER, "abc.def.ghi" },
		{ "bearer   abc  ", NULL, NULL, false, ST_AUTH_SRC_HEADER, "abc" },
		{ "Bearer", NULL, NULL, false, ST_AUTH_SRC_HEADER, "" },
		{ "BearerX abc", NULL, NULL, false, ST_AUTH_SRC_NONE, NULL },
		{ "Basic dXNlcjpwYXNz", NULL, NULL, false, ST_AUTH_SRC_NONE, NULL },
		{ "Basic dXNlcjpwYXNz", "studio_token=t1", NULL, false, ST_AUTH_SRC_COOKIE, "t1" },
		{ "Bearer h", "studio_token=c", "q", true, ST_AUTH_SRC_HEADER, "h" },
		{ NULL, "a=1; studio_token=tok; b=2", NULL, false, ST_AUTH_SRC_COOKIE, "tok" },
		{ NULL, "a=1;studio_token=\"tok\"", NULL, false, ST_AUTH_SRC_COOKIE, "tok" },
		{ NULL, "xstudio_token=no; studio_tokens=no", NULL, false, ST_AUTH_SRC_NONE, NULL },
		{ NULL, "studio_token", NULL, false, ST_AUTH_SRC_NONE, NULL },
		{ NULL, "studio_token=", NULL, false, ST_AUTH_SRC_COOKIE, "" },
		{ NULL, "\"", NULL, false, ST_AUTH_SRC_NONE, NULL },
		{ NULL, "studio_token=\"", NULL, false, ST_AUTH_SRC_COOKIE, "\"" },
		{ NULL, NULL, "qtok", false, ST_AUTH_SRC_NONE, NULL },
		{ NULL, NULL, "qtok", true, ST_AUTH_SRC_QUERY, "qtok" },
		{ NULL, "other=1", "qtok", true, ST_AUTH_SRC_QUERY, "qtok" },
		{ NULL, NULL, NULL, true, ST_AUTH_SRC_NONE, NULL },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		const char *tok = NULL;
		size_t len = 0;
		enum st_auth_source src = st_auth_token_extract(cases[i].authz, cases[i].cookie, NULL, cases[i].query,
								cases[i].allow_query, &tok, &len);

		if (src != cases[i].src)
			fprintf(stderr, "case %zu: source %d, want %d\n", i, (int)src, (int)cases[i].src);
		ST_CHECK(src == cases[i].src);
		if (cases[i].tok)
			ST_CHECK_MEM(tok, len, cases[i].tok);
	}
	/* A renamed cookie. */
	{
		const char *tok;
		size_t len;

		ST_CHECK(st_auth_token_extract(NULL, "studio_token=a; sid=b", "sid", NULL, false, &tok, &len) ==
			 ST_AUTH_SRC_COOKIE);
		ST_CHECK_MEM(tok, len, "b");
	}
}

/* ---- the store ---------------------------------------------------------------- */

static void
t_store_check_and_swap(void)
{
	st_clock_fake wall;
	st_auth_config cfg = { .policy = { .leeway_s = 0 }, .wall = &wall.clock };
	st_auth_store *st;
	const char *topics[] = { "orders/1", "users/1" };
	size_t lens[] = { 8, 7 };
	char hdr[4096];
	char *tok = sign("HS256", "hs1", GOOD_CLAIMS);
	const char *why;
	uint64_t exp = 0, kid = 0, hs1_id;
	st_auth_keys *other = NULL;
	char w[128];

	st_clock_fake_init(&wall, NOW_S * 1000);
	st = st_auth_store_new(load_jwks(), &cfg);
	snprintf(hdr, sizeof(hdr), "Bearer %s", tok);
	ST_CHECK(st_auth_store_check(st, hdr, NULL, NULL, topics, lens, 1, &exp, &kid, &why) == ST_AUTH_OK);
	ST_CHECK_EQ_U64(exp, 1900000600000ull);
	ST_CHECK(kid != 0 && st_auth_store_has_key(st, kid));
	hs1_id = kid;
	ST_CHECK(st_auth_store_check(st, hdr, NULL, NULL, topics, lens, 2, &exp, &kid, &why) == ST_AUTH_FORBIDDEN);
	ST_CHECK(st_auth_store_check(st, NULL, NULL, NULL, topics, lens, 1, &exp, &kid, &why) == ST_AUTH_MISSING);
	/* A query token is not looked at unless allowed. */
	ST_CHECK(st_auth_store_check(st, NULL, NULL, tok, topics, lens, 1, &exp, &kid, &why) == ST_AUTH_MISSING);
	wall.now = 1900000600000ull;
	ST_CHECK(st_auth_store_check(st, hdr, NULL, NULL, topics, lens, 1, &exp, &kid, &why) == ST_AUTH_EXPIRED);
	wall.now = NOW_S * 1000;
	/* Rotation: a set without hs1 refuses the old token. */
	{
		const char *doc = "{\"keys\":[{\"kty\":\"oct\",\"kid\":\"hs2\",\"alg\":\"HS256\","
				  "\"k\":\"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY\"}]}";

		ST_ASSERT(st_auth_keys_parse(doc, strlen(doc), &other, w, sizeof(w)) == ST_OK);
	}
	ST_CHECK_EQ_U64(st_auth_store_generation(st), 0);
	st_auth_store_swap(st, other);
	ST_CHECK_EQ_U64(st_auth_store_generation(st), 1);
	ST_CHECK_EQ_U64(st_auth_store_key_count(st), 1);
	/* The key that verified the stream is gone: the edge ends the stream. */
	ST_CHECK(!st_auth_store_has_key(st, hs1_id));
	ST_CHECK(st_auth_store_check(st, hdr, NULL, NULL, topics, lens, 1, &exp, &kid, &why) == ST_AUTH_INVALID);
	free(tok);
	tok = sign("HS256", "hs2", GOOD_CLAIMS);
	snprintf(hdr, sizeof(hdr), "studio_token=%s", tok);
	ST_CHECK(st_auth_store_check(st, NULL, hdr, NULL, topics, lens, 1, &exp, &kid, &why) == ST_AUTH_OK);
	free(tok);
	st_auth_store_free(st);
	/* The query, when allowed. */
	cfg.query_token = true;
	st = st_auth_store_new(load_jwks(), &cfg);
	tok = sign("HS256", "hs1", GOOD_CLAIMS);
	ST_CHECK(st_auth_store_check(st, NULL, NULL, tok, topics, lens, 1, &exp, &kid, &why) == ST_AUTH_OK);
	/* Reloaded with the same keys: the same ids, every stream stays. */
	ST_CHECK_EQ_U64(kid, hs1_id);
	st_auth_store_swap(st, load_jwks());
	ST_CHECK(st_auth_store_has_key(st, hs1_id));
	free(tok);
	st_auth_store_free(st);
}

/*
 * A token past exp but within the leeway passes verification (the writer's
 * one-shot requests) but is refused as a stream's admission: the stream
 * would end at exp, at once.
 */
static void
t_store_leeway_admission(void)
{
	st_clock_fake wall;
	st_auth_config cfg = { .policy = { .leeway_s = 30 }, .wall = &wall.clock };
	st_auth_store *st;
	const char *topics[] = { "orders/1" };
	size_t lens[] = { 8 };
	char hdr[4096];
	char *tok = sign("HS256", "hs1", GOOD_CLAIMS);
	const char *why = NULL;
	uint64_t exp = 0, kid = 0;
	st_auth_grant *g = NULL;

	st_clock_fake_init(&wall, 1900000610000ull); /* 10 s past exp */
	st = st_auth_store_new(load_jwks(), &cfg);
	snprintf(hdr, sizeof(hdr), "Bearer %s", tok);
	ST_CHECK(st_auth_store_verify(st, tok, strlen(tok), &g, &why) == ST_AUTH_OK);
	st_auth_grant_free(g);
	ST_CHECK(st_auth_store_check(st, hdr, NULL, NULL, topics, lens, 1, &exp, &kid, &why) == ST_AUTH_EXPIRED);
	ST_CHECK(why != NULL && strstr(why, "leeway") != NULL);
	wall.now = 1900000599999ull;
	ST_CHECK(st_auth_store_check(st, hdr, NULL, NULL, topics, lens, 1, &exp, &kid, &why) == ST_AUTH_OK);
	free(tok);
	st_auth_store_free(st);
}

/* The writer's path: a raw token (no header), the claim "publish", coverage by the caller. */
static void
t_store_verify_publish(void)
{
	st_clock_fake wall;
	st_auth_config cfg = { .policy = { .leeway_s = 30, .topics_claim = "publish" }, .wall = &wall.clock };
	st_auth_store *st;
	char *tok = sign("HS256", "hs1", "{\"exp\":1900000600,\"publish\":[\"orders/*\"],\"topics\":[\"*\"]}");
	char *sub = sign("HS256", "hs1", GOOD_CLAIMS); /* a subscriber's token: topics, no publish */
	st_auth_grant *g = NULL;
	const char *why = NULL;

	st_clock_fake_init(&wall, NOW_S * 1000);
	st = st_auth_store_new(load_jwks(), &cfg);
	ST_CHECK(st_auth_store_verify(st, NULL, 0, &g, &why) == ST_AUTH_MISSING && g == NULL);
	ST_CHECK_STR(why, "no token");
	ST_CHECK(st_auth_store_verify(st, tok, strlen(tok), &g, &why) == ST_AUTH_OK && g != NULL);
	ST_CHECK(g && st_auth_grant_covers(g, "orders/1", 8));
	ST_CHECK(g && !st_auth_grant_covers(g, "users/1", 7)); /* "topics" is not the writer's claim */
	st_auth_grant_free(g);
	g = NULL;
	ST_CHECK(st_auth_store_verify(st, sub, strlen(sub), &g, &why) == ST_AUTH_OK);
	ST_CHECK(g && !st_auth_grant_covers(g, "orders/1", 8)); /* no publish claim: grants nothing */
	st_auth_grant_free(g);
	g = NULL;
	/* The token as it came: no NUL needed, a cut token is invalid. */
	ST_CHECK(st_auth_store_verify(st, tok, strlen(tok) - 1, &g, &why) == ST_AUTH_INVALID && g == NULL);
	wall.now = 1900000600000ull + 30000; /* exp + leeway */
	ST_CHECK(st_auth_store_verify(st, tok, strlen(tok), &g, &why) == ST_AUTH_EXPIRED && g == NULL);
	free(tok);
	free(sub);
	st_auth_store_free(st);
}

int
main(void)
{
	keys_setup();
	ST_RUN(t_keys_valid);
	ST_RUN(t_keys_refused);
	ST_RUN(t_keys_short_rsa);
	ST_RUN(t_keys_load);
	ST_RUN(t_verify_table);
	ST_RUN(t_grant_exp);
	ST_RUN(t_topics_claim_renamed);
	ST_RUN(t_covers_table);
	ST_RUN(t_extract_table);
	ST_RUN(t_store_verify_publish);
	ST_RUN(t_store_check_and_swap);
	ST_RUN(t_store_leeway_admission);
	EVP_PKEY_free(rsa_key);
	EVP_PKEY_free(ec_key);
	free(rsa_priv_pem);
	free(rsa_pub_pem);
	free(ec_priv_pem);
	return st_test_done();
}
