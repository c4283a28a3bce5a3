/*
 * st_tls: mutual TLS on the nng links (tls+tcp:// URLs) of the three
 * programs.  A process has one identity: --tls-cert and --tls-key (PEM: its
 * certificate and private key) and --tls-ca (PEM: the CA that signs every
 * peer).  st_tls_load reads them once, before any socket exists; then
 *
 *  - a tls+tcp listener requires a client certificate signed by the CA
 *    (a producer, edge or studioctl without one completes no handshake,
 *    so nothing it sends is read);
 *  - a tls+tcp dialer verifies the server's certificate against the CA and
 *    its name against the URL's host name (or the name given, when the
 *    URL holds an address resolved from that name), and presents the
 *    process's certificate when it has one.
 *
 * A listener needs all three files; a dialer needs --tls-ca and, for a
 * listener that requires one (ours always do), the certificate and key.
 * Other URLs are listened on and dialed exactly as nng_listen/nng_dial do.
 * The configuration is process-wide and read-only after st_tls_load, so
 * any thread may listen or dial.  Rotating certificates needs a restart.
 */
#ifndef ST_TLS_H
#define ST_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include <nng/nng.h>

#include "st_err.h"

/* Largest PEM file read (a certificate chain or a key). */
#define ST_TLS_MAX_FILE (64u * 1024)

/*
 * Loads the identity.  cert and key both or neither; ca required when
 * either is given; all NULL or empty: TLS is off (a tls+tcp URL is then a
 * configuration error, see st_tls_url_usable).  On error why names the file
 * and the reason.  Call once, from the main thread, before any socket.
 */
st_err st_tls_load(const char *cert, const char *key, const char *ca, char *why, size_t cap);
/* Frees what st_tls_load made (at exit, after every socket is closed). */
void st_tls_unload(void);

/* The URL's scheme is tls+tcp, tls+tcp4 or tls+tcp6. */
bool st_tls_url(const char *url);
/*
 * For configuration checks: NULL when url can be used with what was
 * loaded (a plain URL always can), else a static reason.  listen: the URL
 * is listened on (needs the certificate and key), else dialed.
 */
const char *st_tls_url_usable(const char *url, bool listen);

/* nng_listen / nng_dial with the TLS configuration attached when url is tls+tcp. nng error code. */
int st_tls_listen(nng_socket s, const char *url);
int st_tls_dial(nng_socket s, const char *url, int flags);
/*
 * nng_dialer_create with the client configuration attached; server_name
 * (NULL: the URL's host) is the name checked in the server's certificate,
 * for a URL that holds an address resolved from that name.  Not started.
 */
int st_tls_dialer_create(nng_dialer *d, nng_socket s, const char *url, const char *server_name);

#endif
