/* st_pem: PEM checks with OpenSSL (already the edge's token library and the producer's). */
#include "st_pem.h"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

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
