/* st_pem: PEM checks with OpenSSL (already the edge's token library and the producer's). */
#include "st_pem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "st_util.h"

st_err
st_pem_read(const char *path, size_t max, char **out, const char **why)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	size_t n;

	if (f == NULL) {
		*why = strerror(errno);
		return ST_ESYS;
	}
	if ((buf = st_try_malloc(max + 1)) == NULL) {
		fclose(f);
		*why = "out of memory";
		return ST_ENOMEM;
	}
	n = fread(buf, 1, max + 1, f);
	fclose(f);
	buf[n <= max ? n : max] = '\0'; /* before any string function looks at it */
	if (n > max || n == 0 || strstr(buf, "-----BEGIN ") == NULL) {
		*why = n > max ? "larger than 64 KiB" : "not a PEM file";
		free(buf);
		return ST_EINVAL;
	}
	*out = buf;
	return ST_OK;
}

bool
st_pem_pair_matches(const char *cert_pem, const char *key_pem)
{
	BIO *cb = BIO_new_mem_buf(cert_pem, -1), *kb = BIO_new_mem_buf(key_pem, -1);
	X509 *x = cb ? PEM_read_bio_X509(cb, NULL, NULL, NULL) : NULL;
	EVP_PKEY *k = kb ? PEM_read_bio_PrivateKey(kb, NULL, NULL, NULL) : NULL;
	bool ok = x != NULL && k != NULL && X509_check_private_key(x, k) == 1;

	EVP_PKEY_free(k);
	X509_free(x);
	BIO_free(kb);
	BIO_free(cb);
	return ok;
}
