/* stream_state_test: the shape of a stream's transition table (stream_state.h), no loop. */
#include "stream_state.h"

#include <stdio.h>
#include <string.h>

#include "st_test.h"
#include "st_util.h"

/* Exactly the transitions of the diagram in stream.c, nothing more. */
static void
t_edges(void)
{
	static const struct {
		enum stream_state from, to;
	} want[] = {
		{ STREAM_CHECKING, STREAM_REPLAYING }, { STREAM_REPLAYING, STREAM_LIVE },
		{ STREAM_REPLAYING, STREAM_ENDING },   { STREAM_LIVE, STREAM_CLOSING },
		{ STREAM_LIVE, STREAM_ENDING },        { STREAM_CLOSING, STREAM_ENDING },
	};
	size_t n = 0;

	for (size_t i = 0; i < ST_ARRAY_LEN(want); i++)
		ST_CHECK(stream_state_can(want[i].from, want[i].to));
	for (int f = 0; f < STREAM_STATE_COUNT; f++)
		for (int t = 0; t < STREAM_STATE_COUNT; t++)
			n += stream_state_can((enum stream_state)f, (enum stream_state)t);
	ST_CHECK_EQ_U64(n, ST_ARRAY_LEN(want));
	ST_CHECK(!stream_state_can((enum stream_state)STREAM_STATE_COUNT, STREAM_LIVE));
}

/* Nothing goes back: no state is reached again (the lifecycle only moves forward). */
static void
t_forward_only(void)
{
	for (int f = 0; f < STREAM_STATE_COUNT; f++)
		for (int t = 0; t <= f; t++)
			ST_CHECK(!stream_state_can((enum stream_state)f, (enum stream_state)t));
}

/* From every initial state every later state can lead to ENDING, and ENDING leads nowhere. */
static void
t_reaches_ending(void)
{
	for (int s = 0; s < STREAM_STATE_COUNT; s++) {
		bool seen[STREAM_STATE_COUNT] = { false };
		bool grew = true;

		seen[s] = true;
		while (grew) {
			grew = false;
			for (int f = 0; f < STREAM_STATE_COUNT; f++) {
				for (int t = 0; t < STREAM_STATE_COUNT; t++) {
					bool edge = stream_state_can((enum stream_state)f, (enum stream_state)t);

					if (seen[f] && !seen[t] && edge)
						seen[t] = grew = true;
				}
			}
		}
		ST_CHECK(seen[STREAM_ENDING]);
	}
	for (int t = 0; t < STREAM_STATE_COUNT; t++)
		ST_CHECK(!stream_state_can(STREAM_ENDING, (enum stream_state)t));
	ST_CHECK(stream_state_initial(STREAM_CHECKING) && stream_state_initial(STREAM_LIVE));
	ST_CHECK(!stream_state_initial(STREAM_REPLAYING) && !stream_state_initial(STREAM_CLOSING) &&
		 !stream_state_initial(STREAM_ENDING));
	ST_CHECK_STR(stream_state_name(STREAM_CLOSING), "closing");
}

int
main(void)
{
	ST_RUN(t_edges);
	ST_RUN(t_forward_only);
	ST_RUN(t_reaches_ending);
	return st_test_done();
}
