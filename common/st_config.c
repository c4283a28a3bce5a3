/*
 * st_config: flags, STUDIO_<FLAG> variables, defaults, in that order.
 *
 * DESIGN
 * Parsing is three passes over one table.  Pass one walks argv once: it
 * answers --help at once (before any validation, so "--help" always works
 * even with a broken environment), records the value of each flag (the last
 * one wins; LIST flags are joined with commas so that "--writers a --writers
 * b,c" equals "--writers a,b,c"), and moves positionals behind the flags the
 * way GNU getopt permutes, so that argv[first_positional..argc) are exactly
 * the positionals in their order.  Pass two fills what no flag gave from the
 * environment, then from the default.  Pass three converts and checks every
 * value; the first problem ends the process with one line on stderr and
 * status 2, naming where the bad value came from (the flag or the variable).
 *
 * The strings this module creates (joined lists) are kept on a static list
 * so they stay reachable until exit, as st_opt.sval promises.  This module
 * runs on the main thread at start only; nothing here is thread-safe.
 */
#include "st_config.h"
#include "st_util.h"

#include <ctype.h>
#include <errno.h>
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
	case ST_OPT_STR:
		return " VALUE";
	case ST_OPT_INT:
		return " N";
	case ST_OPT_DURATION:
		return " DURATION";
	case ST_OPT_BOOL:
		return "";
	case ST_OPT_LIST:
		return " A[,B...]";
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
	case ST_OPT_BOOL:
		snprintf(buf, cap, "true, false, 1 or 0");
		return;
	case ST_OPT_STR:
	case ST_OPT_LIST:
		buf[0] = '\0';
		return;
	}
}

static void
print_help(const st_opt *opts, size_t n, const char *prog, const char *usage)
{
	char env[128], allowed[256];

	printf("usage: %s\n\noptions (each also as the environment variable shown; a flag wins):\n", usage ? usage : prog);
	for (size_t i = 0; i < n; i++) {
		env_name(env, sizeof(env), opts[i].name);
		printf("  --%s%s\n      %s", opts[i].name, kind_meta(opts[i].kind), opts[i].help ? opts[i].help : "");
		if (opts[i].def)
			printf(" (default: %s)", opts[i].def[0] ? opts[i].def : "\"\"");
		else if (opts[i].required)
			printf(" (required)");
		allowed_text(&opts[i], allowed, sizeof(allowed));
		if (allowed[0] && opts[i].kind != ST_OPT_BOOL)
			printf(" (allowed: %s)", allowed);
		if (opts[i].kind == ST_OPT_LIST)
			printf(" (repeatable)");
		printf(" [%s]\n", env);
	}
	printf("  --help\n      print this text and exit\n");
	fflush(stdout);
	exit(0);
}

