/*
 * st_auth: JWKS keys, JWT verification, topic claims (see st_auth.h).
 * Shared by the edge (subscribers, --auth-keys) and the writer (producers,
 * --ingest-keys): one parser, one set of rules, one reload.
 *
 * DESIGN
 *
 * The order of a check is what keeps libjwt 1.x safe to use.  jwt_decode
 * verifies with whatever alg the token's header names and treats the key
 * bytes as that alg's key: given an RSA public key in PEM and a header
 * saying HS256, it would check an HMAC keyed with the PEM text, which
 * anyone holding the public key can forge.  So before libjwt sees the
 * token: its length is bounded (ST_AUTH_TOKEN_MAX), its shape is three
 * base64url segments, its header is decoded into a bounded buffer and read
 * with st_json, the kid selects exactly one key, and the header's alg must
 * equal that key's alg.  No key has alg "none" (the parser accepts only
 * HS256, RS256 and ES256), so an unsigned token never reaches libjwt.
 * After libjwt accepted the signature, the alg it used is compared once
 * more (the header it parsed is the one we read), and the claims are read
 * here from the payload with st_json, so their rules are ours: exp is
 * required, nbf/iat/exp get the leeway, aud/iss when configured, and the
 * topics claim must be an array of strings.
 *
 * Keys are immutable once parsed and reference counted (atomic), so a
 * reload builds a whole new set and swaps a pointer (st_auth_store.c, the
 * shared store, is its own module on top of this one).
 *
 * SIZE.  Over 800 lines on purpose: the two layers left here (key set and
 * verification) share the key struct and the bounded base64url reader,
 * which splitting them would have to expose; each is tested on its own
 * (st_auth_test, fuzz target auth).  The JWK-to-PEM conversion (OpenSSL,
 * ~170 lines) is the part that would move next.
 */
#include "st_auth.h"

#include <errno.h>
#include <fcntl.h>
#include <jwt.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "st_json.h"
#include "st_util.h"

#define ST_AUTH_KID_MAX 256
/* A JOSE header is a few members: 1 KiB of base64url is plenty. */
#define ST_AUTH_HEADER_B64_MAX 1024
#define ST_AUTH_HEADER_NODES 64
#define ST_AUTH_PAYLOAD_NODES (ST_AUTH_PATTERNS_MAX + 256)
#define ST_AUTH_KEYS_NODES 4096
#define ST_AUTH_HS_MIN_BYTES 32
#define ST_AUTH_RSA_MIN_BITS 2048
#define ST_AUTH_RSA_MAX_BYTES 1024 /* 8192-bit modulus */

enum st_auth_alg { ALG_HS256, ALG_RS256, ALG_ES256, ALG_COUNT };
static const char *const alg_names[ALG_COUNT] = { "HS256", "RS256", "ES256" };
static const jwt_alg_t alg_jwt[ALG_COUNT] = { JWT_ALG_HS256, JWT_ALG_RS256, JWT_ALG_ES256 };

typedef struct st_auth_key {
	char *kid; /* owned */
	enum st_auth_alg alg;
	unsigned char *material; /* owned: the HMAC secret, or a PEM public key (NUL-terminated) */
	size_t material_len;
	uint64_t id; /* key_id: alg, kid and material; what a grant remembers of the key that verified it */
} st_auth_key;

struct st_auth_keys {
	atomic_uint refs;
	size_t n;
	st_auth_key *keys; /* owned, n */
};

struct st_auth_grant {
	uint64_t exp_ms;
	uint64_t key_id; /* the verifying key's id (st_auth_grant_key) */
	bool all;        /* "*" */
	size_t n;
	char **patterns; /* owned copies, n */
	size_t *lens;
};

static const char *const result_names[ST_AUTH_RESULT_COUNT] = { "ok", "missing", "invalid", "expired", "forbidden" };

const char *
st_auth_result_name(enum st_auth_result r)
{
	return (unsigned)r < ST_AUTH_RESULT_COUNT ? result_names[r] : "invalid";
}

/* ---- base64url --------------------------------------------------------- */

static int
b64url_val(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '-')
		return 62;
	if (c == '_')
		return 63;
	return -1;
}

/*
 * Decodes unpadded base64url in[0..len) into out (cap bytes; the result
 * needs len * 3 / 4).  Refuses padding, other characters, a length of 1
 * mod 4, and non-zero bits left over (a canonical encoding only, so one
 * value has one text).  out NULL: only checks (cap is not looked at).
 */
