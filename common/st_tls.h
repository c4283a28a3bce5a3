/*
 * st_tls: mutual TLS on the nng links (tls+tcp:// URLs) of the three
 * programs.  A process has one identity: --tls-cert and --tls-key (PEM: its
 * certificate and private key) and --tls-ca (PEM: the CA that signs the
 * servers it dials, and by default its peers).  st_tls_load reads them
 * once, before any socket exists; then
 *
 *  - a tls+tcp listener requires a client certificate signed by its role's
 *    CA (a producer, edge or studioctl without one completes no handshake,
 *    so nothing it sends is read);
 *  - a tls+tcp dialer verifies the server's certificate against the CA and
 *    its name against the URL's host name (or the name given, when the
 *    URL holds an address resolved from that name), and presents the
 *    process's certificate when it has one.
 *
 * Roles: a listener serves one trust level (ingest, publish, control), each
 * with its own CA (--ingest-tls-ca, --publish-tls-ca, --control-tls-ca;
 * each defaults to --tls-ca), so a producer's certificate (signed by the
 * ingest CA only) completes no handshake on publish or control.  --tls-crl
 * (PEM, one or more CRLs) revokes certificates on every listener and dialer.
 * The engine is the programs' own (st_tls_engine, registered by
 * st_tls_load): TLS 1.2 only, ECDHE with AES-GCM or ChaCha20-Poly1305
 * only (docs/security.md "nng links").  Each tls+tcp listener is handed
 * to st_tlsstat, which counts its failed handshakes (the engine reports
 * the refused ones with their reason, nng's listener statistics the
 * timeouts).
 *
 * A listener needs the certificate, the key and its role's CA; a dialer
 * needs --tls-ca and, for a listener that requires one (ours always do),
 * the certificate and key.
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

/* Largest PEM file read (a certificate chain, a key or a CRL list). */
#define ST_TLS_MAX_FILE (256u * 1024)

/* The trust level a listener serves. */
typedef enum st_tls_role { ST_TLS_INGEST, ST_TLS_PUBLISH, ST_TLS_CONTROL, ST_TLS_ROLE_N } st_tls_role;

/* Paths (NULL or "": not given). */
typedef struct st_tls_files {
	const char *cert, *key, *ca, *crl;
	const char *role_ca[ST_TLS_ROLE_N]; /* the CA that signs this role's peers; not given: ca */
} st_tls_files;

/* The role of a listen option named flag ("ingest", "publish", "control": also the metric label); false for another name. */
bool st_tls_role_of(const char *flag, st_tls_role *r);
/* The role's name, as above (a static string). */
const char *st_tls_role_name(st_tls_role r);

/*
 * Registers st_tls_engine with nng (always, TLS given or not), then
 * loads the identity.  cert and key both or neither; ca required when
 * either is given; a role CA or the CRL needs cert and key; all NULL or
 * empty: TLS is off (a tls+tcp URL is then a configuration error, see
 * st_tls_url_usable).  On error why names the flag, the file and the
 * reason.  Call once, from the main thread, before any socket.
 */
st_err st_tls_load(const st_tls_files *f, char *why, size_t cap);
/* Frees what st_tls_load made (at exit, after every socket is closed). */
void st_tls_unload(void);

/* The URL's scheme is tls+tcp, tls+tcp4 or tls+tcp6. */
bool st_tls_url(const char *url);
/*
 * For configuration checks: NULL when url can be used with what was
 * loaded (a plain URL always can), else a static reason.  listen: the URL
 * is listened on for role (needs the certificate, key and role's CA), else dialed.
 */
const char *st_tls_url_usable(const char *url, bool listen, st_tls_role role);

/*
 * nng_listen / nng_dial with the TLS configuration (of role, listening)
 * attached when url is tls+tcp; a tls+tcp listener is given to
 * st_tlsstat_track under the role's name.  nng error code.
 */
int st_tls_listen(nng_socket s, const char *url, st_tls_role role);
int st_tls_dial(nng_socket s, const char *url, int flags);
/*
 * nng_dialer_create with the client configuration attached; server_name
 * (NULL: the URL's host) is the name checked in the server's certificate,
 * for a URL that holds an address resolved from that name.  Not started.
 */
int st_tls_dialer_create(nng_dialer *d, nng_socket s, const char *url, const char *server_name);

#endif
