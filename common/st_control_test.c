/* Unit tests for st_control: a real rep0 server on a loop thread, a real client. */
#include "st_control.h"
#include "st_test.h"
#include "st_util.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <nng/nng.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int handled;

static st_err
handler(const char *cmd, const st_json *req, st_buf *out, void *arg)
{
	(void)arg;
	handled++;
	if (strcmp(cmd, "stats") == 0) {
		st_buf_puts(out, "\"streams\":3,\"draining\":false");
		return ST_OK;
	}
	if (strcmp(cmd, "drain") == 0)
		return ST_OK; /* no members */
	if (strcmp(cmd, "echo") == 0) {
		int n = st_json_get(req, 0, "arg");
		const char *s = n >= 0 ? st_json_str(req, n, NULL) : NULL;

		if (s == NULL) {
			st_buf_puts(out, "echo needs a string \"arg\"");
			return ST_EINVAL;
		}
		st_buf_puts(out, "\"arg\":");
		st_json_escape(out, s, strlen(s));
		return ST_OK;
	}
	if (strcmp(cmd, "broken") == 0)
		return ST_EUNAVAIL;
	return ST_ENOTFOUND;
}

static void *
loop_main(void *base)
{
	event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY);
	return NULL;
}

static char url[128], tcp_url[64];

static void
t_requests(void)
{
	static const struct {
		const char *req, *want;
	} cases[] = {
		{ "{\"cmd\":\"stats\"}", "{\"ok\":true,\"streams\":3,\"draining\":false}" },
		{ " { \"cmd\" : \"drain\" } ", "{\"ok\":true}" },
		{ "{\"cmd\":\"nope\"}",
		  "{\"ok\":false,\"error\":\"unknown_command\",\"detail\":\"unknown command: nope\"}" },
		{ "{\"cmd\":\"n\\\"q\"}",
		  "{\"ok\":false,\"error\":\"unknown_command\",\"detail\":\"unknown command: n\\\"q\"}" },
		{ "{\"cmd\":", "{\"ok\":false,\"error\":\"invalid\",\"detail\":\"malformed JSON\"}" },
		{ "", "{\"ok\":false,\"error\":\"invalid\",\"detail\":\"malformed JSON\"}" },
		{ "[\"stats\"]",
		  "{\"ok\":false,\"error\":\"invalid\",\"detail\":\"the request must be a JSON object\"}" },
		{ "\"stats\"",
		  "{\"ok\":false,\"error\":\"invalid\",\"detail\":\"the request must be a JSON object\"}" },
		{ "{\"command\":\"stats\"}",
		  "{\"ok\":false,\"error\":\"invalid\",\"detail\":\"the request needs a string member \\\"cmd\\\"\"}" },
		{ "{\"cmd\":7}",
		  "{\"ok\":false,\"error\":\"invalid\",\"detail\":\"the request needs a string member \\\"cmd\\\"\"}" },
		{ "{\"cmd\":\"echo\"}",
		  "{\"ok\":false,\"error\":\"invalid\",\"detail\":\"echo needs a string \\\"arg\\\"\"}" },
		{ "{\"cmd\":\"echo\",\"arg\":\"a\\nb\"}", "{\"ok\":true,\"arg\":\"a\\nb\"}" },
		{ "{\"cmd\":\"broken\"}", "{\"ok\":false,\"error\":\"invalid\",\"detail\":\"" },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		char *reply = NULL;
		st_err rv = st_control_call(url, cases[i].req, 5000, &reply);

		ST_CHECK(rv == ST_OK);
		if (i == ST_ARRAY_LEN(cases) - 1)
			ST_CHECK(reply && strncmp(reply, cases[i].want, strlen(cases[i].want)) == 0);
		else
			ST_CHECK_STR(reply, cases[i].want);
		free(reply);
	}
}