static st_err
b64url_decode(const char *in, size_t len, unsigned char *out, size_t cap, size_t *out_len)
{
	uint32_t acc = 0;
	int bits = 0;
	size_t n = 0;

	if (len % 4 == 1)
		return ST_EINVAL;
	for (size_t i = 0; i < len; i++) {
		int v = b64url_val((unsigned char)in[i]);

		if (v < 0)
			return ST_EINVAL;
		acc = (acc << 6) | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (out != NULL) {
				if (n == cap)
					return ST_EINVAL;
				out[n] = (unsigned char)(acc >> bits);
			}
			n++;
			acc &= (1u << bits) - 1;
		}
	}
	if (acc != 0)
		return ST_EINVAL;
	*out_len = n;
	return ST_OK;
}

/* A JSON string member of obj as base64url bytes, at most cap; ST_EINVAL when absent or bad. */
static st_err
member_b64(const st_json *j, int obj, const char *name, unsigned char *out, size_t cap, size_t *out_len)
{
	size_t slen;
	const char *s = st_json_str(j, st_json_get(j, obj, name), &slen);

	if (s == NULL || slen == 0)
		return ST_EINVAL;
	return b64url_decode(s, slen, out, cap, out_len);
}

/* ---- JWK -> key material -------------------------------------------------- */

/* A public EVP_PKEY as PEM text (NUL-terminated, malloc'd). */
static st_err
pkey_to_pem(EVP_PKEY *pk, unsigned char **out, size_t *out_len)
{
	BIO *mem = BIO_new(BIO_s_mem());
	char *data;
	long n;
	st_err rv = ST_EINVAL;

	if (mem == NULL || PEM_write_bio_PUBKEY(mem, pk) != 1)
		goto done;
	n = BIO_get_mem_data(mem, &data);
	if (n <= 0)
		goto done;
	*out = st_xmalloc((size_t)n + 1);
	memcpy(*out, data, (size_t)n);
	(*out)[n] = '\0';
	*out_len = (size_t)n;
	rv = ST_OK;
done:
	BIO_free(mem);
	return rv;
}

/* Builds a public key from OSSL params and checks it (on the curve, sane modulus). */
static EVP_PKEY *
pkey_from_params(const char *type, OSSL_PARAM_BLD *bld)
{
	OSSL_PARAM *params = OSSL_PARAM_BLD_to_param(bld);
	EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, type, NULL);
	EVP_PKEY_CTX *chk = NULL;
	EVP_PKEY *pk = NULL;

	if (params == NULL || ctx == NULL || EVP_PKEY_fromdata_init(ctx) != 1 ||
	    EVP_PKEY_fromdata(ctx, &pk, EVP_PKEY_PUBLIC_KEY, params) != 1)
		goto fail;
	if ((chk = EVP_PKEY_CTX_new_from_pkey(NULL, pk, NULL)) == NULL || EVP_PKEY_public_check(chk) != 1)
		goto fail;
	goto done;
fail:
	EVP_PKEY_free(pk);
	pk = NULL;
done:
	EVP_PKEY_CTX_free(chk);
	EVP_PKEY_CTX_free(ctx);
	OSSL_PARAM_free(params);
	return pk;
}

static st_err
rsa_pem(const st_json *j, int obj, st_auth_key *k, const char **why)
{
	unsigned char nb[ST_AUTH_RSA_MAX_BYTES], eb[8];
	size_t nlen, elen;
	BIGNUM *n = NULL, *e = NULL;
	OSSL_PARAM_BLD *bld = NULL;
	EVP_PKEY *pk = NULL;
	st_err rv = ST_EINVAL;

	if (member_b64(j, obj, "n", nb, sizeof(nb), &nlen) != ST_OK) {
		*why = "RSA n must be base64url of at most 8192 bits";
		goto done;
	}
	if (member_b64(j, obj, "e", eb, sizeof(eb), &elen) != ST_OK) {
		*why = "RSA e must be base64url of at most 8 bytes";
		goto done;
	}
	n = BN_bin2bn(nb, (int)nlen, NULL);
	e = BN_bin2bn(eb, (int)elen, NULL);
	bld = OSSL_PARAM_BLD_new();
	if (n == NULL || e == NULL || bld == NULL || OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, n) != 1 ||
	    OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, e) != 1) {
		*why = "RSA parameters refused";
		goto done;
	}
	if ((pk = pkey_from_params("RSA", bld)) == NULL) {
		*why = "RSA key refused by OpenSSL";
		goto done;
	}
	if (EVP_PKEY_get_bits(pk) < ST_AUTH_RSA_MIN_BITS) {
		*why = "RSA modulus shorter than 2048 bits";
		goto done;
	}
	if ((rv = pkey_to_pem(pk, &k->material, &k->material_len)) != ST_OK)
		*why = "RSA key could not be written as PEM";
