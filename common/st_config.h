/*
 * st_config: command-line flags with STUDIO_<FLAG> environment fallbacks.
 *
 * A program declares a table of st_opt and calls st_config_parse once.
 * Precedence: --flag VALUE or --flag=VALUE, then the variable STUDIO_FLAG
 * (upper case, '-' as '_'), then the default.  --help prints every option
 * with its default, what is allowed and its help text.  Bad configuration
 * (unknown flag, missing value, a number out of [min, max], a bad duration,
 * a required option left empty, a value its check refuses) is ONE line, and
 * a program exits 2 with it at once (st_config_parse_or_exit): every check
 * here is local, nothing touches the network.  The line names where the value came
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
#include <stdio.h>

#include "st_err.h"

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
	const char *name; /* "pg-dsn" (no leading dashes) */
	enum st_opt_kind kind;
	const char *def; /* default as text, NULL = no default */
	const char *help;
	int64_t min, max; /* for INT and DURATION (ms); ignored when min == max == 0 */
	bool required;    /* exit 2 when still empty after parsing */
	/* What is allowed, for --help and error lines ("1..100 and not 7");
	 * NULL: derived from kind, min and max. */
	const char *allowed;
	st_opt_check_fn check; /* NULL: kind and range only */
	bool secret;           /* never echo the value (a DSN may hold a password) */
	/* Filled by st_config_parse.  sval points into argv, environ, def, or
	 * a buffer owned by the config module that lives until exit. */
	const char *sval;
	int64_t ival; /* INT and DURATION (ms); BOOL as 0/1 */
	bool set;     /* given by flag or environment */
};

/*
 * Parses argv against opts[0..n) (a program's table: an array indexed by its
 * own enum, so that a misspelt option is a compile error, not a lookup that
 * fails at run time).  Returns ST_OK with the values filled, or ST_EINVAL
 * with one line in line[0..cap) (without the program's name) on bad
 * configuration.  --help or -h anywhere before "--": *help = true, ST_OK,
 * nothing else checked.  Never exits.  argv is permuted (GNU getopt) so that
 * argv[*first_positional..argc) are the positionals.
 * Thread: main thread, at start.
 */
st_err st_config_parse(st_opt *opts, size_t n, int argc, char **argv, int *first_positional, bool *help, char *line,
		       size_t cap);

/* The --help text: usage is the one-line synopsis ("broker-writer [migrate] --pg-dsn DSN [options]"). */
void st_config_help(const st_opt *opts, size_t n, const char *prog, const char *usage, FILE *out);

/*
 * For a program's main: st_config_parse, then --help printed to stdout and
 * exit 0, or "PROG: LINE" on stderr and exit 2.
 */
void st_config_parse_or_exit(st_opt *opts, size_t n, int argc, char **argv, const char *prog, const char *usage,
			     int *first_positional);

/* Exits 2 with "PROG: MESSAGE" (for checks that span options). */
void st_config_fail(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

/*
 * Splits a comma-separated list into at most max items, each a fresh
 * NUL-terminated string (caller frees each and the array).  Empty items are
 * skipped.  Returns the count.
 */
size_t st_config_split(const char *list, char ***out, size_t max);

/* Parses a duration as above into ms.  ST_EINVAL on bad syntax. */
st_err st_config_parse_duration(const char *s, int64_t *ms);

#endif
