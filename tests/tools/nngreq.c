/*
 * nngreq: send one raw request on an nng req0 socket and print the reply.
 *
 * The integration tests use it to put bytes on the writer's ingest socket
 * that no well-behaved client would send: malformed msgpack, trailing bytes,
 * hand-crafted headers claiming billions of elements.  So it never encodes
 * anything itself: the payload is taken verbatim from a hex argument or from
 * stdin.  The reply is decoded with msgpack-c and printed as one JSON line
 * (bin as {"$bin":"hex"}, ext as {"$ext":T,"hex":"..."}, a non-string map key
 * as the string of its JSON text), so a Python test can json.loads it.
 *
 * Usage: nngreq [--timeout-ms N] [--resend-ms N] [--raw] [--repeat N]
 *               [--contexts N | --request-id ID] URL [HEX]
 *   --timeout-ms N  send/receive deadline (default 5000)
 *   --resend-ms N   let REQ resend the request every N ms until answered
 *                   (default: never), as a producer with a short resend time does
 *   --raw           print the reply as hex instead of decoding it
 *   --repeat N      send the request N times, one after the other on the same
 *                   socket (so the same connection), one reply line each
 *   --contexts N    send it from N contexts of one req0 socket at once (one
 *                   connection, N different request ids); N reply lines, in
 *                   context order
 *   --request-id ID send on a raw req0 socket with the request id ID (hex,
 *                   the high bit is set for you): exactly the bytes a req0
 *                   socket sends, so a repeat, or another nngreq with the same
 *                   ID, is a REQ resend of the same request (on the same
 *                   connection, or on a new one)
 * Exit codes: 0 reply printed; 1 the reply is not one msgpack value (its hex
 * is printed); 2 bad usage; 3 nng error after the dial (send, receive,
 * timeout: the request may have reached the writer; the nng message goes to
 * stderr); 4 bad input (hex, or stdin over 64 MiB); 5 the dial failed
 * (connection refused, no such host): nothing was sent, so a producer
 * without keys may resend it elsewhere.
 *
 * req0 resending is disabled: a resent request would be a second request to
 * the writer, which the tests must control themselves.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/util/platform.h>

#define NNGREQ_MAX_INPUT (64u * 1024 * 1024)

/* nng_msg_header_append_u32 writes big-endian; read it back the same way. */
static uint32_t
ntohl_u32(uint32_t be)
{
	const unsigned char *b = (const unsigned char *)&be;

	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

enum { EXIT_REPLY = 0, EXIT_UNDECODABLE = 1, EXIT_USAGE = 2, EXIT_NNG = 3, EXIT_INPUT = 4, EXIT_NOT_SENT = 5 };

static void
usage(void)
{
	fprintf(stderr, "usage: nngreq [--timeout-ms N] [--resend-ms N] [--raw] [--repeat N] "
			"[--contexts N | --request-id ID] URL [HEX]\n");
	exit(EXIT_USAGE);
}

static int
hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int
hex_decode(const char *hex, unsigned char **out, size_t *len)
{
	size_t n = strlen(hex);
	unsigned char *b;
	size_t i;

	if (n % 2 != 0 || n / 2 > NNGREQ_MAX_INPUT)
		return -1;
	if ((b = malloc(n / 2 + 1)) == NULL)
		return -1;
	for (i = 0; i < n / 2; i++) {
		int hi = hexval((unsigned char)hex[2 * i]), lo = hexval((unsigned char)hex[2 * i + 1]);
		if (hi < 0 || lo < 0) {
			free(b);
			return -1;
		}
		b[i] = (unsigned char)(hi << 4 | lo);
	}
	*out = b;
	*len = n / 2;
	return 0;
}

static int
read_stdin(unsigned char **out, size_t *len)
{
	size_t cap = 65536, n = 0, r;
	unsigned char *b = malloc(cap), *nb;

	if (b == NULL)
		return -1;
	while ((r = fread(b + n, 1, cap - n, stdin)) > 0) {
		n += r;
		if (n == cap) {
			if (cap > NNGREQ_MAX_INPUT)
				goto fail;
			if ((nb = realloc(b, cap * 2)) == NULL)
				goto fail;
			b = nb;
			cap *= 2;
		}
	}
	if (ferror(stdin) || n > NNGREQ_MAX_INPUT)
		goto fail;
	*out = b;
	*len = n;
	return 0;
fail:
	free(b);
	return -1;
}

static void
print_hex(FILE *f, const unsigned char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		fprintf(f, "%02x", p[i]);
}

static void
print_jstr(FILE *f, const char *p, size_t n)
{
	size_t i;

	fputc('"', f);
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void print_obj(FILE *f, const msgpack_object *o);

static void
print_key(FILE *f, const msgpack_object *k)
{
	char *text = NULL;
	size_t len = 0;
	FILE *m;

	if (k->type == MSGPACK_OBJECT_STR) {
		print_jstr(f, k->via.str.ptr, k->via.str.size);
		return;
	}
	/* JSON keys are strings: render the key's JSON text, then quote it. */
	if ((m = open_memstream(&text, &len)) == NULL) {
		fputs("\"?\"", f);
		return;
	}
	print_obj(m, k);
	fclose(m);
	print_jstr(f, text, len);
	free(text);
}

static void
print_obj(FILE *f, const msgpack_object *o)
{
	uint32_t i;

	switch (o->type) {
	case MSGPACK_OBJECT_NIL: fputs("null", f); break;
	case MSGPACK_OBJECT_BOOLEAN: fputs(o->via.boolean ? "true" : "false", f); break;
	case MSGPACK_OBJECT_POSITIVE_INTEGER: fprintf(f, "%llu", (unsigned long long)o->via.u64); break;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER: fprintf(f, "%lld", (long long)o->via.i64); break;
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64: fprintf(f, "%.17g", o->via.f64); break;
	case MSGPACK_OBJECT_STR: print_jstr(f, o->via.str.ptr, o->via.str.size); break;
	case MSGPACK_OBJECT_BIN:
		fputs("{\"$bin\":\"", f);
		print_hex(f, (const unsigned char *)o->via.bin.ptr, o->via.bin.size);
		fputs("\"}", f);
		break;
	case MSGPACK_OBJECT_EXT:
		fprintf(f, "{\"$ext\":%d,\"hex\":\"", (int)o->via.ext.type);
		print_hex(f, (const unsigned char *)o->via.ext.ptr, o->via.ext.size);
		fputs("\"}", f);
		break;
	case MSGPACK_OBJECT_ARRAY:
		fputc('[', f);
		for (i = 0; i < o->via.array.size; i++) {
			if (i > 0)
				fputc(',', f);
			print_obj(f, &o->via.array.ptr[i]);
		}
		fputc(']', f);
		break;
	case MSGPACK_OBJECT_MAP:
		fputc('{', f);
		for (i = 0; i < o->via.map.size; i++) {
			if (i > 0)
				fputc(',', f);
			print_key(f, &o->via.map.ptr[i].key);
			fputc(':', f);
			print_obj(f, &o->via.map.ptr[i].val);
		}
		fputc('}', f);
		break;
	default: fputs("null", f); break;
	}
}

static int
print_reply(const unsigned char *p, size_t n)
{
	msgpack_unpacked u;
	size_t off = 0;
	int rc;

	msgpack_unpacked_init(&u);
	rc = msgpack_unpack_next(&u, (const char *)p, n, &off);
	if (rc != MSGPACK_UNPACK_SUCCESS || off != n) {
		msgpack_unpacked_destroy(&u);
		print_hex(stdout, p, n);
		fputc('\n', stdout);
		fprintf(stderr, "nngreq: the reply (%zu bytes) is not one msgpack value\n", n);
		return EXIT_UNDECODABLE;
	}
	print_obj(stdout, &u.data);
	fputc('\n', stdout);
	msgpack_unpacked_destroy(&u);
	return EXIT_REPLY;
}

static int
nng_fail(const char *what, int rv)
{
	fprintf(stderr, "nngreq: %s: %s\n", what, nng_strerror(rv));
	return EXIT_NNG;
}

static int
print_msg(nng_msg *msg, int raw)
{
	if (raw) {
		print_hex(stdout, nng_msg_body(msg), nng_msg_len(msg));
		fputc('\n', stdout);
		return EXIT_REPLY;
	}
	return print_reply(nng_msg_body(msg), nng_msg_len(msg));
}

static long
parse_long(const char *s, long lo, long hi, int base)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, base);
	if (errno != 0 || *end != '\0' || end == s || v < lo || v > hi)
		usage();
	return v;
}

