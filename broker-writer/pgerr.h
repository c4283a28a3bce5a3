/*
 * pgerr: which PostgreSQL errors a retry cannot fix.
 *
 * A flush that fails is either retried (the same statement, the same
 * flush_id) or, when the error says the data itself cannot be stored, split
 * and the request that cannot be stored refused (docs/writer.md, "Failed
 * flushes").  The decision rests on the SQLSTATE alone.
 */
#ifndef BW_PGERR_H
#define BW_PGERR_H

#include <stdbool.h>

/*
 * true: the same data fails the same way again: class 22 (data exception:
 * a character the database encoding cannot hold, a value out of range),
 * class 23 except 23505 (integrity constraint: CHECK, NOT NULL, foreign
 * key, exclusion), class 54 (program limit: a row too large to index) and
 * P0001 (a trigger or function raised).  false for everything else, NULL
 * and malformed codes included: connection (08), timeouts and locks
 * (55P03, 57014), serialisation and deadlock (40), resources (53),
 * shutdown (57P), and unique_violation 23505, which the flush can meet
 * when its seqs collide with a row inserted without the advisory lock (a
 * retry takes new seqs).
 */
bool pgerr_permanent(const char *sqlstate);

#endif
