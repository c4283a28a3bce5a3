/*
 * st_control: the JSON ops socket (nng rep0) served on the event loop.
 *
 * DESIGN
 * The rep0 socket is used without contexts.  libevent watches its
 * NNG_OPT_RECVFD (level-triggered, readable while a whole request is
 * queued; never read from it), and the callback takes requests with
 * nng_recvmsg(NNG_FLAG_NONBLOCK) until NNG_EAGAIN, at most
 * MAX_PER_CALLBACK per wakeup so a flood of ops requests cannot starve the
 * streams sharing the loop (the descriptor stays readable, so the rest are
 * served on the next turn).  No nng thread ever touches the loop.
 *
 * A context-less rep0 socket remembers only the LAST request's return
 * path, so each request is answered synchronously, before the next
 * nng_recvmsg.  The reply goes out with NNG_FLAG_NONBLOCK because the loop
 * must not block; if nng cannot take it at once (the requester's pipe is
 * still busy sending an earlier reply, or is gone) the reply is dropped with
 * a log line and the requester's own timeout (req0 resend or
 * NNG_OPT_RECVTIMEO) covers it.  Ops requests are idempotent reads or
 * "drain", which may safely be repeated.
 *
 * Requests are bounded twice: NNG_OPT_RECVMAXSZ (64 KiB) before nng
 * allocates, then at most MAX_NODES JSON values in the DOM.
 *
 * The socket drains the process and reloads its keys, so on ipc:// its
 * file is the owner's alone (0600): nng creates it with that mode
 * (NNG_OPT_IPC_PERMISSIONS, so there is no moment with the umask's mode),
 * and after the listen the path is chmod'ed and checked with stat, which
 * fails the start rather than leave a socket other users could connect to.
 * Which tcp:// addresses may listen at all is st_preflight's rule.
 */
#include "st_control.h"
#include "st_log.h"
#include "st_tls.h"
#include "st_util.h"

#include <event2/event.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_REQUEST (64 * 1024)
#define MAX_NODES 1000
#define MAX_PER_CALLBACK 64
#define MAX_REPLY (16u * 1024 * 1024) /* client side: replies are ours, but still bounded */

struct st_control {
	nng_socket sock;
	bool open;
	struct event *ev;
	st_control_fn fn;
	void *arg;
	st_buf out, reply;
};

static void
reply_error(st_buf *r, const char *code, const char *detail, size_t len)
{
	st_buf_puts(r, "{\"ok\":false,\"error\":\"");
	st_buf_puts(r, code);
	st_buf_puts(r, "\",\"detail\":");
	st_json_escape(r, detail, len);
	st_buf_putc(r, '}');
}

/* Builds c->reply for one request body. */
static void
handle(st_control *c, const char *body, size_t len)
{
	st_json *j = NULL;
	const char *cmd;
	int node;
	size_t cmd_len = 0;
	st_err rv;

	st_buf_reset(&c->reply);
	st_buf_reset(&c->out);
	if (st_json_parse(body, len, MAX_NODES, &j) != ST_OK) {
		reply_error(&c->reply, "invalid", "malformed JSON", 14);
		goto done;
	}
	if (st_json_type(j, 0) != ST_JSON_OBJECT) {
		static const char d[] = "the request must be a JSON object";

		reply_error(&c->reply, "invalid", d, sizeof(d) - 1);
		goto done;
	}
	if ((node = st_json_get(j, 0, "cmd")) < 0 || (cmd = st_json_str(j, node, &cmd_len)) == NULL) {
		static const char d[] = "the request needs a string member \"cmd\"";

		reply_error(&c->reply, "invalid", d, sizeof(d) - 1);
		goto done;
	}
	rv = c->fn(cmd, j, &c->out, c->arg);
	if (rv == ST_OK) {
		st_buf_puts(&c->reply, "{\"ok\":true");
		if (c->out.len) {
			st_buf_putc(&c->reply, ',');
			st_buf_append(&c->reply, c->out.p, c->out.len);
		}
		st_buf_putc(&c->reply, '}');
	} else if (rv == ST_ENOTFOUND) {
		st_buf_reset(&c->out);
		st_buf_puts(&c->out, "unknown command: ");
		st_buf_append(&c->out, cmd, cmd_len);
		reply_error(&c->reply, "unknown_command", c->out.p, c->out.len);
	} else {
		/* The header documents only invalid|unknown_command; any other
		 * handler failure is reported as invalid with its reason. */
		const char *d = c->out.len ? c->out.p : st_err_str(rv);

		reply_error(&c->reply, "invalid", d, strlen(d));
	}
done:
	st_json_free(j);
}

#define IPC_PREFIX "ipc://"
#define IPC_MODE 0600

/*
 * Listens on url; an ipc:// socket file gets mode IPC_MODE before it
 * accepts (see DESIGN) and is checked after.  nng error codes, like
 * st_tls_listen; NNG_EPERM when the file's mode cannot be made IPC_MODE.
 */
static int
control_listen(nng_socket sock, const char *url)
{
	const char *path = url + strlen(IPC_PREFIX);
	nng_listener l;
	struct stat st;
	int rv;

	if (strncmp(url, IPC_PREFIX, strlen(IPC_PREFIX)) != 0)
		return st_tls_listen(sock, url, ST_TLS_CONTROL);
	if ((rv = nng_listener_create(&l, sock, url)) != 0)
		return rv;
	if ((rv = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, IPC_MODE)) != 0 ||
	    (rv = nng_listener_start(l, 0)) != 0) {
		nng_listener_close(l);
		return rv;
	}
	if (chmod(path, IPC_MODE) == -1 || stat(path, &st) == -1 || (st.st_mode & 07777) != IPC_MODE) {
		st_error("control: %s: cannot make the socket file mode 0600", path);
		nng_listener_close(l);
		return NNG_EPERM;
	}
	return 0;
}

