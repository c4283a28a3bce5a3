/*
 * st_keywatch: a JWKS file behind an st_auth_store, reloaded on demand
 * (SIGHUP, the control command `reload`) and when the file changes.
 *
 * Why a watcher: keys come from a Kubernetes Secret mounted as a volume.
 * When the Secret is rotated, the kubelet writes the new files into a new
 * directory and swaps the volume's `..data` symlink to it (atomically), up to
 * its sync period later; nobody tells the process.  Without a reload the old
 * keys stay trusted and tokens signed by the new one are refused until every
 * pod is restarted by hand.  So the file is looked at every period_ms: stat()
 * follows the symlink, and a new inode, size, mtime or ctime means "load it".
 * A file that does not parse (caught half-written) changes nothing: the keys
 * in use stay, a warning is logged, and the next change is tried again.
 *
 * Loop thread only.  The load reads at most ST_AUTH_KEYS_MAX_BYTES of a
 * local file (docs/security.md says to keep key files local).
 */
#ifndef ST_KEYWATCH_H
#define ST_KEYWATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "st_auth_store.h"
#include "st_err.h"

struct event_base;

typedef struct st_keywatch st_keywatch;

/*
 * Watches path for store (borrowed: both must outlive the watcher).  flag:
 * the option's name for log lines ("--auth-keys").  period_ms 0: no
 * polling (reloads only on demand).  The file's identity now is the one
 * already loaded (the caller loaded it at start).  NULL when the timer
 * cannot be made.
 */
st_keywatch *st_keywatch_new(struct event_base *base, st_auth_store *store, const char *path, const char *flag,
			     uint64_t period_ms);
void st_keywatch_free(st_keywatch *kw); /* NULL-safe */

/* Loads the file now and swaps the keys in; ST_EINVAL (why says it) keeps the keys in use. */
st_err st_keywatch_reload(st_keywatch *kw, char *why, size_t cap);

/*
 * One look at the file: reloads when its identity changed since the last
 * look (the timer calls this; tests call it directly instead of waiting).
 * True when the identity changed (whether the load succeeded or not).
 */
bool st_keywatch_poll(st_keywatch *kw);

/* Reloads done because the file changed (tests, the log). */
uint64_t st_keywatch_changes(const st_keywatch *kw);

#endif
