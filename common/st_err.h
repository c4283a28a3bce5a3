/*
 * st_err: the one error type of the project (modelled on nng_err).
 *
 * Every function that can fail returns st_err; results go through
 * out-parameters.  Foreign errors (nng, libpq, errno) are translated where
 * they happen and their text is logged once there.
 */
#ifndef ST_ERR_H
#define ST_ERR_H

typedef enum {
	ST_OK = 0,
	ST_EINVAL,    /* malformed or out-of-bounds input */
	ST_ENOMEM,    /* an input-sized allocation failed or was refused */
	ST_EAGAIN,    /* try again later (would block, not ready) */
	ST_EBUSY,     /* a bounded buffer is full */
	ST_ECLOSED,   /* the object is closing or closed */
	ST_EPROTO,    /* a peer broke the protocol */
	ST_EDB,       /* PostgreSQL failed */
	ST_ESYS,      /* a system call failed (see errno, logged where it happened) */
	ST_ETIMEDOUT, /* a deadline passed */
	ST_ENOTFOUND, /* no such thing */
	ST_ERANGE,    /* a number is out of its range */
	ST_EUNAVAIL,  /* a dependency is unavailable (shutting down, database gone) */
} st_err;

/* Static text for an error value; never NULL. */
const char *st_err_str(st_err e);

#endif