/* --contexts N: N requests at once on one socket (one pipe), distinct ids. */
static int
send_contexts(nng_socket sock, int n, const unsigned char *payload, size_t len, int raw)
{
	nng_ctx *ctx = calloc((size_t)n, sizeof(*ctx));
	nng_aio **aio = calloc((size_t)n, sizeof(*aio));
	int code = EXIT_REPLY, rv, k;

	if (ctx == NULL || aio == NULL) {
		free(ctx);
		free(aio);
		return EXIT_INPUT;
	}
	for (k = 0; k < n; k++) {
		nng_msg *m = NULL;
		if ((rv = nng_ctx_open(&ctx[k], sock)) != 0 || (rv = nng_aio_alloc(&aio[k], NULL, NULL)) != 0 ||
		    (rv = nng_msg_alloc(&m, 0)) != 0 || (rv = nng_msg_append(m, payload, len)) != 0) {
			code = nng_fail("context set-up", rv);
			goto done;
		}
		nng_aio_set_msg(aio[k], m);
		nng_ctx_send(ctx[k], aio[k]);
	}
	for (k = 0; k < n; k++) {
		nng_aio_wait(aio[k]);
		if ((rv = nng_aio_result(aio[k])) != 0) {
			nng_msg_free(nng_aio_get_msg(aio[k]));
			code = nng_fail("send", rv);
			goto done;
		}
	}
	for (k = 0; k < n; k++)
		nng_ctx_recv(ctx[k], aio[k]);
	for (k = 0; k < n; k++) {
		int c;
		nng_aio_wait(aio[k]);
		if ((rv = nng_aio_result(aio[k])) != 0) {
			printf("null\n"); /* this context got no reply: say so in its line */
			fprintf(stderr, "nngreq: context %d: receive: %s\n", k, nng_strerror(rv));
			code = EXIT_NNG;
			continue;
		}
		c = print_msg(nng_aio_get_msg(aio[k]), raw);
		nng_msg_free(nng_aio_get_msg(aio[k]));
		if (c != EXIT_REPLY && code == EXIT_REPLY)
			code = c;
	}
done:
	fflush(stdout);
	for (k = 0; k < n; k++) {
		if (aio[k] != NULL)
			nng_aio_free(aio[k]);
	}
	free(ctx);
	free(aio);
	return code;
}

