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
 * Usage: nngreq [--timeout-ms N] [--resend-ms N] [--raw] URL [HEX]
 *   --timeout-ms N  send/receive deadline (default 5000)
 *   --resend-ms N   let REQ resend the request every N ms until answered
 *                   (default: never), as a producer with a short resend time does
 *   --raw           print the reply as hex instead of decoding it
 * Exit codes: 0 reply printed; 1 the reply is not one msgpack value (its hex
 * is printed); 2 bad usage; 3 nng error (dial, send, receive, timeout: the
 * nng message goes to stderr); 4 bad input (hex, or stdin over 64 MiB).
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

#define NNGREQ_MAX_INPUT (64u * 1024 * 1024)

enum { EXIT_REPLY = 0, EXIT_UNDECODABLE = 1, EXIT_USAGE = 2, EXIT_NNG = 3, EXIT_INPUT = 4 };

static void
usage(void)
{
	fprintf(stderr, "usage: nngreq [--timeout-ms N] [--resend-ms N] [--raw] URL [HEX]\n");
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
	case MSGPACK_OBJECT_NIL:
		fputs("null", f);
		break;
	case MSGPACK_OBJECT_BOOLEAN:
		fputs(o->via.boolean ? "true" : "false", f);
		break;
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
		fprintf(f, "%llu", (unsigned long long)o->via.u64);
		break;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER:
		fprintf(f, "%lld", (long long)o->via.i64);
		break;
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64:
		fprintf(f, "%.17g", o->via.f64);
		break;
	case MSGPACK_OBJECT_STR:
		print_jstr(f, o->via.str.ptr, o->via.str.size);
		break;
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
	default:
		fputs("null", f);
		break;
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

int
main(int argc, char **argv)
{
	long timeout_ms = 5000, resend_ms = -1;
	int raw = 0, i = 1, rv, code;
	const char *url = NULL, *hex = NULL;
	unsigned char *payload = NULL;
	size_t len = 0;
	nng_socket sock = NNG_SOCKET_INITIALIZER;
	nng_msg *msg = NULL;

	for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
		if (strcmp(argv[i], "--timeout-ms") == 0 && i + 1 < argc) {
			char *end;
			errno = 0;
			timeout_ms = strtol(argv[++i], &end, 10);
			if (errno != 0 || *end != '\0' || timeout_ms <= 0 || timeout_ms > 3600000)
				usage();
		} else if (strcmp(argv[i], "--resend-ms") == 0 && i + 1 < argc) {
			char *end;
			errno = 0;
			resend_ms = strtol(argv[++i], &end, 10);
			if (errno != 0 || *end != '\0' || resend_ms <= 0 || resend_ms > 3600000)
				usage();
		} else if (strcmp(argv[i], "--raw") == 0) {
			raw = 1;
		} else {
			usage();
		}
	}
	if (i >= argc || argc - i > 2)
		usage();
	url = argv[i];
	hex = i + 1 < argc ? argv[i + 1] : NULL;

	if ((hex != NULL ? hex_decode(hex, &payload, &len) : read_stdin(&payload, &len)) != 0) {
		fprintf(stderr, "nngreq: bad input (%s)\n", hex != NULL ? "hex" : "stdin over 64 MiB");
		return EXIT_INPUT;
	}

	if ((rv = nng_req0_open(&sock)) != 0) {
		code = nng_fail("nng_req0_open", rv);
		goto done;
	}
	if ((rv = nng_socket_set_ms(sock, NNG_OPT_SENDTIMEO, (nng_duration)timeout_ms)) != 0 ||
	    (rv = nng_socket_set_ms(sock, NNG_OPT_RECVTIMEO, (nng_duration)timeout_ms)) != 0 ||
	    (rv = nng_socket_set_ms(sock, NNG_OPT_REQ_RESENDTIME,
	                            resend_ms > 0 ? (nng_duration)resend_ms : NNG_DURATION_INFINITE)) != 0 ||
	    (rv = nng_socket_set_size(sock, NNG_OPT_RECVMAXSZ, NNGREQ_MAX_INPUT)) != 0) {
		code = nng_fail("nng_socket_set", rv);
		goto done;
	}
	if ((rv = nng_dial(sock, url, NULL, 0)) != 0) {
		code = nng_fail(url, rv);
		goto done;
	}
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
	if (raw) {
		print_hex(stdout, nng_msg_body(msg), nng_msg_len(msg));
		fputc('\n', stdout);
		code = EXIT_REPLY;
	} else {
		code = print_reply(nng_msg_body(msg), nng_msg_len(msg));
	}
done:
	nng_msg_free(msg);
	nng_close(sock);
	free(payload);
	return code;
}
