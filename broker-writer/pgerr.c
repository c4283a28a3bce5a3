/* pgerr: the SQLSTATE classes of errors that a retry cannot fix. */
#include "pgerr.h"

#include <string.h>

bool
pgerr_permanent(const char *sqlstate)
{
	if (sqlstate == NULL || strlen(sqlstate) != 5)
		return false;
	if (strcmp(sqlstate, "23505") == 0)
		return false;
	return strncmp(sqlstate, "22", 2) == 0 || strncmp(sqlstate, "23", 2) == 0 || strncmp(sqlstate, "54", 2) == 0 ||
	       strcmp(sqlstate, "P0001") == 0;
}
