/*
 * fuzz_proto_reply_decode: what studioctl and producers read back from a
 * writer (a peer that may be anything listening on the address).
 *
 * On success: error and detail are NUL-terminated inside their arrays; an
 * ok reply has its seqs (and a malloc'd array to read them from, which
 * ASan checks), a refusal none.  The reply is re-encoded with the writer's
 * encoder and decoded again: the same seqs, or the same error and detail
 * (as C strings: the fixed arrays stop at the first NUL), must come back.
 * On failure the out struct must be safe to fini twice (it was zeroed).
 */
#include <string.h>

#include "fuzz_check.h"
#include "st_buf.h"
#include "wire.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	proto_reply r, r2;
	st_buf b;
	st_err rv;

	rv = proto_reply_decode(data, size, &r);
	if (rv != ST_OK) {
		FUZZ_CHECK(rv == ST_EPROTO, "refusal is %d", (int)rv);
		FUZZ_CHECK(r.seqs == NULL && r.n_seqs == 0, "refused reply still holds seqs");
		proto_reply_fini(&r);
		return 0;
	}
	FUZZ_CHECK(memchr(r.error, '\0', sizeof(r.error)) != NULL, "error not NUL-terminated");
	FUZZ_CHECK(memchr(r.detail, '\0', sizeof(r.detail)) != NULL, "detail not NUL-terminated");
	st_buf_init(&b);
	if (r.ok) {
		uint64_t sum = 0;

		FUZZ_CHECK(r.n_seqs == 0 || r.seqs != NULL, "ok reply without its seqs array");
		for (size_t i = 0; i < r.n_seqs; i++)
			sum += r.seqs[i]; /* reads every element: ASan checks the array */
		(void)sum;
		proto_reply_ok_encode(&b, r.seqs, r.n_seqs);
	} else {
		FUZZ_CHECK(r.n_seqs == 0, "refusal reply with %zu seqs", r.n_seqs);
		proto_reply_err_encode(&b, r.error, r.detail);
	}
	rv = proto_reply_decode(b.p, b.len, &r2);
	FUZZ_CHECK(rv == ST_OK, "re-encoded reply refused");
	FUZZ_CHECK(r2.ok == r.ok, "round trip: ok differs");
	if (r.ok) {
		FUZZ_CHECK(r2.n_seqs == r.n_seqs, "round trip: seq count differs");
		for (size_t i = 0; i < r.n_seqs; i++)
			FUZZ_CHECK(r2.seqs[i] == r.seqs[i], "round trip: seq %zu differs", i);
	} else {
		FUZZ_CHECK(strcmp(r2.error, r.error) == 0, "round trip: error differs");
		FUZZ_CHECK(strcmp(r2.detail, r.detail) == 0, "round trip: detail differs");
	}
	proto_reply_fini(&r2);
	proto_reply_fini(&r);
	proto_reply_fini(&r); /* idempotent */
	st_buf_fini(&b);
	return 0;
}