done:
	EVP_PKEY_free(pk);
	OSSL_PARAM_BLD_free(bld);
	BN_free(n);
	BN_free(e);
	return rv;
}

static st_err
ec_pem(const st_json *j, int obj, st_auth_key *k, const char **why)
{
	unsigned char pt[65];
	size_t xl, yl;
	const char *crv = st_json_str(j, st_json_get(j, obj, "crv"), NULL);
	OSSL_PARAM_BLD *bld = NULL;
	EVP_PKEY *pk = NULL;
	st_err rv = ST_EINVAL;

	if (crv == NULL || strcmp(crv, "P-256") != 0) {
		*why = "EC crv must be P-256";
		goto done;
	}
	pt[0] = 0x04; /* uncompressed point: 04 || x || y */
	if (member_b64(j, obj, "x", pt + 1, 32, &xl) != ST_OK || xl != 32 ||
	    member_b64(j, obj, "y", pt + 33, 32, &yl) != ST_OK || yl != 32) {
		*why = "EC x and y must be base64url of 32 bytes each";
		goto done;
	}
	bld = OSSL_PARAM_BLD_new();
	if (bld == NULL || OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) != 1 ||
	    OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, pt, sizeof(pt)) != 1) {
		*why = "EC parameters refused";
		goto done;
	}
	if ((pk = pkey_from_params("EC", bld)) == NULL) {
		*why = "EC point is not on P-256";
		goto done;
	}
	if ((rv = pkey_to_pem(pk, &k->material, &k->material_len)) != ST_OK)
		*why = "EC key could not be written as PEM";
done:
	EVP_PKEY_free(pk);
	OSSL_PARAM_BLD_free(bld);
	return rv;
}

static st_err
oct_secret(const st_json *j, int obj, st_auth_key *k, const char **why)
{
	size_t slen, n;
	const char *s = st_json_str(j, st_json_get(j, obj, "k"), &slen);

	if (s == NULL || slen == 0) {
		*why = "oct key needs k";
		return ST_EINVAL;
	}
	k->material = st_xmalloc(slen);
	if (b64url_decode(s, slen, k->material, slen, &n) != ST_OK) {
		*why = "oct k must be base64url";
		return ST_EINVAL;
	}
	if (n < ST_AUTH_HS_MIN_BYTES) {
		*why = "oct k shorter than 32 bytes (RFC 7518 3.2 asks 256 bits for HS256)";
		return ST_EINVAL;
	}
	k->material_len = n;
	return ST_OK;
}

static void
key_fini(st_auth_key *k)
{
	free(k->kid);
	if (k->material) {
		/* A secret should not linger in freed memory. */
		memset(k->material, 0, k->material_len);
		free(k->material);
	}
}

static void
keys_free(st_auth_keys *ks)
{
	if (ks == NULL)
		return;
	for (size_t i = 0; i < ks->n; i++)
		key_fini(&ks->keys[i]);
	free(ks->keys);
	free(ks);
}

/* Members a public JWK never has: a file holding them holds a private key. */
static const char *const private_members[] = { "d", "p", "q", "dp", "dq", "qi", "oth" };

