#include "st_keywatch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <event2/event.h>

#include "st_clock.h"
#include "st_log.h"
#include "st_util.h"

/* What says "another file": a Secret update is a new inode behind the symlink. */
typedef struct file_id {
	bool known; /* false: stat failed (missing for a moment during a swap) */
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime, ctime;
} file_id;

struct st_keywatch {
	st_auth_store *store; /* borrowed */
	const char *path;     /* borrowed (the option's value) */
	const char *flag;     /* borrowed (a literal) */
	uint64_t period_ms;
	struct event *timer; /* owned; NULL when period_ms is 0 */
	file_id seen;
	bool stat_failing; /* a stat failure was logged; the next success says so */
	uint64_t changes;
};

static file_id
file_id_read(const char *path, int *err)
{
	file_id id;
	struct stat st;

	memset(&id, 0, sizeof(id));
	if (stat(path, &st) != 0) {
		*err = errno;
		return id;
	}
	*err = 0;
	id.known = true;
	id.dev = st.st_dev;
	id.ino = st.st_ino;
	id.size = st.st_size;
	id.mtime = st.st_mtim;
	id.ctime = st.st_ctim;
	return id;
}

static bool
file_id_same(const file_id *a, const file_id *b)
{
	return a->known == b->known && a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	       a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec &&
	       a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec;
}

st_err
st_keywatch_reload(st_keywatch *kw, char *why, size_t cap)
{
	st_auth_keys *ks = NULL;

	if (st_auth_keys_load(kw->path, &ks, why, cap) != ST_OK) {
		st_warn("%s %s: reload failed, keeping the %zu keys in use: %s", kw->flag, kw->path,
			st_auth_store_key_count(kw->store), why);
		return ST_EINVAL;
	}
	st_info("%s %s: reloaded, %zu keys", kw->flag, kw->path, st_auth_keys_count(ks));
	st_auth_store_swap(kw->store, ks);
	return ST_OK;
}

bool
st_keywatch_poll(st_keywatch *kw)
{
	int err;
	file_id now = file_id_read(kw->path, &err);
	char why[256];

	if (!now.known) {
		/* a swap in progress, or the file is gone: keep the keys in use, say so once */
		if (!kw->stat_failing)
			st_warn("%s %s: cannot look at the file (%s); keeping the %zu keys in use", kw->flag, kw->path,
				strerror(err), st_auth_store_key_count(kw->store));
		kw->stat_failing = true;
		return false;
	}
	kw->stat_failing = false;
	if (file_id_same(&now, &kw->seen))
		return false;
	kw->seen = now;
	kw->changes++;
	st_info("%s %s: the file changed, reloading", kw->flag, kw->path);
	(void)st_keywatch_reload(kw, why, sizeof(why));
	return true;
}

uint64_t
st_keywatch_changes(const st_keywatch *kw)
{
	return kw->changes;
}

static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
	st_keywatch *kw = arg;
	struct timeval tv = st_timeval_ms(kw->period_ms);

	(void)fd;
	(void)what;
	(void)st_keywatch_poll(kw);
	evtimer_add(kw->timer, &tv);
}

st_keywatch *
st_keywatch_new(struct event_base *base, st_auth_store *store, const char *path, const char *flag, uint64_t period_ms)
{
	st_keywatch *kw = st_xcalloc(1, sizeof(*kw));
	int err;

	kw->store = store;
	kw->path = path;
	kw->flag = flag;
	kw->period_ms = period_ms;
	kw->seen = file_id_read(path, &err);
	if (period_ms > 0) {
		struct timeval tv = st_timeval_ms(period_ms);

		if ((kw->timer = evtimer_new(base, on_timer, kw)) == NULL) {
			st_keywatch_free(kw);
			return NULL;
		}
		evtimer_add(kw->timer, &tv);
	}
	return kw;
}

void
st_keywatch_free(st_keywatch *kw)
{
	if (kw == NULL)
		return;
	if (kw->timer != NULL)
		event_free(kw->timer);
	free(kw);
}