/* One request on a raw socket with the given id; waits for the reply carrying that id. */
static int
send_raw(nng_socket sock, uint32_t id, const unsigned char *payload, size_t len, int raw)
{
	nng_msg *m = NULL;
	int rv;

	if ((rv = nng_msg_alloc(&m, 0)) != 0 || (rv = nng_msg_append(m, payload, len)) != 0 ||
	    (rv = nng_msg_header_append_u32(m, id)) != 0) {
		nng_msg_free(m);
		return nng_fail("nng_msg", rv);
	}
	if ((rv = nng_sendmsg(sock, m, 0)) != 0) {
		nng_msg_free(m);
		return nng_fail("send", rv);
	}
	for (;;) {
		uint32_t got = 0;
		int code;
		if ((rv = nng_recvmsg(sock, &m, 0)) != 0)
			return nng_fail("receive", rv);
		if (nng_msg_header_len(m) == 4)
			memcpy(&got, nng_msg_header(m), 4);
		if (nng_msg_header_len(m) != 4 || ntohl_u32(got) != id) {
			nng_msg_free(m); /* the reply to an earlier request: not ours */
			continue;
		}
		code = print_msg(m, raw);
		nng_msg_free(m);
		return code;
	}
}

int
main(int argc, char **argv)
{
	long timeout_ms = 5000, resend_ms = -1, repeat = 1, contexts = 0;
	long long request_id = -1;
	int raw = 0, i = 1, rv, code = EXIT_REPLY;
	const char *url = NULL, *hex = NULL;
	unsigned char *payload = NULL;
	size_t len = 0;
	nng_socket sock = NNG_SOCKET_INITIALIZER;
	nng_msg *msg = NULL;

	for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
		if (strcmp(argv[i], "--timeout-ms") == 0 && i + 1 < argc) {
			timeout_ms = parse_long(argv[++i], 1, 3600000, 10);
		} else if (strcmp(argv[i], "--resend-ms") == 0 && i + 1 < argc) {
			resend_ms = parse_long(argv[++i], 1, 3600000, 10);
		} else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
			repeat = parse_long(argv[++i], 1, 1000, 10);
		} else if (strcmp(argv[i], "--contexts") == 0 && i + 1 < argc) {
			contexts = parse_long(argv[++i], 1, 1000, 10);
		} else if (strcmp(argv[i], "--request-id") == 0 && i + 1 < argc) {
			request_id = parse_long(argv[++i], 0, 0x7fffffffL, 16);
		} else if (strcmp(argv[i], "--raw") == 0) {
			raw = 1;
		} else {
			usage();
		}
	}
	if (i >= argc || argc - i > 2 || (contexts > 0 && request_id >= 0))
		usage();
	url = argv[i];
	hex = i + 1 < argc ? argv[i + 1] : NULL;

	if ((hex != NULL ? hex_decode(hex, &payload, &len) : read_stdin(&payload, &len)) != 0) {
		fprintf(stderr, "nngreq: bad input (%s)\n", hex != NULL ? "hex" : "stdin over 64 MiB");
		return EXIT_INPUT;
	}

	if ((rv = request_id >= 0 ? nng_req0_open_raw(&sock) : nng_req0_open(&sock)) != 0) {
		code = nng_fail("nng_req0_open", rv);
		goto done;
	}
	if ((rv = nng_socket_set_ms(sock, NNG_OPT_SENDTIMEO, (nng_duration)timeout_ms)) != 0 ||
	    (rv = nng_socket_set_ms(sock, NNG_OPT_RECVTIMEO, (nng_duration)timeout_ms)) != 0 ||
	    (request_id < 0 &&
	     (rv = nng_socket_set_ms(sock, NNG_OPT_REQ_RESENDTIME,
				     resend_ms > 0 ? (nng_duration)resend_ms : NNG_DURATION_INFINITE)) != 0) ||
	    (rv = nng_socket_set_size(sock, NNG_OPT_RECVMAXSZ, NNGREQ_MAX_INPUT)) != 0) {
		code = nng_fail("nng_socket_set", rv);
		goto done;
	}
	if ((rv = nng_dial(sock, url, NULL, 0)) != 0) {
		nng_fail(url, rv);
		code = EXIT_NOT_SENT;
		goto done;
	}
	if (contexts > 0) {
		code = send_contexts(sock, (int)contexts, payload, len, raw);
		goto done;
	}
	for (long r = 0; r < repeat; r++) {
		if (request_id >= 0) {
			code = send_raw(sock, (uint32_t)request_id | 0x80000000u, payload, len, raw);
		} else {
			if ((rv = nng_msg_alloc(&msg, 0)) != 0 || (rv = nng_msg_append(msg, payload, len)) != 0) {
				code = nng_fail("nng_msg", rv);
				goto done;
			}
			if ((rv = nng_sendmsg(sock, msg, 0)) != 0) {
				code = nng_fail("send", rv);
				goto done;
			}
			msg = NULL; /* nng owns it once sent */
			if ((rv = nng_recvmsg(sock, &msg, 0)) != 0) {
				code = nng_fail("receive", rv);
				goto done;
			}
			code = print_msg(msg, raw);
			nng_msg_free(msg);
			msg = NULL;
		}
		fflush(stdout);
		if (code != EXIT_REPLY)
			break;
	}
done:
	nng_msg_free(msg);
	nng_close(sock);
	free(payload);
	return code;
}
