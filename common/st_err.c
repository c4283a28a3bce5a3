/* st_err: static texts for the error values. */
#include "st_err.h"

const char *
st_err_str(st_err e)
{
	switch (e) {
	case ST_OK: return "ok";
	case ST_EINVAL: return "invalid input";
	case ST_ENOMEM: return "out of memory";
	case ST_EAGAIN: return "try again";
	case ST_EBUSY: return "buffer full";
	case ST_ECLOSED: return "closed";
	case ST_EPROTO: return "protocol error";
	case ST_EDB: return "database error";
	case ST_ESYS: return "system error";
	case ST_ETIMEDOUT: return "timed out";
	case ST_ENOTFOUND: return "not found";
	case ST_ERANGE: return "out of range";
	case ST_EUNAVAIL: return "unavailable";
	}
	return "unknown error";
}
