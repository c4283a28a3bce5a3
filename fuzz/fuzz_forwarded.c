/*
 * fuzz_forwarded: X-Forwarded-For and Forwarded come from the client (a
 * proxy only appends to them), and the edge reads them before anything
 * else of a stream request when --max-streams-per-ip is on.
 *
 * The input is split at NUL bytes into header lines, at most 8: even
 * lines are X-Forwarded-For, odd ones Forwarded.  Invariants, restated
 * from iplimit.h and not from the code: one line pushes at most one hop
 * per comma plus one (an element is never counted twice, however long the
 * line); the client chosen is the peer (a trusted proxy here) or an
 * address one of the lines pushed; an untrusted peer is always its own
 * client.  ASan checks the one-pass parse reads nothing past a line.
 */
#include <string.h>

#include "fuzz_check.h"
#include "iplimit.h"

static iplimit *lim;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char why[128];

	(void)argc;
	(void)argv;
	if (iplimit_new(1, "10.0.0.0/8, fd00::/8", 64, &lim, why, sizeof(why)) != ST_OK)
		abort();
	return 0;
}

/* True when a is one of the hops h still holds. */
static bool
in_hops(const iplimit_hops *h, const uint8_t a[16])
{
	size_t kept = h->n < IPLIMIT_HOPS ? h->n : IPLIMIT_HOPS;

	for (size_t i = 0; i < kept; i++)
		if (h->ok[i] && memcmp(h->addr[i], a, 16) == 0)
			return true;
	return false;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint8_t peer[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2 };
	static const uint8_t outsider[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 203, 0, 113, 9 };
	char *buf = malloc(size + 1);
	const char *xff[4], *fwd[4];
	size_t nx = 0, nf = 0, start = 0, nl = 0;
	uint8_t out[16];

	if (buf == NULL)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	for (size_t i = 0; i <= size && nl < 8; i++) {
		if (buf[i] != '\0')
			continue;
		{
			const char *line = buf + start;
			size_t commas = 0;
			iplimit_hops h;

			for (const char *p = line; *p; p++)
				commas += *p == ',';
			memset(&h, 0, sizeof(h));
			if (nl % 2 == 0) {
				iplimit_xff_parse(line, &h);
				xff[nx++] = line;
			} else {
				iplimit_forwarded_parse(line, &h);
				fwd[nf++] = line;
			}
			FUZZ_CHECK(h.n <= commas + 1, "line %zu pushed %zu hops for %zu commas", nl, h.n, commas);
		}
		nl++;
		start = i + 1;
	}
	iplimit_client(lim, outsider, xff, nx, fwd, nf, out);
	FUZZ_CHECK(memcmp(out, outsider, 16) == 0, "an untrusted peer's headers were believed");
	iplimit_client(lim, peer, xff, nx, fwd, nf, out);
	if (memcmp(out, peer, 16) != 0) {
		iplimit_hops hx, hf;

		memset(&hx, 0, sizeof(hx));
		memset(&hf, 0, sizeof(hf));
		for (size_t i = 0; i < nx; i++)
			iplimit_xff_parse(xff[i], &hx);
		for (size_t i = 0; i < nf; i++)
			iplimit_forwarded_parse(fwd[i], &hf);
		FUZZ_CHECK(in_hops(&hx, out) || in_hops(&hf, out), "the client is neither the peer nor a hop");
	}
	free(buf);
	return 0;
}