static st_err
key_parse(const st_json *j, int obj, st_auth_key *k, const char **why)
{
	size_t kid_len;
	const char *kty = st_json_str(j, st_json_get(j, obj, "kty"), NULL);
	const char *alg = st_json_str(j, st_json_get(j, obj, "alg"), NULL);
	const char *kid = st_json_str(j, st_json_get(j, obj, "kid"), &kid_len);
	int use = st_json_get(j, obj, "use");
	int want;

	if (st_json_type(j, obj) != ST_JSON_OBJECT)
		return *why = "a key must be an object", ST_EINVAL;
	if (kid == NULL || kid_len == 0 || kid_len > ST_AUTH_KID_MAX || strlen(kid) != kid_len)
		return *why = "kid must be a string of 1..256 bytes", ST_EINVAL;
	if (kty == NULL)
		return *why = "kty is required", ST_EINVAL;
	if (alg == NULL)
		return *why = "alg is required (HS256, RS256 or ES256)", ST_EINVAL;
	if (use != -1 && (st_json_str(j, use, NULL) == NULL || strcmp(st_json_str(j, use, NULL), "sig") != 0))
		return *why = "use must be sig", ST_EINVAL;
	if (strcmp(kty, "oct") != 0) {
		for (size_t i = 0; i < ST_ARRAY_LEN(private_members); i++)
			if (st_json_get(j, obj, private_members[i]) != -1)
				return *why = "holds a private key (remove d, p, q...: only verification keys belong here)",
				       ST_EINVAL;
	}
	if (strcmp(kty, "oct") == 0)
		want = ALG_HS256;
	else if (strcmp(kty, "RSA") == 0)
		want = ALG_RS256;
	else if (strcmp(kty, "EC") == 0)
		want = ALG_ES256;
	else
		return *why = "kty must be oct, RSA or EC", ST_EINVAL;
	if (strcmp(alg, alg_names[want]) != 0)
		return *why = want == ALG_HS256   ? "an oct key's alg must be HS256"
			      : want == ALG_RS256 ? "an RSA key's alg must be RS256"
						  : "an EC key's alg must be ES256",
		       ST_EINVAL;
	k->kid = st_xstrndup(kid, kid_len);
	k->alg = (enum st_auth_alg)want;
	switch (want) {
	case ALG_HS256: return oct_secret(j, obj, k, why);
	case ALG_RS256: return rsa_pem(j, obj, k, why);
	default: return ec_pem(j, obj, k, why);
	}
}

/*
 * FNV-1a over alg, kid and material: a key replaced under the same kid is
 * another key.  Never 0 (0 is "no key" for callers).  Keys are the
 * operator's, not a client's choice, so a 64-bit hash is identity enough.
 */
static uint64_t
key_id(const st_auth_key *k)
{
	uint64_t h = 1469598103934665603ull;
	const unsigned char *parts[3] = { (const unsigned char *)alg_names[k->alg], (const unsigned char *)k->kid,
					  k->material };
	size_t lens[3] = { strlen(alg_names[k->alg]) + 1, strlen(k->kid) + 1, k->material_len };

	for (size_t p = 0; p < 3; p++) {
		for (size_t i = 0; i < lens[p]; i++) {
			h ^= parts[p][i];
			h *= 1099511628211ull;
		}
	}
	return h ? h : 1;
}

/* At most cap - 1 printable ASCII bytes of kid (others as '?'): the reason stays one clean line. */
static const char *
kid_text(const char *kid, char *buf, size_t cap)
{
	size_t i = 0;

	for (; kid && kid[i] && i + 1 < cap; i++)
		buf[i] = kid[i] >= 0x20 && kid[i] < 0x7f && kid[i] != '"' ? kid[i] : '?';
	buf[i] = '\0';
	return kid ? buf : "?";
}

st_err
st_auth_keys_parse(const char *text, size_t len, st_auth_keys **out, char *why, size_t cap)
{
	char kid_buf[65];
	st_json *j = NULL;
	st_auth_keys *ks = NULL;
	const char *reason = NULL;
	size_t n, bad = 0;
	int arr;

	*out = NULL;
	if (len > ST_AUTH_KEYS_MAX_BYTES) {
		reason = "larger than 1 MiB";
		goto fail;
	}
	if (st_json_parse(text, len, ST_AUTH_KEYS_NODES, &j) != ST_OK) {
		reason = "not a JSON document (or more than 4096 values)";
		goto fail;
	}
	arr = st_json_get(j, 0, "keys");
	if (arr == -1 || st_json_type(j, arr) != ST_JSON_ARRAY) {
		reason = "a JWKS document is an object with a \"keys\" array";
		goto fail;
	}
	n = st_json_count(j, arr);
	if (n == 0 || n > ST_AUTH_KEYS_MAX) {
		reason = "\"keys\" must hold 1..64 keys";
		goto fail;
	}
	ks = st_xcalloc(1, sizeof(*ks));
	atomic_init(&ks->refs, 1);
	ks->keys = st_xcalloc(n, sizeof(*ks->keys));
	for (size_t i = 0; i < n; i++) {
		bad = i;
		ks->n = i + 1; /* the key being built is freed with the set on error */
		if (key_parse(j, st_json_at(j, arr, i), &ks->keys[i], &reason) != ST_OK)
			goto fail_key;
		ks->keys[i].id = key_id(&ks->keys[i]);
		for (size_t k = 0; k < i; k++) {
			if (strcmp(ks->keys[k].kid, ks->keys[i].kid) == 0) {
				reason = "kid is not unique";
				goto fail_key;
			}
		}
	}
	st_json_free(j);
	*out = ks;
	return ST_OK;
fail_key:
	/* A kid is an identifier, not a secret: it names the key an operator must fix. */
	snprintf(why, cap, "key %zu (kid \"%s\"): %s", bad,
		 kid_text(st_json_str(j, st_json_get(j, st_json_at(j, arr, bad), "kid"), NULL), kid_buf,
			  sizeof(kid_buf)),
		 reason);
	st_json_free(j);
	keys_free(ks);
	return ST_EINVAL;
fail:
	snprintf(why, cap, "%s", reason);
	st_json_free(j);
	keys_free(ks);
	return ST_EINVAL;
}