static void
on_readable(evutil_socket_t fd, short what, void *arg)
{
	st_control *c = arg;

	(void)fd;
	(void)what;
	for (int i = 0; i < MAX_PER_CALLBACK; i++) {
		nng_msg *msg = NULL;
		int rv = nng_recvmsg(c->sock, &msg, NNG_FLAG_NONBLOCK);

		if (rv == NNG_EAGAIN || rv == NNG_ECLOSED)
			return;
		if (rv != 0) {
			st_warn("control: receive: %s", nng_strerror(rv));
			return;
		}
		handle(c, nng_msg_body(msg), nng_msg_len(msg));
		/* Reuse the request message: in cooked mode the socket keeps the
		 * return path; only the body changes. */
		nng_msg_clear(msg);
		if ((rv = nng_msg_append(msg, c->reply.p, c->reply.len)) != 0 ||
		    (rv = nng_sendmsg(c->sock, msg, NNG_FLAG_NONBLOCK)) != 0) {
			st_warn("control: reply dropped: %s", nng_strerror(rv));
			nng_msg_free(msg); /* still ours on failure */
		}
	}
}

st_err
st_control_new(struct event_base *base, const char *url, st_control_fn fn, void *arg, st_control **out)
{
	st_control *c = st_xcalloc(1, sizeof(*c));
	int rv, fd = -1;
	st_err err = ST_ESYS;

	ST_ASSERT(fn != NULL);
	c->fn = fn;
	c->arg = arg;
	st_buf_init(&c->out);
	st_buf_init(&c->reply);
	if ((rv = nng_rep0_open(&c->sock)) != 0) {
		st_error("control: rep0 open: %s", nng_strerror(rv));
		goto fail;
	}
	c->open = true;
	if ((rv = nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, MAX_REQUEST)) != 0) {
		st_error("control: set recv max: %s", nng_strerror(rv));
		goto fail;
	}
	if ((rv = control_listen(c->sock, url)) != 0) {
		st_error("control: listen %s: %s", url, nng_strerror(rv));
		if (rv == NNG_EADDRINVAL || rv == NNG_ENOTSUP || rv == NNG_EINVAL)
			err = ST_EINVAL;
		goto fail;
	}
	if ((rv = nng_socket_get_int(c->sock, NNG_OPT_RECVFD, &fd)) != 0) {
		st_error("control: recv fd: %s", nng_strerror(rv));
		goto fail;
	}
	if ((c->ev = event_new(base, fd, EV_READ | EV_PERSIST, on_readable, c)) == NULL ||
	    event_add(c->ev, NULL) != 0) {
		st_error("control: cannot watch the socket");
		goto fail;
	}
	*out = c;
	return ST_OK;
fail:
	st_control_free(c);
	return err;
}

void
st_control_free(st_control *c)
{
	if (c == NULL)
		return;
	if (c->ev)
		event_free(c->ev); /* before the close: the fd belongs to the socket */
	if (c->open)
		nng_close(c->sock);
	st_buf_fini(&c->out);
	st_buf_fini(&c->reply);
	free(c);
}

static st_err
map_nng(int rv)
{
	switch (rv) {
	case NNG_ETIMEDOUT: return ST_ETIMEDOUT;
	case NNG_EADDRINVAL:
	case NNG_ENOTSUP:
	case NNG_EINVAL: return ST_EINVAL;
	case NNG_EMSGSIZE: return ST_EPROTO;
	case NNG_ECONNREFUSED:
	case NNG_ECONNSHUT:
	case NNG_ECONNRESET:
	case NNG_ENOENT:
	case NNG_EUNREACHABLE: return ST_EUNAVAIL;
	default: return ST_ESYS;
	}
}

st_err
st_control_call(const char *url, const char *request_json, int timeout_ms, char **reply)
{
	nng_socket s;
	nng_msg *msg = NULL;
	int rv;
	st_err err = ST_OK;
	size_t n;
	char *p;

	*reply = NULL;
	if ((rv = nng_req0_open(&s)) != 0)
		return map_nng(rv);
	/* A non-blocking dial keeps retrying, so a peer that is restarting is
	 * reached within the timeout; an absent one ends in ST_ETIMEDOUT. */
	if ((rv = nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, timeout_ms)) != 0 ||
	    (rv = nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, timeout_ms)) != 0 ||
	    (rv = nng_socket_set_ms(s, NNG_OPT_RECONNMINT, 100)) != 0 ||
	    (rv = nng_socket_set_ms(s, NNG_OPT_RECONNMAXT, 1000)) != 0 ||
	    (rv = nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, MAX_REPLY)) != 0 ||
	    (rv = st_tls_dial(s, url, NNG_FLAG_NONBLOCK)) != 0 ||
	    (rv = nng_send(s, (void *)request_json, strlen(request_json), 0)) != 0 ||
	    (rv = nng_recvmsg(s, &msg, 0)) != 0) {
		err = map_nng(rv);
		goto done;
	}
	n = nng_msg_len(msg);
	p = st_xmalloc(n + 1); /* n <= MAX_REPLY, enforced by nng */
	memcpy(p, nng_msg_body(msg), n);
	p[n] = '\0';
	*reply = p;
done:
	if (msg != NULL)
		nng_msg_free(msg);
	nng_close(s);
	return err;
}
