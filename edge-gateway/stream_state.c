/*
 * stream_state: the transition table of stream.c's state machine.  See
 * stream.c's header for what each transition's event is.
 */
#include "stream_state.h"

static const char *const names[ST_STATE_COUNT] = { "checking", "replaying", "live", "closing", "ending" };

/* [from][to]; a row per state, in the order of the enum. */
static const bool edges[ST_STATE_COUNT][ST_STATE_COUNT] = {
	/* CHECKING: the check answered, the response started. */
	[ST_CHECKING] = { [ST_REPLAYING] = true },
	/* REPLAYING: the seam (or a stopped replay); a blocked socket's drop writes the reconnect. */
	[ST_REPLAYING] = { [ST_LIVE] = true, [ST_ENDING] = true },
	/* LIVE: complete or reconnect queued; a drop, or a terminal written straight (a failed replay). */
	[ST_LIVE] = { [ST_CLOSING] = true, [ST_ENDING] = true },
	/* CLOSING: the queued terminal reached the socket. */
	[ST_CLOSING] = { [ST_ENDING] = true },
	/* ENDING: only the close callback, which ends the stream. */
	[ST_ENDING] = { 0 },
};

bool
stream_state_initial(enum stream_state s)
{
	return s == ST_CHECKING || s == ST_LIVE;
}

bool
stream_state_can(enum stream_state from, enum stream_state to)
{
	return (unsigned)from < ST_STATE_COUNT && (unsigned)to < ST_STATE_COUNT && edges[from][to];
}

const char *
stream_state_name(enum stream_state s)
{
	return (unsigned)s < ST_STATE_COUNT ? names[s] : "?";
}