st_err
st_auth_keys_load(const char *path, st_auth_keys **out, char *why, size_t cap)
{
	struct stat stbuf;
	char *buf = NULL;
	size_t got = 0;
	st_err rv = ST_EINVAL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	*out = NULL;
	if (fd == -1 || fstat(fd, &stbuf) == -1) {
		snprintf(why, cap, "cannot read: %s", strerror(errno));
		goto done;
	}
	if (!S_ISREG(stbuf.st_mode) || stbuf.st_size > ST_AUTH_KEYS_MAX_BYTES) {
		snprintf(why, cap, "not a regular file of at most 1 MiB");
		goto done;
	}
	/*
	 * Whoever can write the file can grant themselves any topic (a key of
	 * their own): checked on the open descriptor, so what is read is what
	 * was checked.  Refused at start (exit 2); a reload keeps the keys in use.
	 */
	if ((stbuf.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
		snprintf(why, cap, "writable by %s (mode %04o): whoever can write it grants any access; chmod go-w",
			 (stbuf.st_mode & S_IWOTH) ? "others" : "its group", (unsigned)(stbuf.st_mode & 07777));
		goto done;
	}
	buf = st_xmalloc((size_t)stbuf.st_size + 1);
	while (got < (size_t)stbuf.st_size) {
		ssize_t r = read(fd, buf + got, (size_t)stbuf.st_size - got);

		if (r == -1 && errno == EINTR)
			continue;
		if (r <= 0) {
			snprintf(why, cap, "cannot read: %s", r == 0 ? "file shrank while read" : strerror(errno));
			goto done;
		}
		got += (size_t)r;
	}
	rv = st_auth_keys_parse(buf, got, out, why, cap);
done:
	if (fd != -1)
		close(fd);
	free(buf);
	return rv;
}

st_auth_keys *
st_auth_keys_ref(st_auth_keys *ks)
{
	atomic_fetch_add_explicit(&ks->refs, 1, memory_order_relaxed);
	return ks;
}

void
st_auth_keys_unref(st_auth_keys *ks)
{
	if (ks != NULL && atomic_fetch_sub_explicit(&ks->refs, 1, memory_order_acq_rel) == 1)
		keys_free(ks);
}

size_t
st_auth_keys_count(const st_auth_keys *ks)
{
	return ks ? ks->n : 0;
}

bool
st_auth_keys_has(const st_auth_keys *ks, uint64_t key_id)
{
	for (size_t i = 0; i < ks->n; i++)
		if (ks->keys[i].id == key_id)
			return true;
	return false;
}

/* ---- claims ------------------------------------------------------------ */

void
st_auth_grant_free(st_auth_grant *g)
{
	if (g == NULL)
		return;
	for (size_t i = 0; i < g->n; i++)
		free(g->patterns[i]);
	free(g->patterns);
	free(g->lens);
	free(g);
}

uint64_t
st_auth_grant_exp_ms(const st_auth_grant *g)
{
	return g->exp_ms;
}

uint64_t
st_auth_grant_key(const st_auth_grant *g)
{
	return g->key_id;
}

bool
st_auth_grant_covers(const st_auth_grant *g, const char *topic, size_t len)
{
	if (g->all)
		return true;
	for (size_t i = 0; i < g->n; i++) {
		const char *p = g->patterns[i];
		size_t pl = g->lens[i];

		if (pl >= 2 && p[pl - 1] == '*' && p[pl - 2] == '/') {
			/* A prefix pattern: the prefix "a/b/" and at least one byte more. */
			if (len > pl - 1 && memcmp(topic, p, pl - 1) == 0)
				return true;
		} else if (pl == len && memcmp(topic, p, len) == 0) {
			return true;
		}
	}
	return false;
}

/* Seconds in 31 million years: bounds a NumericDate so that ms and the leeway never overflow. */
#define ST_AUTH_DATE_MAX 1000000000000000ull

/*
 * A NumericDate (RFC 7519 2): seconds since the epoch, a JSON number.
 * Fractions are truncated; negative numbers and exponents are refused, and
 * so is anything past ST_AUTH_DATE_MAX.
 */
static st_err
numeric_date(const st_json *j, int node, uint64_t *secs)
{
	const char *p;
	size_t len, i = 0;
	uint64_t v = 0;

	if (st_json_type(j, node) != ST_JSON_NUMBER)
		return ST_EINVAL;
	st_json_raw(j, node, &p, &len);
	if (len == 0 || p[0] < '0' || p[0] > '9')
		return ST_EINVAL;
	for (; i < len && p[i] >= '0' && p[i] <= '9'; i++) {
		v = v * 10 + (uint64_t)(p[i] - '0');
		if (v > ST_AUTH_DATE_MAX)
			return ST_ERANGE;
	}
	if (i < len && p[i] == '.')
		for (i++; i < len && p[i] >= '0' && p[i] <= '9'; i++)
			;
	if (i != len)
		return ST_EINVAL;
	*secs = v;
	return ST_OK;
}

static bool
aud_holds(const st_json *j, int node, const char *aud)
{
	const char *s;

	if ((s = st_json_str(j, node, NULL)) != NULL)
		return strcmp(s, aud) == 0;
	if (st_json_type(j, node) != ST_JSON_ARRAY)
		return false;
	for (size_t i = 0; i < st_json_count(j, node); i++)
		if ((s = st_json_str(j, st_json_at(j, node, i), NULL)) != NULL && strcmp(s, aud) == 0)
			return true;
	return false;
}

/*
 * True when an object at node or below repeats a member name.  st_json_get
 * answers with the first of two, another parser (libjwt's, the issuer's,
 * a proxy's) may take the last: {"topics":["*"],"topics":["a"]} must not
 * mean two things.  Quadratic per object, bounded by the node cap.
 */
static bool
repeats_member(const st_json *j, int node)
{
	enum st_json_type t = st_json_type(j, node);
	size_t n = st_json_count(j, node);

	if (t != ST_JSON_OBJECT && t != ST_JSON_ARRAY)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (t == ST_JSON_OBJECT)
			for (size_t k = 0; k < i; k++)
				if (strcmp(st_json_key_at(j, node, i), st_json_key_at(j, node, k)) == 0)
					return true;
		if (repeats_member(j, st_json_at(j, node, i)))
			return true;
	}
	return false;
}

