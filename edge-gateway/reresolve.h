/*
 * reresolve: when to look a writer name up again (the rule only; sub.c
 * owns the timers and the lookups).
 *
 * While every address a name resolved to has a pipe up, the name is
 * looked up every max_ms (SUB_RESOLVE_MS).  When one of them lacks a pipe
 * (a writer pod went away, or a new address is still connecting) the next
 * lookups come after min_ms, then twice that, ... up to max_ms: a writer
 * replaced on a new address is found within about min_ms of the old pipe's
 * loss once the name lists it, and a name with an address that stays dead
 * costs at most log2(max_ms / min_ms) extra lookups before the regular
 * interval again.  A loss while the name is back at the regular interval
 * (an address that stays dead) starts the quick lookups over, so at most
 * one such run per climb to max_ms.  *attempt counts the quick lookups handed out since the
 * name was last whole (0: regular).  Pure: no clock, no state of its own.
 */
#ifndef EDGE_RERESOLVE_H
#define EDGE_RERESOLVE_H

#include <stdbool.h>

/* After a lookup was applied (or failed): the delay before the next one.
 * whole: every address dialed for the name has a pipe up. */
unsigned reresolve_next_ms(unsigned *attempt, bool whole, unsigned min_ms, unsigned max_ms);

/* A pipe of the name went away while no lookup is out: the delay to re-arm
 * the name's timer with, or 0 to leave the timer as it is (a quick lookup
 * is already scheduled: a flapping pipe must not restart the backoff). */
unsigned reresolve_lost_ms(unsigned *attempt, unsigned min_ms, unsigned max_ms);

#endif
