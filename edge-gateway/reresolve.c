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

static bool
whole(reresolve *r, unsigned dialed, unsigned up)
{
	if (up > r->want)
		r->want = up;
	return dialed > 0 && up >= dialed && up >= r->want;
}

unsigned
reresolve_next_ms(reresolve *r, unsigned dialed, unsigned up, unsigned min_ms, unsigned max_ms)
{
	unsigned d;

	if (whole(r, dialed, up)) {
		r->attempt = 0;
		r->recovered = false;
		return max_ms;
	}
	d = delay_ms(r->attempt, min_ms, max_ms);
	if (r->attempt < RERESOLVE_ATTEMPT_CAP)
		r->attempt++;
	if (d >= max_ms)
		r->want = up; /* short through a whole backoff: the name is smaller now */
	return d;
}

unsigned
reresolve_pipe_ms(reresolve *r, unsigned dialed, unsigned up, unsigned min_ms, unsigned max_ms)
{
	if (whole(r, dialed, up)) {
		if (r->attempt != 0)
			r->recovered = true;
		return 0;
	}
	/* Climbing and not whole since: leave it.  Regular (attempt 0, or at
	 * max_ms with an address that stays dead) or recovered: start over. */
	if (r->attempt != 0 && !r->recovered && delay_ms(r->attempt - 1, min_ms, max_ms) < max_ms)
		return 0;
	r->attempt = 1;
	r->recovered = false;
	return delay_ms(0, min_ms, max_ms);
}