static enum st_auth_result
claims_read(const st_json *j, uint64_t now_ms, const st_auth_policy *pol, st_auth_grant **out, const char **why)
{
	const char *claim = pol->topics_claim && *pol->topics_claim ? pol->topics_claim : "topics";
	uint64_t exp, t, leeway_ms = (uint64_t)pol->leeway_s * 1000;
	st_auth_grant *g;
	int node;

	if (st_json_type(j, 0) != ST_JSON_OBJECT)
		return *why = "claims are not an object", ST_AUTH_INVALID;
	if (numeric_date(j, st_json_get(j, 0, "exp"), &exp) != ST_OK)
		return *why = "exp missing or not a NumericDate", ST_AUTH_INVALID;
	if (now_ms >= exp * 1000 + leeway_ms)
		return *why = "expired", ST_AUTH_EXPIRED;
	/* A token that lives for years cannot be taken back but by removing its key. */
	if (pol->max_lifetime_s && exp * 1000 > now_ms + (uint64_t)pol->max_lifetime_s * 1000 + leeway_ms)
		return *why = "exp further away than the maximum lifetime", ST_AUTH_INVALID;
	if ((node = st_json_get(j, 0, "nbf")) != -1) {
		if (numeric_date(j, node, &t) != ST_OK)
			return *why = "nbf not a NumericDate", ST_AUTH_INVALID;
		if (t * 1000 > now_ms + leeway_ms)
			return *why = "not yet valid (nbf)", ST_AUTH_INVALID;
	}
	if ((node = st_json_get(j, 0, "iat")) != -1) {
		if (numeric_date(j, node, &t) != ST_OK)
			return *why = "iat not a NumericDate", ST_AUTH_INVALID;
		if (t * 1000 > now_ms + leeway_ms)
			return *why = "issued in the future (iat)", ST_AUTH_INVALID;
	}
	if (pol->audience && *pol->audience && !aud_holds(j, st_json_get(j, 0, "aud"), pol->audience))
		return *why = "aud does not name this service", ST_AUTH_INVALID;
	if (pol->issuer && *pol->issuer) {
		const char *iss = st_json_str(j, st_json_get(j, 0, "iss"), NULL);

		if (iss == NULL || strcmp(iss, pol->issuer) != 0)
			return *why = "iss is not the configured issuer", ST_AUTH_INVALID;
	}
	node = st_json_get(j, 0, claim);
	if (node != -1 && (st_json_type(j, node) != ST_JSON_ARRAY || st_json_count(j, node) > ST_AUTH_PATTERNS_MAX))
		return *why = "topics claim is not an array of at most 256 strings", ST_AUTH_INVALID;
	g = st_xcalloc(1, sizeof(*g));
	g->exp_ms = exp * 1000;
	if (node != -1 && st_json_count(j, node) > 0) {
		size_t n = st_json_count(j, node);

		g->patterns = st_xcalloc(n, sizeof(*g->patterns));
		g->lens = st_xcalloc(n, sizeof(*g->lens));
		for (size_t i = 0; i < n; i++) {
			size_t len;
			const char *s = st_json_str(j, st_json_at(j, node, i), &len);

			if (s == NULL) {
				st_auth_grant_free(g);
				return *why = "topics claim holds a non-string", ST_AUTH_INVALID;
			}
			if (len == 1 && s[0] == '*')
				g->all = true;
			g->patterns[g->n] = st_xstrndup(s, len);
			g->lens[g->n++] = len;
		}
	}
	/* A token without the claim is valid and covers nothing: 403, not 401. */
	*out = g;
	return ST_AUTH_OK;
}

