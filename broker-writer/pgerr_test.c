/* Unit tests for pgerr: data errors are permanent, everything a retry can fix is not. */
#include "pgerr.h"
#include "st_test.h"

static void
t_permanent(void)
{
	/* untranslatable character (LATIN1 database), bad JSON, check, not null, row too big, RAISE */
	const char *codes[] = { "22P05", "22021", "22P02", "23514", "23502", "23503", "54000", "P0001" };

	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		ST_CHECK(pgerr_permanent(codes[i]));
}

static void
t_transient(void)
{
	/* unique violation (seq collision), connection, lock timeout, statement timeout, admin shutdown,
	 * serialisation, deadlock, out of memory, disk full, internal error, undefined function */
	const char *codes[] = { "23505", "08006", "55P03", "57014", "57P01", "40001",
				"40P01", "53200", "53100", "XX000", "42883" };

	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		ST_CHECK(!pgerr_permanent(codes[i]));
	ST_CHECK(!pgerr_permanent(NULL));
	ST_CHECK(!pgerr_permanent(""));
	ST_CHECK(!pgerr_permanent("22"));
	ST_CHECK(!pgerr_permanent("2200000"));
}

int
main(void)
{
	ST_RUN(t_permanent);
	ST_RUN(t_transient);
	return st_test_done();
}
