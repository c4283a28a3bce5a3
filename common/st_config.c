/*
 * st_config: flags, STUDIO_<FLAG> variables, defaults, in that order.
 *
 * DESIGN
 * Parsing is three passes over one table.  Pass one is getopt_long over a
 * struct option array built from the table: --help is answered before it
 * (so "--help" always works, even with a broken environment); each flag's
 * value is recorded (the last one wins; LIST flags are joined with commas so
 * that "--writers a --writers b,c" equals "--writers a,b,c"); GNU getopt
 * permutes argv so that argv[first_positional..argc) are exactly the
 * positionals in their order (POSIXLY_CORRECT in the environment would stop
 * at the first positional: flags must then come first).  getopt_long also
 * takes a unique prefix of a name ("--ret" for "--retention"); that is
 * refused here, because a prefix that is unique today becomes ambiguous when
 * an option is added.  Pass two fills what no flag gave from the
 * environment, then from the default.  Pass three converts and checks every
 * value.  The first problem ends the parse with ST_EINVAL and one line in
 * the caller's buffer naming where the bad value came from (the flag or the
 * variable); nothing here exits except st_config_parse_or_exit and
 * st_config_fail, which only a program's main calls.
 *
 * The strings this module creates (joined lists) are kept on a static list
 * so they stay reachable until exit, as st_opt.sval promises.  This module
 * runs on the main thread at start only; nothing here is thread-safe
 * (getopt_long's state is global).
 */
#include "st_config.h"
#include "st_util.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Strings owned by the module for the life of the process. */
struct kept {
	struct kept *next;
	char s[];
};
static struct kept *kept_head;

static const char *
keep(const char *a, size_t alen, const char *b, size_t blen)
{
	struct kept *k = st_xmalloc(sizeof(*k) + alen + blen + 2);

	memcpy(k->s, a, alen);
	if (blen) {
		k->s[alen] = ',';
		memcpy(k->s + alen + 1, b, blen);
		k->s[alen + 1 + blen] = '\0';
	} else {
		k->s[alen] = '\0';
	}
	k->next = kept_head;
	kept_head = k;
	return k->s;
}

void
st_config_fail(const char *prog, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
	exit(2);
}

/* "pg-dsn" -> "STUDIO_PG_DSN" into buf (names are short; truncation is a bug). */
static void
env_name(char *buf, size_t cap, const char *name)
{
	size_t i = 0, n = strlen(name);

	ST_ASSERT(n + 8 <= cap);
	memcpy(buf, "STUDIO_", 7);
	for (i = 0; i < n; i++)
		buf[7 + i] = name[i] == '-' ? '_' : (char)toupper((unsigned char)name[i]);
	buf[7 + n] = '\0';
}