/* ---- verification ------------------------------------------------------ */

static const st_auth_key *
key_find(const st_auth_keys *ks, const char *kid)
{
	for (size_t i = 0; i < ks->n; i++)
		if (strcmp(ks->keys[i].kid, kid) == 0)
			return &ks->keys[i];
	return NULL;
}

enum st_auth_result
st_auth_verify(const st_auth_keys *ks, const char *token, size_t len, uint64_t now_ms, const st_auth_policy *pol,
	       st_auth_grant **out, const char **why)
{
	const char *dummy, *dot1, *dot2, *kid, *alg;
	unsigned char hdr[ST_AUTH_HEADER_B64_MAX];
	unsigned char *payload = NULL;
	size_t hlen, plen;
	st_json *hj = NULL, *pj = NULL;
	const st_auth_key *key;
	char *copy = NULL;
	jwt_t *jwt = NULL;
	enum st_auth_result r = ST_AUTH_INVALID;

	if (why == NULL)
		why = &dummy;
	*out = NULL;
	*why = "malformed token";
	if (len == 0 || len > ST_AUTH_TOKEN_MAX) {
		*why = len ? "token longer than 8 KiB" : "empty token";
		return ST_AUTH_INVALID;
	}
	/* Three segments of base64url: header.payload.signature. */
	if ((dot1 = memchr(token, '.', len)) == NULL ||
	    (dot2 = memchr(dot1 + 1, '.', len - (size_t)(dot1 + 1 - token))) == NULL ||
	    memchr(dot2 + 1, '.', len - (size_t)(dot2 + 1 - token)) != NULL)
		return ST_AUTH_INVALID;
	if ((size_t)(dot1 - token) > ST_AUTH_HEADER_B64_MAX ||
	    b64url_decode(token, (size_t)(dot1 - token), hdr, sizeof(hdr), &hlen) != ST_OK ||
	    st_json_parse((const char *)hdr, hlen, ST_AUTH_HEADER_NODES, &hj) != ST_OK ||
	    st_json_type(hj, 0) != ST_JSON_OBJECT) {
		*why = "malformed header";
		goto done;
	}
	/* A repeated member could be read one way here and another in libjwt's parser. */
	if (repeats_member(hj, 0)) {
		*why = "header repeats a member";
		goto done;
	}
	kid = st_json_str(hj, st_json_get(hj, 0, "kid"), NULL);
	alg = st_json_str(hj, st_json_get(hj, 0, "alg"), NULL);
	if (alg == NULL || kid == NULL) {
		*why = "header lacks alg or kid";
		goto done;
	}
	/* RFC 7515 4.1.11: a critical extension we do not understand must be refused. */
	if (st_json_get(hj, 0, "crit") != -1) {
		*why = "header has crit";
		goto done;
	}
	if ((key = key_find(ks, kid)) == NULL) {
		*why = "unknown kid";
		goto done;
	}
	/* The defence against alg confusion and "none": the key decides the alg. */
	if (strcmp(alg, alg_names[key->alg]) != 0) {
		*why = "alg differs from the key's alg";
		goto done;
	}
	plen = (size_t)(dot2 - dot1 - 1);
	payload = st_xmalloc(plen + 1);
	if (b64url_decode(dot1 + 1, plen, payload, plen + 1, &plen) != ST_OK ||
	    st_json_parse((const char *)payload, plen, ST_AUTH_PAYLOAD_NODES, &pj) != ST_OK) {
		*why = "malformed claims";
		goto done;
	}
	if (repeats_member(pj, 0)) {
		*why = "claims repeat a member";
		goto done;
	}
	/* libjwt decodes the signature leniently; one signature has one text, as the other segments. */
	if (b64url_decode(dot2 + 1, len - (size_t)(dot2 + 1 - token), NULL, 0, &hlen) != ST_OK) {
		*why = "signature not canonical base64url";
		goto done;
	}
	/* libjwt wants a NUL-terminated token; the length was bounded above. */
	copy = st_xstrndup(token, len);
	if (jwt_decode(&jwt, copy, key->material, (int)key->material_len) != 0 || jwt == NULL) {
		*why = "bad signature";
		goto done;
	}
	if (jwt_get_alg(jwt) != alg_jwt[key->alg]) {
		*why = "alg differs from the key's alg";
		goto done;
	}
	r = claims_read(pj, now_ms, pol, out, why);
	if (r == ST_AUTH_OK)
		(*out)->key_id = key->id;
done:
	jwt_free(jwt);
	free(copy);
	free(payload);
	st_json_free(hj);
	st_json_free(pj);
	return r;
}

