/*
 * reresolve: when to look a writer name up again (the rule only; sub.c
 * owns the timers and the lookups).
 *
 * A name is whole when every address dialed for it has a pipe up and there
 * are as many pipes as it had before (want: the most pipes seen since the
 * name last settled).  A writer replaced on a new address first leaves the
 * name (the pod terminates) and joins it again later (the new pod is
 * ready), so "every dialed address is up" alone would call the name whole
 * in between and wait the regular interval for the new address.
 *
 * While the name is whole it is looked up every max_ms (SUB_RESOLVE_MS).
 * While it is not, the next lookups come after min_ms, then twice that, ...
 * up to max_ms: a writer replaced on a new address is found within about
 * min_ms of the name listing it.  When the delay reaches max_ms the name
 * settles: want becomes the pipes up now (writers removed for good cost
 * about log2(max_ms / min_ms) extra lookups, then the regular interval).
 *
 * A pipe change that leaves the name short starts the quick lookups over
 * when the name is at the regular interval, or was whole again since they
 * started (a second writer replaced right after the first must not wait for
 * the first one's backoff: seen as 8 s in test_cluster); while they are
 * still climbing it leaves them alone.  Pure: no clock, no lookups.
 */
#ifndef EDGE_RERESOLVE_H
#define EDGE_RERESOLVE_H

#include <stdbool.h>

/* One name's state; zero-initialised before the first lookup. */
typedef struct reresolve {
	unsigned attempt; /* quick lookups handed out since the name was last whole at a lookup */
	unsigned want;    /* pipes the name is whole with */
	bool recovered;   /* whole again since the quick lookups started */
} reresolve;

/* After a lookup was applied (or failed): the delay before the next one.
 * dialed: addresses dialed for the name now; up: those with a pipe. */
unsigned reresolve_next_ms(reresolve *r, unsigned dialed, unsigned up, unsigned min_ms, unsigned max_ms);

/* A pipe of the name came up or went away while no lookup is out: the delay
 * to re-arm the name's timer with, or 0 to leave the timer as it is. */
unsigned reresolve_pipe_ms(reresolve *r, unsigned dialed, unsigned up, unsigned min_ms, unsigned max_ms);

#endif