static st_opt *
find(st_opt *opts, size_t n, const char *name, size_t len)
{
	for (size_t i = 0; i < n; i++)
		if (strlen(opts[i].name) == len && memcmp(opts[i].name, name, len) == 0)
			return &opts[i];
	return NULL;
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

/* Exits 2: "PROG: SRC VALUE: WHY" (the value left out for a secret option). */
static void
refuse(const st_opt *o, const char *prog, const char *src, const char *why)
{
	char val[512];

	if (o->secret || o->sval == NULL) {
		st_config_fail(prog, "%s: %s", src, why);
	}
	value_text(o->sval, val, sizeof(val));
	st_config_fail(prog, "%s %s: %s", src, val, why);
}

/* Checks and converts one value; src names where it came from, for the error line. */
static void
convert(st_opt *o, const char *prog, const char *src)
{
	char allowed[256], why[512];

	if (o->sval == NULL)
		return;
	allowed_text(o, allowed, sizeof(allowed));
	snprintf(why, sizeof(why), "must be %s", allowed);
	switch (o->kind) {
	case ST_OPT_STR:
	case ST_OPT_LIST:
		break;
	case ST_OPT_BOOL:
		if (parse_bool(o->sval, &o->ival) != ST_OK)
			refuse(o, prog, src, why);
		break;
	case ST_OPT_INT:
		if (parse_int(o->sval, &o->ival) != ST_OK || (ranged(o) && (o->ival < o->min || o->ival > o->max)))
			refuse(o, prog, src, why);
		break;
	case ST_OPT_DURATION:
		if (st_config_parse_duration(o->sval, &o->ival) != ST_OK ||
		    (ranged(o) && (o->ival < o->min || o->ival > o->max)))
			refuse(o, prog, src, why);
		break;
	}
	if (o->check != NULL && o->sval[0] != '\0') {
		why[0] = '\0';
		if (!o->check(o, why, sizeof(why)))
			refuse(o, prog, src, why[0] ? why : "not allowed");
	}
}

void
st_config_parse(st_opt *opts, size_t n, int argc, char **argv, const char *prog, const char *usage,
                int *first_positional)
{
	/* src[i]: 1 = flag, 2 = environment, 3 = default, for error lines.
	 * Both arrays hang off statics so that an exit(2) in the middle leaves
	 * them reachable (LeakSanitizer would otherwise change the status). */
	static unsigned char *src;
	static char **pos;
	int npos = 0, nflag = 1;
	bool only_pos = false;
	char env[128], what[160];

	src = st_xcalloc(n ? n : 1, 1);
	pos = st_xcalloc((size_t)(argc > 0 ? argc : 1), sizeof(char *));
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
			ST_FREE(&src);
			ST_FREE(&pos);
			print_help(opts, n, prog, usage);
		}
	}

	for (int i = 1; i < argc; i++) {
		char *a = argv[i];
		const char *name, *eq, *val = NULL;
		size_t nlen;
		st_opt *o;

		if (only_pos || a[0] != '-' || strcmp(a, "-") == 0) {
			pos[npos++] = a;
			continue;
		}
		if (strcmp(a, "--") == 0) {
			only_pos = true;
			continue;
		}
		if (a[1] != '-')
			st_config_fail(prog, "unknown option \"%s\" (see --help)", a);
		name = a + 2;
		eq = strchr(name, '=');
		nlen = eq ? (size_t)(eq - name) : strlen(name);
		if ((o = find(opts, n, name, nlen)) == NULL)
			st_config_fail(prog, "unknown option \"--%.*s\" (see --help)", (int)nlen, name);
		argv[nflag++] = a;
		if (eq) {
			val = eq + 1;
		} else if (o->kind == ST_OPT_BOOL) {
			val = "true";
		} else {
			if (i + 1 >= argc)
				st_config_fail(prog, "--%s needs a value", o->name);
			val = argv[++i];
			argv[nflag++] = (char *)val;
		}
		if (o->kind == ST_OPT_LIST && o->set && o->sval[0] != '\0' && val[0] != '\0')
			o->sval = keep(o->sval, strlen(o->sval), val, strlen(val));
		else if (o->kind == ST_OPT_LIST && o->set && val[0] == '\0')
			; /* "--topic=" adds nothing */
		else
			o->sval = val;
		o->set = true;
		src[o - opts] = 1;
	}
	/* The "--" itself goes between the flags and the positionals, so that
	 * argv[first_positional..argc) are the positionals and nothing else. */
	if (only_pos)
		argv[nflag++] = "--";
	for (int i = 0; i < npos; i++)
		argv[nflag + i] = pos[i];
	if (first_positional)
		*first_positional = nflag;

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
		if (o->required && (o->sval == NULL || o->sval[0] == '\0'))
			st_config_fail(prog, "--%s (or %s) is required%s%s", o->name, env, o->help ? ": " : "",
			               o->help ? o->help : "");
		convert(o, prog, what);
	}
	ST_FREE(&src);
	ST_FREE(&pos);
}

st_opt *
st_config_get(st_opt *opts, size_t n, const char *name)
{
	st_opt *o = find(opts, n, name, strlen(name));

	ST_ASSERT(o != NULL);
	return o;
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