/* ---- extraction -------------------------------------------------------- */

static bool
is_space(char c)
{
	return c == ' ' || c == '\t';
}

enum st_auth_source
st_auth_token_extract(const char *authorization, const char *cookie, const char *cookie_name, const char *query_token,
		      bool allow_query, const char **tok, size_t *len)
{
	*tok = NULL;
	*len = 0;
	if (authorization != NULL) {
		const char *p = authorization;

		while (is_space(*p))
			p++;
		/* RFC 6750 2.1: "Bearer" 1*SP b64token; the scheme is case-insensitive (RFC 9110 11.1). */
		if (strncasecmp(p, "Bearer", 6) == 0 && (p[6] == '\0' || is_space(p[6]))) {
			size_t n;

			p += 6;
			while (is_space(*p))
				p++;
			n = strlen(p);
			while (n > 0 && is_space(p[n - 1]))
				n--;
			*tok = p;
			*len = n;
			return ST_AUTH_SRC_HEADER;
		}
	}
	if (cookie != NULL) {
		const char *name = cookie_name && *cookie_name ? cookie_name : "studio_token";
		size_t nl = strlen(name);
		const char *p = cookie;

		/* RFC 6265 4.2.1: cookie-pair *( ";" SP cookie-pair ); tolerant of missing spaces. */
		while (*p) {
			const char *start, *eq, *end;

			while (*p == ';' || is_space(*p))
				p++;
			start = p;
			while (*p && *p != ';')
				p++;
			end = p;
			eq = memchr(start, '=', (size_t)(end - start));
			if (eq == NULL)
				continue;
			{
				const char *ne = eq;

				while (ne > start && is_space(ne[-1]))
					ne--;
				if ((size_t)(ne - start) != nl || memcmp(start, name, nl) != 0)
					continue;
			}
			start = eq + 1;
			while (start < end && is_space(*start))
				start++;
			while (end > start && is_space(end[-1]))
				end--;
			if (end - start >= 2 && *start == '"' && end[-1] == '"') {
				start++;
				end--;
			}
			*tok = start;
			*len = (size_t)(end - start);
			return ST_AUTH_SRC_COOKIE;
		}
	}
	if (allow_query && query_token != NULL) {
		*tok = query_token;
		*len = strlen(query_token);
		return ST_AUTH_SRC_QUERY;
	}
	return ST_AUTH_SRC_NONE;
}
