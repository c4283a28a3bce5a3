/* reresolve: the backoff of writer-name lookups (reresolve.h). */
#include "reresolve.h"

/* attempt saturates here; delay_ms has reached max_ms long before. */
#define RERESOLVE_ATTEMPT_CAP 64u

static unsigned
delay_ms(unsigned attempt, unsigned min_ms, unsigned max_ms)
{
	unsigned d = min_ms;

	/* Doubling stops at max_ms, so no shift can overflow whatever attempt is. */
	for (unsigned i = 0; i < attempt && d < max_ms; i++)
		d *= 2;
	return d < max_ms ? d : max_ms;
}

unsigned
reresolve_next_ms(unsigned *attempt, bool whole, unsigned min_ms, unsigned max_ms)
{
	unsigned d;

	if (whole) {
		*attempt = 0;
		return max_ms;
	}
	d = delay_ms(*attempt, min_ms, max_ms);
	if (*attempt < RERESOLVE_ATTEMPT_CAP)
		(*attempt)++;
	return d;
}

unsigned
reresolve_lost_ms(unsigned *attempt, unsigned min_ms, unsigned max_ms)
{
	/* Scheduled quickly already: leave it.  At the regular interval (a
	 * name with an address that stays dead): a new loss starts over. */
	if (*attempt != 0 && delay_ms(*attempt - 1, min_ms, max_ms) < max_ms)
		return 0;
	*attempt = 1;
	return delay_ms(0, min_ms, max_ms);
}
