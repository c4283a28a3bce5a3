/*
 * fuzz_streamreq: the whole request half of GET /v1/stream (query string,
 * Accept, Last-Event-ID) comes straight from the client.
 *
 * The input is split at its first two NULs into query, Accept and
 * Last-Event-ID (missing parts are absent headers); the first byte's low bit
 * says whether query tokens are kept.  Invariants, restated from the header
 * and not from the code: ST_OK means 1..64 distinct topics, each passing the
 * contract's topic rule, a format among the three, and an access token only
 * when tokens are kept; ST_EINVAL means a 400 or 406 problem with a title
 * and a detail, and nothing left owned.  ASan/LeakSanitizer check that
 * streamreq_fini frees exactly what was allocated.
 */
#include <string.h>

#include "fuzz_check.h"
#include "streamreq.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 3);
	const char *parts[3] = { NULL, NULL, NULL };
	size_t np = 0, start = 0;
	bool keep = size > 0 && (data[0] & 1);
	streamreq r;
	streamreq_problem why = { 0 };

	if (buf == NULL)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	for (size_t i = 0; i <= size && np < 3; i++) {
		if (buf[i] == '\0') {
			parts[np++] = buf + start;
			start = i + 1;
		}
	}
	if (streamreq_parse(parts[0], parts[1], parts[2], keep, &r, &why) == ST_OK) {
		FUZZ_CHECK(r.n_topics >= 1 && r.n_topics <= 64, "n_topics %zu", r.n_topics);
		for (size_t i = 0; i < r.n_topics; i++) {
			FUZZ_CHECK(fuzz_topic_ok(r.topics[i], r.topic_lens[i]), "topic %zu refused by the rule", i);
			FUZZ_CHECK(strlen(r.topics[i]) == r.topic_lens[i], "topic %zu length", i);
			for (size_t k = 0; k < i; k++)
				FUZZ_CHECK(r.topic_lens[k] != r.topic_lens[i] ||
						   memcmp(r.topics[k], r.topics[i], r.topic_lens[i]) != 0,
					   "topic %zu repeats topic %zu", i, k);
		}
		FUZZ_CHECK(r.fmt == FRAME_SSE || r.fmt == FRAME_NDJSON || r.fmt == FRAME_JSONSEQ, "format %d", r.fmt);
		FUZZ_CHECK(keep || r.access_token == NULL, "a token kept although tokens are not");
		FUZZ_CHECK(!r.until_head || r.has_until, "until=head without has_until");
		streamreq_fini(&r);
	} else {
		FUZZ_CHECK(why.status == 400 || why.status == 406, "status %d", why.status);
		FUZZ_CHECK(why.title != NULL && why.detail != NULL, "problem without texts");
		FUZZ_CHECK(r.topics == NULL && r.access_token == NULL, "a refusal left something owned");
	}
	free(buf);
	return 0;
}
