/*
 * st_config: command-line flags with STUDIO_<FLAG> environment fallbacks.
 *
 * A program declares a table of st_opt and calls st_config_parse once.
 * Precedence: --flag VALUE or --flag=VALUE, then the variable STUDIO_FLAG
 * (upper case, '-' as '_'), then the default.  --help prints every option
 * with its default, what is allowed and its help text, and exits 0.  Bad
 * configuration (unknown flag, missing value, a number out of [min, max], a
 * bad duration, a required option left empty, a value its check refuses)
 * prints ONE line to stderr and exits 2, at once: every check here is
 * local, nothing touches the network.  The line names where the value came
 * from, the value and what is allowed:
 *     PROG: --lock-key 0: must be 1..9223372036854775806 and not ...
 *     PROG: STUDIO_RETENTION 7 days: must be a duration ...
 *
 * Positional arguments (subcommands like "migrate" or "publish") are left
 * in argv: *first_positional is the index of the first non-flag argument
 * (argc when there is none).  Flags may appear before or after positionals.
 */
#ifndef ST_CONFIG_H
#define ST_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum st_opt_kind {
	ST_OPT_STR,      /* any string */
	ST_OPT_INT,      /* decimal integer in [min, max] */
	ST_OPT_DURATION, /* "0", "250ms", "30s", "15m", "12h", "7d" -> ival in milliseconds, in [min, max] */
	ST_OPT_BOOL,     /* --flag alone, or --flag=true|false|1|0; env "1"/"true"/"0"/"false" */
	ST_OPT_LIST,     /* repeatable, or comma-separated: sval keeps the comma-joined list */
};

typedef struct st_opt st_opt;

/*
 * A check beyond kind and range, run on a value that is set and converted
 * (never on an empty string: empty means "none" or is caught by required).
 * Returns false and writes why (what is allowed, or what is wrong: one
 * line, without the flag and the value, which the caller prepends).  Must
 * not touch the network.
 */
typedef bool (*st_opt_check_fn)(const st_opt *o, char *why, size_t cap);

struct st_opt {
	const char *name;    /* "pg-dsn" (no leading dashes) */
	enum st_opt_kind kind;
	const char *def;     /* default as text, NULL = no default */
	const char *help;
	int64_t min, max;    /* for INT and DURATION (ms); ignored when min == max == 0 */
	bool required;       /* exit 2 when still empty after parsing */
	/* What is allowed, for --help and error lines ("1..100 and not 7");
	 * NULL: derived from kind, min and max. */
	const char *allowed;
	st_opt_check_fn check; /* NULL: kind and range only */
	bool secret;         /* never echo the value (a DSN may hold a password) */
	/* Filled by st_config_parse.  sval points into argv, environ, def, or
	 * a buffer owned by the config module that lives until exit. */
	const char *sval;
	int64_t ival;        /* INT and DURATION (ms); BOOL as 0/1 */
	bool set;            /* given by flag or environment */
};

/*
 * Parses argv against opts[0..n).  usage is the one-line synopsis printed by
 * --help ("broker-writer [migrate] --pg-dsn DSN [options]").  On --help or
 * bad configuration this exits the process; otherwise it returns.
 * Thread: main thread, at start.
 */
void st_config_parse(st_opt *opts, size_t n, int argc, char **argv, const char *prog,
                     const char *usage, int *first_positional);

/* Finds an option by name; asserts that it exists (a typo is a bug). */
st_opt *st_config_get(st_opt *opts, size_t n, const char *name);

/* Exits 2 with "PROG: MESSAGE" (for checks that span options). */
void st_config_fail(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

/*
 * Splits a comma-separated list into at most max items, each a fresh
 * NUL-terminated string (caller frees each and the array).  Empty items are
 * skipped.  Returns the count.
 */
size_t st_config_split(const char *list, char ***out, size_t max);

/* Parses a duration as above into ms.  ST_EINVAL on bad syntax. */
#include "st_err.h"
st_err st_config_parse_duration(const char *s, int64_t *ms);

#endif