st_err
st_config_parse_duration(const char *s, int64_t *ms)
{
	static const struct {
		const char *unit;
		int64_t ms;
	} units[] = { { "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 }, { "d", 86400000 } };
	uint64_t v = 0;
	size_t nd = 0;
	st_err rv;

	if (s == NULL)
		return ST_EINVAL;
	while (s[nd] >= '0' && s[nd] <= '9')
		nd++;
	if (nd == 0)
		return ST_EINVAL;
	if ((rv = st_parse_u64(s, nd, &v)) != ST_OK)
		return rv;
	if (s[nd] == '\0') {
		/* A bare number is ambiguous (seconds? ms?) except for zero. */
		if (v != 0)
			return ST_EINVAL;
		*ms = 0;
		return ST_OK;
	}
	for (size_t i = 0; i < ST_ARRAY_LEN(units); i++) {
		if (strcmp(s + nd, units[i].unit) != 0)
			continue;
		if (v > (uint64_t)(INT64_MAX / units[i].ms))
			return ST_ERANGE;
		*ms = (int64_t)v * units[i].ms;
		return ST_OK;
	}
	return ST_EINVAL;
}

static st_err
parse_int(const char *s, int64_t *out)
{
	char *end;
	long long v;

	if (s == NULL || *s == '\0' || isspace((unsigned char)*s))
		return ST_EINVAL;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (*end != '\0')
		return ST_EINVAL;
	if (errno == ERANGE)
		return ST_ERANGE;
	*out = (int64_t)v;
	return ST_OK;
}

static st_err
parse_bool(const char *s, int64_t *out)
{
	if (strcmp(s, "1") == 0 || strcmp(s, "true") == 0) {
		*out = 1;
		return ST_OK;
	}
	if (strcmp(s, "0") == 0 || strcmp(s, "false") == 0) {
		*out = 0;
		return ST_OK;
	}
	return ST_EINVAL;
}

static const char *
kind_meta(enum st_opt_kind k)
{
	switch (k) {
	case ST_OPT_STR: return " VALUE";
	case ST_OPT_INT: return " N";
	case ST_OPT_DURATION: return " DURATION";
	case ST_OPT_BOOL: return "";
	case ST_OPT_LIST: return " A[,B...]";
	}
	return "";
}

/* ms as the largest unit that divides it exactly: 604800000 -> "7d". */
static void
duration_text(int64_t ms, char *buf, size_t cap)
{
	static const struct {
		const char *unit;
		int64_t ms;
	} units[] = { { "d", 86400000 }, { "h", 3600000 }, { "m", 60000 }, { "s", 1000 } };

	if (ms != 0)
		for (size_t i = 0; i < ST_ARRAY_LEN(units); i++)
			if (ms % units[i].ms == 0) {
				snprintf(buf, cap, "%lld%s", (long long)(ms / units[i].ms), units[i].unit);
				return;
			}
	snprintf(buf, cap, ms == 0 ? "0" : "%lldms", (long long)ms);
}

static bool
ranged(const st_opt *o)
{
	return !(o->min == 0 && o->max == 0);
}

/* What the option accepts, as written after "must be" in an error line. */
static void
allowed_text(const st_opt *o, char *buf, size_t cap)
{
	char lo[32], hi[32];

	if (o->allowed) {
		snprintf(buf, cap, "%s", o->allowed);
		return;
	}
	switch (o->kind) {
	case ST_OPT_INT:
		if (ranged(o))
			snprintf(buf, cap, "an integer in %lld..%lld", (long long)o->min, (long long)o->max);
		else
			snprintf(buf, cap, "a decimal integer");
		return;
	case ST_OPT_DURATION:
		if (ranged(o)) {
			duration_text(o->min, lo, sizeof(lo));
			duration_text(o->max, hi, sizeof(hi));
			snprintf(buf, cap, "a duration in %s..%s (0, 250ms, 30s, 15m, 12h, 7d)", lo, hi);
		} else {
			snprintf(buf, cap, "a duration (0, 250ms, 30s, 15m, 12h, 7d)");
		}
		return;
	case ST_OPT_BOOL: snprintf(buf, cap, "true, false, 1 or 0"); return;
	case ST_OPT_STR:
	case ST_OPT_LIST: buf[0] = '\0'; return;
	}
}

void
st_config_help(const st_opt *opts, size_t n, const char *prog, const char *usage, FILE *out)
{
	char env[128], allowed[256];

	fprintf(out, "usage: %s\n\noptions (each also as the environment variable shown; a flag wins):\n",
		usage ? usage : prog);
	for (size_t i = 0; i < n; i++) {
		env_name(env, sizeof(env), opts[i].name);
		fprintf(out, "  --%s%s\n      %s", opts[i].name, kind_meta(opts[i].kind),
			opts[i].help ? opts[i].help : "");
		if (opts[i].def)
			fprintf(out, " (default: %s)", opts[i].def[0] ? opts[i].def : "\"\"");
		else if (opts[i].required)
			fprintf(out, " (required)");
		allowed_text(&opts[i], allowed, sizeof(allowed));
		if (allowed[0] && opts[i].kind != ST_OPT_BOOL)
			fprintf(out, " (allowed: %s)", allowed);
		if (opts[i].kind == ST_OPT_LIST)
			fprintf(out, " (repeatable)");
		fprintf(out, " [%s]\n", env);
	}
	fprintf(out, "  --help\n      print this text and exit\n");
	fflush(out);
}

/*
 * The value as it goes into an error line: as is when it is short and
 * plain, otherwise quoted with control bytes escaped and cut at 120 bytes,
 * so that the line stays one line whatever the value holds.
 */
static void
value_text(const char *v, char *buf, size_t cap)
{
	size_t n = strlen(v), o = 0;
	bool plain = n > 0 && n <= 120;

	for (size_t i = 0; i < n && plain; i++)
		plain = v[i] > ' ' && v[i] != '"' && v[i] != 0x7f;
	if (plain) {
		snprintf(buf, cap, "%s", v);
		return;
	}
	ST_ASSERT(cap >= 16);
	buf[o++] = '"';
	for (size_t i = 0; i < n && i < 120 && o + 6 < cap; i++) {
		unsigned char c = (unsigned char)v[i];

		if (c < ' ' || c == 0x7f || c == '"' || c == '\\')
			o += (size_t)snprintf(buf + o, cap - o, c == '"' || c == '\\' ? "\\%c" : "\\x%02x", c);
		else
			buf[o++] = (char)c;
	}
	if (n > 120 && o + 5 < cap) {
		memcpy(buf + o, "...", 3);
		o += 3;
	}
	buf[o++] = '"';
	buf[o] = '\0';
}

/* Writes "SRC VALUE: WHY" into line (the value left out for a secret option). */
static st_err
refuse(const st_opt *o, const char *src, const char *why, char *line, size_t cap)
{
	char val[512];

	if (o->secret || o->sval == NULL) {
		snprintf(line, cap, "%s: %s", src, why);
		return ST_EINVAL;
	}
	value_text(o->sval, val, sizeof(val));
	snprintf(line, cap, "%s %s: %s", src, val, why);
	return ST_EINVAL;
}

/* Checks and converts one value; src names where it came from, for the error line. */
static st_err
convert(st_opt *o, const char *src, char *line, size_t cap)
{
	char allowed[256], why[512];

	if (o->sval == NULL)
		return ST_OK;
	allowed_text(o, allowed, sizeof(allowed));
	snprintf(why, sizeof(why), "must be %s", allowed);
	switch (o->kind) {
	case ST_OPT_STR:
	case ST_OPT_LIST: break;
	case ST_OPT_BOOL:
		if (parse_bool(o->sval, &o->ival) != ST_OK)
			return refuse(o, src, why, line, cap);
		break;
	case ST_OPT_INT:
		if (parse_int(o->sval, &o->ival) != ST_OK || (ranged(o) && (o->ival < o->min || o->ival > o->max)))
			return refuse(o, src, why, line, cap);
		break;
	case ST_OPT_DURATION:
		if (st_config_parse_duration(o->sval, &o->ival) != ST_OK ||
		    (ranged(o) && (o->ival < o->min || o->ival > o->max)))
			return refuse(o, src, why, line, cap);
		break;
	}
	if (o->check != NULL && o->sval[0] != '\0') {
		why[0] = '\0';
		if (!o->check(o, why, sizeof(why)))
			return refuse(o, src, why[0] ? why : "not allowed", line, cap);
	}
	return ST_OK;
}

/* getopt_long's val for option i: above every character a short option could be. */
#define OPT_VAL_BASE 256

/* The name as written in tok ("--name" or "--name=value"), compared with the option's. */
static bool
name_exact(const char *tok, const char *name)
{
	size_t len;

	if (strncmp(tok, "--", 2) != 0)
		return false;
	tok += 2;
	len = strcspn(tok, "=");
	return strlen(name) == len && memcmp(tok, name, len) == 0;
}

/*
 * Pass one: argv through getopt_long.  Records each flag's value in its
 * option (src[i] = 1); leaves argv permuted with the positionals from
 * *first_positional on.
 */
static st_err
parse_flags(st_opt *opts, size_t n, int argc, char **argv, unsigned char *src, int *first_positional, char *line,
	    size_t cap)
{
	struct option *lo = st_xcalloc(n + 1, sizeof(*lo)); /* n entries and the zero terminator */
	st_err rv = ST_OK;
	int c, li = 0;

	for (size_t i = 0; i < n; i++) {
		lo[i].name = opts[i].name;
		/* A BOOL flag alone means true; "--flag=false" is the way to say false, so that
		 * "--flag word" keeps "word" a positional. */
		lo[i].has_arg = opts[i].kind == ST_OPT_BOOL ? optional_argument : required_argument;
		lo[i].val = OPT_VAL_BASE + (int)i;
	}
	optind = 0; /* glibc: 0 re-initialises the scanner (a parse may run more than once) */
	opterr = 0; /* our own lines, not getopt's */
	/* ":": a missing value is ':' rather than '?', so it gets its own line. */
	while ((c = getopt_long(argc, argv, ":", lo, &li)) != -1) {
		const char *tok, *val;
		st_opt *o;

		if (c == '?') {
			if (optopt != 0)
				snprintf(line, cap, "unknown option \"-%c\" (see --help)", optopt);
			else
				snprintf(line, cap, "unknown option \"%.*s\" (see --help)",
					 (int)strcspn(argv[optind - 1], "="), argv[optind - 1]);
			rv = ST_EINVAL;
			goto out;
		}
		if (c == ':') {
			ST_ASSERT(optopt >= OPT_VAL_BASE && optopt < OPT_VAL_BASE + (int)n);
			snprintf(line, cap, "--%s needs a value", opts[optopt - OPT_VAL_BASE].name);
			rv = ST_EINVAL;
			goto out;
		}
		ST_ASSERT(c >= OPT_VAL_BASE && c < OPT_VAL_BASE + (int)n);
		o = &opts[c - OPT_VAL_BASE];
		/* The flag's own word: before its value when the value was a separate word. */
		tok = optarg != NULL && optind >= 2 && optarg == argv[optind - 1] ? argv[optind - 2] : argv[optind - 1];
		if (!name_exact(tok, o->name)) {
			snprintf(line, cap, "unknown option \"%.*s\" (see --help; did you mean --%s?)",
				 (int)strcspn(tok, "="), tok, o->name);
			rv = ST_EINVAL;
			goto out;
		}
		val = optarg != NULL ? optarg : "true";
		if (o->kind == ST_OPT_LIST && o->set && o->sval[0] != '\0' && val[0] != '\0')
			o->sval = keep(o->sval, strlen(o->sval), val, strlen(val));
		else if (o->kind == ST_OPT_LIST && o->set && val[0] == '\0')
			; /* "--topic=" adds nothing */
		else
			o->sval = val;
		o->set = true;
		src[o - opts] = 1;
	}
	*first_positional = optind;
out:
	free(lo);
	return rv;
}

st_err
st_config_parse(st_opt *opts, size_t n, int argc, char **argv, int *first_positional, bool *help, char *line,
		size_t cap)
{
	/* src[i]: 1 = flag, 2 = environment, 3 = default, for error lines. */
	unsigned char *src = NULL;
	char env[128], what[160];
	int first = argc;
	st_err rv = ST_OK;

	*help = false;
	line[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		opts[i].sval = NULL;
		opts[i].ival = 0;
		opts[i].set = false;
	}
	/* --help wins over everything, wherever it is. */
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0)
			break;
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			*help = true;
			return ST_OK;
		}
	}
	src = st_xcalloc(n ? n : 1, 1);
	if ((rv = parse_flags(opts, n, argc, argv, src, &first, line, cap)) != ST_OK)
		goto out;
	if (first_positional)
		*first_positional = first;

	for (size_t i = 0; i < n; i++) {
		st_opt *o = &opts[i];
		const char *e;

		if (o->set)
			continue;
		env_name(env, sizeof(env), o->name);
		/* An empty variable counts as unset: deployment templates leave them empty. */
		if ((e = getenv(env)) != NULL && e[0] != '\0') {
			o->sval = e;
			o->set = true;
			src[i] = 2;
		} else if (o->def) {
			o->sval = o->def;
			src[i] = 3;
		}
	}

	for (size_t i = 0; i < n; i++) {
		st_opt *o = &opts[i];

		env_name(env, sizeof(env), o->name);
		if (src[i] == 1)
			snprintf(what, sizeof(what), "--%s", o->name);
		else if (src[i] == 2)
			snprintf(what, sizeof(what), "%s", env);
		else
			snprintf(what, sizeof(what), "default of --%s", o->name);
		if (o->required && (o->sval == NULL || o->sval[0] == '\0')) {
			snprintf(line, cap, "--%s (or %s) is required%s%s", o->name, env, o->help ? ": " : "",
				 o->help ? o->help : "");
			rv = ST_EINVAL;
			goto out;
		}
		if ((rv = convert(o, what, line, cap)) != ST_OK)
			goto out;
	}
out:
	free(src);
	return rv;
}

void
st_config_parse_or_exit(st_opt *opts, size_t n, int argc, char **argv, const char *prog, const char *usage,
			int *first_positional)
{
	char line[1024];
	bool help;

	if (st_config_parse(opts, n, argc, argv, first_positional, &help, line, sizeof(line)) != ST_OK)
		st_config_fail(prog, "%s", line);
	if (help) {
		st_config_help(opts, n, prog, usage, stdout);
		exit(0);
	}
}

size_t
st_config_split(const char *list, char ***out, size_t max)
{
	size_t count = 0, cap = 0;
	const char *p = list, *item;
	size_t len;
	char **items;

	/* The array is sized by the commas present, so it is bounded by the input. */
	if (list)
		for (const char *q = list; *q; q++)
			cap += *q == ',';
	cap = ST_MIN(cap + 1, max);
	items = st_xcalloc(cap + 1, sizeof(char *));
	while (list && count < max && st_list_next(&p, &item, &len))
		items[count++] = st_xstrndup(item, len);
	*out = items;
	return count;
}
