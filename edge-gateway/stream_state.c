/*
 * stream_state: the transition table of stream.c's state machine.  See
 * stream.c's header for what each transition's event is.
 */
#include "stream_state.h"

static const char *const names[STREAM_STATE_COUNT] = { "checking", "replaying", "live", "closing", "ending" };

/* [from][to]; a row per state, in the order of the enum. */
static const bool edges[STREAM_STATE_COUNT][STREAM_STATE_COUNT] = {
	/* CHECKING: the check answered, the response started. */
	[STREAM_CHECKING] = { [STREAM_REPLAYING] = true },
	/* REPLAYING: the seam (or a stopped replay); a blocked socket's drop writes the reconnect. */
	[STREAM_REPLAYING] = { [STREAM_LIVE] = true, [STREAM_ENDING] = true },
	/* LIVE: complete or reconnect queued; a drop, or a terminal written straight (a failed replay). */
	[STREAM_LIVE] = { [STREAM_CLOSING] = true, [STREAM_ENDING] = true },
	/* CLOSING: the queued terminal reached the socket. */
	[STREAM_CLOSING] = { [STREAM_ENDING] = true },
	/* ENDING: only the close callback, which ends the stream. */
	[STREAM_ENDING] = { 0 },
};

bool
stream_state_initial(enum stream_state s)
{
	return s == STREAM_CHECKING || s == STREAM_LIVE;
}

bool
stream_state_can(enum stream_state from, enum stream_state to)
{
	return (unsigned)from < STREAM_STATE_COUNT && (unsigned)to < STREAM_STATE_COUNT && edges[from][to];
}

const char *
stream_state_name(enum stream_state s)
{
	return (unsigned)s < STREAM_STATE_COUNT ? names[s] : "?";
}
