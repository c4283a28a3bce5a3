/*
 * prepipe: each sweep lists /proc/self/fd, keeps the sockets connected on
 * the local port, and carries over the first-seen time of those it saw
 * before (the previous list sorted by inode, searched in halves).  A
 * socket that is gone is forgotten with the list it was in.  A socket once
 * seen as a pipe stays one: when the ingest closes it (idle, displaced) it
 * leaves the pipe table before nng has closed the descriptor.
 */
#include "prepipe.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "st_log.h"
#include "st_util.h"

typedef struct seen {
	ino_t ino;
	uint64_t first;
	bool pipe; /* was a pipe at some sweep: nng closes it, never this module */
} seen;

struct prepipe {
	uint16_t port;
	uint64_t deadline_ms;
	seen *cur, *next; /* owned, PREPIPE_TRACK each: the last sweep's list, the one being built */
	size_t n_cur;
};

prepipe *
prepipe_new(uint16_t local_port, uint64_t deadline_ms)
{
	prepipe *p = st_xcalloc(1, sizeof(*p));

	p->port = local_port;
	p->deadline_ms = deadline_ms;
	p->cur = st_xcalloc(PREPIPE_TRACK, sizeof(*p->cur));
	p->next = st_xcalloc(PREPIPE_TRACK, sizeof(*p->next));
	return p;
}

void
prepipe_free(prepipe *p)
{
	if (p == NULL)
		return;
	free(p->cur);
	free(p->next);
	free(p);
}

static int
by_ino(const void *a, const void *b)
{
	ino_t x = ((const seen *)a)->ino, y = ((const seen *)b)->ino;

	return x < y ? -1 : x > y;
}

/* The peer of fd when it is a TCP socket connected on port; false otherwise. */
static bool
peer_on_port(int fd, uint16_t port, prepipe_peer *peer)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	uint16_t local;

	if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
		return false;
	if (ss.ss_family == AF_INET)
		local = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	else if (ss.ss_family == AF_INET6)
		local = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	else
		return false;
	if (local != port)
		return false;
	len = sizeof(ss);
	if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0)
		return false; /* the listening socket itself, or not connected */
	memset(peer, 0, sizeof(*peer));
	if (ss.ss_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)&ss;
		peer->addr[10] = peer->addr[11] = 0xff;
		memcpy(peer->addr + 12, &s4->sin_addr, 4);
		peer->port = ntohs(s4->sin_port);
	} else {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&ss;
		memcpy(peer->addr, &s6->sin6_addr, 16);
		peer->port = ntohs(s6->sin6_port);
	}
	return true;
}

/*
 * When data last arrived on fd, on the clock of now: now itself while
 * bytes wait unread (FIONREAD), else now less TCP_INFO's age of the last
 * data (jiffies: a few ms coarse); 0 when unknown.
 */
static uint64_t
data_at(int fd, uint64_t now)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	int unread = 0;

	if (ioctl(fd, FIONREAD, &unread) == 0 && unread > 0)
		return now;
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 || ti.tcpi_last_data_recv > now)
		return 0;
	return now - ti.tcpi_last_data_recv;
}

/* Shuts down the socket ino that fd named a moment ago, if fd still names it. */
static bool
shut(int fd, ino_t ino)
{
	struct stat st;
	int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	bool done = false;

	if (d < 0)
		return false;
	/* the dup holds the socket: once it is the one we mean, no reuse of fd can swap it */
	if (fstat(d, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == ino)
		done = shutdown(d, SHUT_RDWR) == 0;
	close(d);
	return done;
}

size_t
prepipe_sweep(prepipe *p, uint64_t now, prepipe_is_pipe_fn is_pipe, void *arg)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *de;
	size_t n = 0, shut_n = 0;
	int self;

	if (dir == NULL)
		return 0;
	self = dirfd(dir);
	while ((de = readdir(dir)) != NULL && n < PREPIPE_TRACK) {
		char *end;
		long fd = strtol(de->d_name, &end, 10);
		struct stat st;
		prepipe_peer peer;
		seen key, *old;

		if (*end != '\0' || end == de->d_name || fd < 0 || fd == self)
			continue;
		if (fstat((int)fd, &st) != 0 || !S_ISSOCK(st.st_mode) || !peer_on_port((int)fd, p->port, &peer))
			continue;
		key.ino = st.st_ino;
		old = bsearch(&key, p->cur, p->n_cur, sizeof(*p->cur), by_ino);
		key.first = old != NULL ? old->first : now;
		key.pipe = is_pipe(&peer, data_at((int)fd, now), arg) || (old != NULL && old->pipe);
		if (now >= key.first + p->deadline_ms && !key.pipe) {
			if (shut((int)fd, key.ino))
				shut_n++;
			continue;
		}
		p->next[n++] = key;
	}
	closedir(dir);
	qsort(p->next, n, sizeof(*p->next), by_ino);
	{
		seen *t = p->cur;
		p->cur = p->next;
		p->next = t;
		p->n_cur = n;
	}
	return shut_n;
}
