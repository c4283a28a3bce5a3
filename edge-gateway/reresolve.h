/*
 * reresolve: when to look a writer name up again (the rule only; sub.c
 * owns the timers and the lookups).
 *
 * While every address a name resolved to has a pipe up (the name is
 * whole), it is looked up every max_ms (SUB_RESOLVE_MS).  When one of them
 * lacks a pipe (a writer pod went away, or a new address is still
 * connecting) the next lookups come after min_ms, then twice that, ... up
 * to max_ms: a writer replaced on a new address is found within about
 * min_ms of the old pipe's loss once the name lists it, and a name with an
 * address that stays dead costs about log2(max_ms / min_ms) extra lookups
 * before the regular interval again.
 *
 * A loss starts the quick lookups over only when the name is at the regular
 * interval, or was whole again since they started (a second writer replaced
 * right after the first: its new address must not wait for the first one's
 * backoff, seen as 8 s in test_cluster).  A loss while they are still
 * climbing leaves them alone.  Pure: no clock, no lookups.
 */
#ifndef EDGE_RERESOLVE_H
#define EDGE_RERESOLVE_H

#include <stdbool.h>

/* One name's state; zero-initialised is "whole, regular interval". */
typedef struct reresolve {
	unsigned attempt; /* quick lookups handed out since the name was last whole at a lookup */
	bool recovered;   /* whole again since the quick lookups started */
} reresolve;

/* After a lookup was applied (or failed): the delay before the next one.
 * whole: every address dialed for the name has a pipe up. */
unsigned reresolve_next_ms(reresolve *r, bool whole, unsigned min_ms, unsigned max_ms);

/* A pipe came up and the name is whole again. */
void reresolve_whole(reresolve *r);

/* A pipe of the name went away while no lookup is out: the delay to re-arm
 * the name's timer with, or 0 to leave the timer as it is. */
unsigned reresolve_lost_ms(reresolve *r, unsigned min_ms, unsigned max_ms);

#endif