/* More nodes than the DOM allows: refused as malformed, not allocated. */
static void
t_too_many_nodes(void)
{
	st_buf b;
	char *reply = NULL;

	st_buf_init(&b);
	st_buf_puts(&b, "{\"cmd\":\"stats\",\"x\":[");
	for (int i = 0; i < 2000; i++)
		st_buf_puts(&b, i ? ",1" : "1");
	st_buf_puts(&b, "]}");
	ST_CHECK(st_control_call(url, b.p, 5000, &reply) == ST_OK);
	ST_CHECK_STR(reply, "{\"ok\":false,\"error\":\"invalid\",\"detail\":\"malformed JSON\"}");
	free(reply);
	st_buf_fini(&b);
}

/* Over 64 KiB: nng refuses it before allocating; the client times out. The
 * server must still answer the next request.  Over TCP: with libnng 1.5.2's
 * ipc transport a rep0 socket that refused oversize requests sometimes
 * stops receiving altogether (reproduced without libevent or this module;
 * tcp does not show it), so this check runs on a TCP listener. */
static void
t_oversize(void)
{
	size_t n = 70 * 1024;
	char *big = st_xmalloc(n + 1), *reply = NULL;
	st_err rv;

	memset(big, ' ', n);
	memcpy(big, "{\"cmd\":\"stats\"}", 15);
	big[n] = '\0';
	ST_CHECK(st_control_call(tcp_url, big, 300, &reply) == ST_ETIMEDOUT);
	ST_CHECK(reply == NULL);
	free(big);
	rv = st_control_call(tcp_url, "{\"cmd\":\"stats\"}", 5000, &reply);
	if (rv != ST_OK)
		fprintf(stderr, "after oversize: %s\n", st_err_str(rv));
	ST_CHECK(rv == ST_OK);
	ST_CHECK_STR(reply, "{\"ok\":true,\"streams\":3,\"draining\":false}");
	free(reply);
}

static void
t_client_errors(void)
{
	char *reply = (char *)"x", absent[128];

	snprintf(absent, sizeof(absent), "ipc:///tmp/st-control-test-absent-%d.ipc", (int)getpid());
	ST_CHECK(st_control_call(absent, "{\"cmd\":\"stats\"}", 200, &reply) == ST_ETIMEDOUT);
	ST_CHECK(reply == NULL);
	ST_CHECK(st_control_call("bogus://x", "{}", 200, &reply) == ST_EINVAL);
}

int
main(void)
{
	struct event_base *base;
	st_control *c = NULL, *dup = NULL, *ct = NULL;
	pthread_t loop;

	evthread_use_pthreads();
	base = event_base_new();
	snprintf(url, sizeof(url), "ipc:///tmp/st-control-test-%d.ipc", (int)getpid());
	ST_CHECK(st_control_new(base, url, handler, NULL, &c) == ST_OK);
	{
		/* The socket file is the owner's alone, whatever the umask (issue 25). */
		struct stat st;

		ST_CHECK(stat(url + strlen("ipc://"), &st) == 0);
		ST_CHECK_EQ_U64(st.st_mode & 0777, 0600);
	}
	ST_CHECK(st_control_new(base, "bogus://x", handler, NULL, &dup) == ST_EINVAL);
	ST_CHECK(dup == NULL);
	/* A port derived from the pid, so parallel runs rarely collide; a few tries. */
	for (int k = 0; k < 5 && ct == NULL; k++) {
		snprintf(tcp_url, sizeof(tcp_url), "tcp://127.0.0.1:%d", 20000 + ((int)getpid() * 7 + k * 131) % 20000);
		if (st_control_new(base, tcp_url, handler, NULL, &ct) != ST_OK)
			ct = NULL;
	}
	ST_CHECK(ct != NULL);
	if (c == NULL || ct == NULL)
		return st_test_done() | 1;
	pthread_create(&loop, NULL, loop_main, base);
	ST_RUN(t_requests);
	ST_RUN(t_too_many_nodes);
	ST_RUN(t_oversize);
	ST_RUN(t_client_errors);
	event_base_loopbreak(base);
	pthread_join(loop, NULL);
	st_control_free(c);
	st_control_free(ct);
	st_control_free(NULL);
	event_base_free(base);
	unlink(url + strlen("ipc://"));
	/* Closed sockets are reaped by nng's threads; finish that before exit
	 * so LeakSanitizer sees nothing in flight. */
	nng_fini();
	return st_test_done();
}
