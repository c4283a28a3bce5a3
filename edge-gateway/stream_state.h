/*
 * stream_state: the states of one stream and the transitions between them
 * (the diagram at the top of stream.c, as a table).  Pure: no loop, no
 * allocation; stream.c asserts every transition against it, so the code
 * and the diagram cannot drift apart, and stream_state_test checks the
 * table's shape.
 */
#ifndef EDGE_STREAM_STATE_H
#define EDGE_STREAM_STATE_H

#include <stdbool.h>

enum stream_state {
	STREAM_CHECKING,  /* the resume check is out; no byte written */
	STREAM_REPLAYING, /* rows from PostgreSQL written; live frames held */
	STREAM_LIVE,      /* frames from the hub's queue written */
	STREAM_CLOSING,   /* a terminal envelope queued behind live frames */
	STREAM_ENDING,    /* a terminal envelope handed to the connection; waits for the close */
};
/* Not an enumerator, so switches over the states stay exhaustive without it. */
#define STREAM_STATE_COUNT (STREAM_ENDING + 1)

/* A stream starts in this state (admitted: live only, or a resume to check). */
bool stream_state_initial(enum stream_state s);
/* from -> to is a transition of the diagram (ending the stream is not one: every state may end). */
bool stream_state_can(enum stream_state from, enum stream_state to);
const char *stream_state_name(enum stream_state s);

#endif
