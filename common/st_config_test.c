/* Unit tests for st_config: precedence, kinds, positionals, and the exits. */
#include "st_config.h"
#include "st_test.h"
#include "st_util.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

enum { O_DSN, O_IVAL, O_RET, O_VERBOSE, O_WRITERS, O_KEY, O_N };

static bool
key_check(const st_opt *o, char *why, size_t cap)
{
	if (o->ival != 7)
		return true;
	snprintf(why, cap, "must be 1..100 and not 7");
	return false;
}

static bool
dsn_check(const st_opt *o, char *why, size_t cap)
{
	if (strstr(o->sval, "bad") == NULL)
		return true;
	snprintf(why, cap, "holds \"bad\"");
	return false;
}

static void
opts_init(st_opt *o)
{
	memset(o, 0, sizeof(st_opt) * O_N);
	o[O_DSN] = (st_opt){ .name = "pg-dsn",
			     .kind = ST_OPT_STR,
			     .help = "PostgreSQL DSN",
			     .required = true,
			     .check = dsn_check,
			     .secret = true };
	o[O_IVAL] = (st_opt){ .name = "flush-interval-ms",
			      .kind = ST_OPT_INT,
			      .def = "1000",
			      .help = "flush interval",
			      .min = 10,
			      .max = 60000 };
	o[O_RET] = (st_opt){ .name = "retention",
			     .kind = ST_OPT_DURATION,
			     .def = "7d",
			     .help = "retention",
			     .max = 36500LL * 86400000 };
	o[O_VERBOSE] = (st_opt){ .name = "verbose", .kind = ST_OPT_BOOL, .def = "false", .help = "verbose" };
	o[O_WRITERS] = (st_opt){ .name = "writers", .kind = ST_OPT_LIST, .help = "writer URLs" };
	o[O_KEY] = (st_opt){ .name = "lock-key",
			     .kind = ST_OPT_INT,
			     .def = "5",
			     .help = "a key",
			     .min = 1,
			     .max = 100,
			     .allowed = "1..100 and not 7",
			     .check = key_check };
}

static void
env_clear(void)
{
	unsetenv("STUDIO_PG_DSN");
	unsetenv("STUDIO_FLUSH_INTERVAL_MS");
	unsetenv("STUDIO_RETENTION");
	unsetenv("STUDIO_VERBOSE");
	unsetenv("STUDIO_WRITERS");
	unsetenv("STUDIO_LOCK_KEY");
}

#define MAXARGS 16
/* Splits a space-separated command line into a writable argv. */
static int
mkargv(char *buf, size_t cap, const char *line, char **argv)
{
	int argc = 0;
	char *save = NULL, *t;

	snprintf(buf, cap, "%s", line);
	for (t = strtok_r(buf, " ", &save); t && argc < MAXARGS - 1; t = strtok_r(NULL, " ", &save))
		argv[argc++] = t;
	argv[argc] = NULL;
	return argc;
}

static void
t_duration(void)
{
	static const struct {
		const char *in;
		st_err rv;
		int64_t ms;
	} cases[] = {
		{ "0", ST_OK, 0 },
		{ "250ms", ST_OK, 250 },
		{ "30s", ST_OK, 30000 },
		{ "15m", ST_OK, 900000 },
		{ "12h", ST_OK, 43200000 },
		{ "7d", ST_OK, 604800000 },
		{ "0s", ST_OK, 0 },
		{ "", ST_EINVAL, 0 },
		{ "5", ST_EINVAL, 0 },
		{ "s", ST_EINVAL, 0 },
		{ "-1s", ST_EINVAL, 0 },
		{ "1.5s", ST_EINVAL, 0 },
		{ "10x", ST_EINVAL, 0 },
		{ "10 s", ST_EINVAL, 0 },
		{ "10S", ST_EINVAL, 0 },
		{ "1msx", ST_EINVAL, 0 },
		{ "99999999999999999999d", ST_ERANGE, 0 },
		{ "9999999999999999d", ST_ERANGE, 0 },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		int64_t ms = -1;
		st_err rv = st_config_parse_duration(cases[i].in, &ms);

		if (rv != cases[i].rv || (rv == ST_OK && ms != cases[i].ms)) {
			fprintf(stderr, "duration \"%s\": rv %d ms %lld\n", cases[i].in, rv, (long long)ms);
			ST_CHECK(0);
		}
	}
}

/* Table of successful parses: command line, environment, expected values. */
static void
t_parse_ok(void)
{
	static const struct {
		const char *line;
		const char *env_dsn, *env_ival, *env_writers;
		const char *dsn;
		int64_t ival, ret, verbose;
		const char *writers; /* NULL: expect unset */
		bool ival_set;
		const char *positionals; /* space-joined */
	} cases[] = {
		{ "p --pg-dsn a", NULL, NULL, NULL, "a", 1000, 604800000, 0, NULL, false, "" },
		{ "p --pg-dsn=a=b --flush-interval-ms 50", NULL, NULL, NULL, "a=b", 50, 604800000, 0, NULL, true, "" },
		{ "p", "envdsn", "200", NULL, "envdsn", 200, 604800000, 0, NULL, true, "" },
		{ "p --pg-dsn flag --flush-interval-ms=300", "envdsn", "200", NULL, "flag", 300, 604800000, 0, NULL,
		  true, "" },
		{ "p migrate --pg-dsn a extra", NULL, NULL, NULL, "a", 1000, 604800000, 0, NULL, false,
		  "migrate extra" },
		{ "p --pg-dsn a --verbose --retention 0", NULL, NULL, NULL, "a", 1000, 0, 1, NULL, false, "" },
		{ "p --pg-dsn a --verbose=false --retention=12h", NULL, NULL, NULL, "a", 1000, 43200000, 0, NULL, false,
		  "" },
		{ "p --pg-dsn a --writers x --writers y,z", NULL, NULL, NULL, "a", 1000, 604800000, 0, "x,y,z", false,
		  "" },
		{ "p --pg-dsn a", NULL, NULL, "e1,e2", "a", 1000, 604800000, 0, "e1,e2", false, "" },
		{ "p --pg-dsn a --writers f", NULL, NULL, "e1,e2", "a", 1000, 604800000, 0, "f", false, "" },
		{ "p --pg-dsn a -- --writers", NULL, NULL, NULL, "a", 1000, 604800000, 0, NULL, false, "--writers" },
		{ "p --pg-dsn a - tail", NULL, NULL, NULL, "a", 1000, 604800000, 0, NULL, false, "- tail" },
		{ "p --pg-dsn a", NULL, "", NULL, "a", 1000, 604800000, 0, NULL, false, "" },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		st_opt o[O_N];
		char buf[256], *argv[MAXARGS], joined[256] = "";
		int argc, first = -1;

		env_clear();
		if (cases[i].env_dsn)
			setenv("STUDIO_PG_DSN", cases[i].env_dsn, 1);
		if (cases[i].env_ival)
			setenv("STUDIO_FLUSH_INTERVAL_MS", cases[i].env_ival, 1);
		if (cases[i].env_writers)
			setenv("STUDIO_WRITERS", cases[i].env_writers, 1);
		opts_init(o);
		argc = mkargv(buf, sizeof(buf), cases[i].line, argv);
		{
			char line[512];
			bool help = true;

			ST_CHECK(st_config_parse(o, O_N, argc, argv, &first, &help, line, sizeof(line)) == ST_OK);
			ST_CHECK(!help);
		}
		for (int k = first; k < argc; k++) {
			if (k > first)
				strcat(joined, " ");
			strcat(joined, argv[k]);
		}
		fprintf(stderr, "  case %zu: %s\n", i, cases[i].line);
		ST_CHECK_STR(o[O_DSN].sval, cases[i].dsn);
		ST_CHECK_EQ_U64(o[O_IVAL].ival, cases[i].ival);
		ST_CHECK(o[O_IVAL].set == cases[i].ival_set);
		ST_CHECK_EQ_U64(o[O_RET].ival, cases[i].ret);
		ST_CHECK_EQ_U64(o[O_VERBOSE].ival, cases[i].verbose);
		if (cases[i].writers)
			ST_CHECK_STR(o[O_WRITERS].sval, cases[i].writers);
		else
			ST_CHECK(o[O_WRITERS].sval == NULL && !o[O_WRITERS].set);
		ST_CHECK_STR(joined, cases[i].positionals);
	}
	env_clear();
}

/* Runs a parse in a child; returns its exit status (or -1) and its stderr/stdout in out. */
static int
run_child(const char *line, const char *env_ival, bool capture_stdout, char *out, size_t cap)
{
	int fds[2], status = 0;
	pid_t pid;
	ssize_t r;
	size_t got = 0;

	ST_ASSERT(pipe(fds) == 0);
	fflush(stdout);
	fflush(stderr);
	if ((pid = fork()) == 0) {
		st_opt o[O_N];
		char buf[256], *argv[MAXARGS];
		int argc = 0, devnull = open("/dev/null", O_WRONLY);

		close(fds[0]);
		dup2(fds[1], capture_stdout ? 1 : 2);
		dup2(devnull, capture_stdout ? 2 : 1);
		env_clear();
		if (env_ival)
			setenv("STUDIO_FLUSH_INTERVAL_MS", env_ival, 1);
		opts_init(o);
		argc = mkargv(buf, sizeof(buf), line, argv);
		st_config_parse_or_exit(o, O_N, argc, argv, "prog", "prog --pg-dsn DSN [options]", NULL);
		_exit(77); /* parse returned: not an exit path */
	}
	close(fds[1]);
	while (got + 1 < cap && (r = read(fds[0], out + got, cap - 1 - got)) > 0)
		got += (size_t)r;
	out[got] = '\0';
	close(fds[0]);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status);
}

static void
t_exit2(void)
{
	static const struct {
		const char *line, *env_ival, *needle;
	} cases[] = {
		{ "p", NULL, "prog: --pg-dsn (or STUDIO_PG_DSN) is required" },
		{ "p --pg-dsn a --nope 1", NULL, "unknown option \"--nope\"" },
		{ "p --pg-dsn a -x", NULL, "unknown option \"-x\"" },
		{ "p --pg-dsn a --flush-interval-ms", NULL, "--flush-interval-ms needs a value" },
		{ "p --pg-dsn a --flush-interval-ms abc", NULL,
		  "prog: --flush-interval-ms abc: must be an integer in 10..60000\n" },
		{ "p --pg-dsn a --flush-interval-ms 5", NULL,
		  "prog: --flush-interval-ms 5: must be an integer in 10..60000\n" },
		{ "p --pg-dsn a --flush-interval-ms 99999999999999999999", NULL,
		  "prog: --flush-interval-ms 99999999999999999999: must be an integer in 10..60000\n" },
		{ "p --pg-dsn a", "70000", "prog: STUDIO_FLUSH_INTERVAL_MS 70000: must be an integer in 10..60000\n" },
		{ "p --pg-dsn a --retention 10", NULL,
		  "prog: --retention 10: must be a duration in 0..36500d (0, 250ms" },
		{ "p --pg-dsn a --retention 36501d", NULL,
		  "prog: --retention 36501d: must be a duration in 0..36500d" },
		{ "p --pg-dsn a --verbose=maybe", NULL, "prog: --verbose maybe: must be true, false, 1 or 0\n" },
		{ "p --pg-dsn=", NULL, "is required" },
		{ "p --pg-dsn a --lock-key 7", NULL, "prog: --lock-key 7: must be 1..100 and not 7\n" },
		{ "p --pg-dsn a --lock-key 0", NULL, "prog: --lock-key 0: must be 1..100 and not 7\n" },
		{ "p --pg-dsn a --lock-key=", NULL, "prog: --lock-key \"\": must be 1..100 and not 7\n" },
		{ "p --pg-dsn=x\001y --lock-key=1\ty", NULL,
		  "prog: --lock-key \"1\\x09y\": must be 1..100 and not 7\n" },
		/* secret: the check's reason, never the value */
		{ "p --pg-dsn=password=s3cret_bad", NULL, "prog: --pg-dsn: holds \"bad\"\n" },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		char out[1024];
		int st = run_child(cases[i].line, cases[i].env_ival, false, out, sizeof(out));
		char *nl = strchr(out, '\n');

		fprintf(stderr, "  case %zu: %s -> %d %s", i, cases[i].line, st, out);
		ST_CHECK(st == 2);
		ST_CHECK(strncmp(out, "prog: ", 6) == 0);
		ST_CHECK(strstr(out, cases[i].needle) != NULL);
		ST_CHECK(nl != NULL && nl[1] == '\0'); /* exactly one line */
		ST_CHECK(strstr(out, "s3cret") == NULL);
	}
}

/*
 * The parse itself never exits: it returns ST_EINVAL and the line.  A
 * unique prefix of a name, which getopt_long would take, is refused.
 */
static void
t_refused_in_process(void)
{
	static const struct {
		const char *line, *want;
	} cases[] = {
		{ "p --pg-dsn a --ret 1d", "unknown option \"--ret\" (see --help; did you mean --retention?)" },
		{ "p --pg-d=a", "unknown option \"--pg-d\" (see --help; did you mean --pg-dsn?)" },
		{ "p --pg-dsn a --nope=3", "unknown option \"--nope\" (see --help)" },
		{ "p --pg-dsn a --retention", "--retention needs a value" },
		{ "p --pg-dsn a --verbose=maybe", "--verbose maybe: must be true, false, 1 or 0" },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		st_opt o[O_N];
		char buf[256], *argv[MAXARGS], line[512];
		int argc, first = -1;
		bool help = true;
		st_err rv;

		env_clear();
		opts_init(o);
		argc = mkargv(buf, sizeof(buf), cases[i].line, argv);
		rv = st_config_parse(o, O_N, argc, argv, &first, &help, line, sizeof(line));
		fprintf(stderr, "  case %zu: %s -> %s \"%s\"\n", i, cases[i].line, st_err_str(rv), line);
		ST_CHECK(rv == ST_EINVAL);
		ST_CHECK(!help);
		ST_CHECK_STR(line, cases[i].want);
	}
	{
		st_opt o[O_N];
		char buf[256], *argv[MAXARGS], line[512];
		int argc;
		bool help = false;

		opts_init(o);
		argc = mkargv(buf, sizeof(buf), "p --flush-interval-ms bad -h", argv);
		ST_CHECK(st_config_parse(o, O_N, argc, argv, NULL, &help, line, sizeof(line)) == ST_OK);
		ST_CHECK(help); /* --help wins before anything is checked */
	}
}

static void
t_help(void)
{
	char out[4096];
	int st = run_child("p --pg-dsn a --flush-interval-ms bad --help", NULL, true, out, sizeof(out));

	ST_CHECK(st == 0);
	ST_CHECK(strstr(out, "usage: prog --pg-dsn DSN [options]") != NULL);
	ST_CHECK(strstr(out, "--flush-interval-ms N") != NULL);
	ST_CHECK(strstr(out, "(default: 1000)") != NULL);
	ST_CHECK(strstr(out, "(default: 7d)") != NULL);
	ST_CHECK(strstr(out, "[STUDIO_PG_DSN]") != NULL);
	ST_CHECK(strstr(out, "[STUDIO_FLUSH_INTERVAL_MS]") != NULL);
	ST_CHECK(strstr(out, "--writers") != NULL);
	ST_CHECK(strstr(out, "(default: 1000) (allowed: an integer in 10..60000)") != NULL);
	ST_CHECK(strstr(out, "(default: 5) (allowed: 1..100 and not 7)") != NULL);
}

static void
t_split(void)
{
	static const struct {
		const char *in;
		size_t max, n;
		const char *items[4];
	} cases[] = {
		{ "a,b,c", 10, 3, { "a", "b", "c" } },
		{ "a,,b,", 10, 2, { "a", "b" } },
		{ " a , b ", 10, 2, { "a", "b" } },
		{ "", 10, 0, { NULL } },
		{ ",,,", 10, 0, { NULL } },
		{ "a,b,c,d", 2, 2, { "a", "b" } },
		{ "tcp://h:1", 10, 1, { "tcp://h:1" } },
	};

	for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
		char **items = NULL;
		size_t n = st_config_split(cases[i].in, &items, cases[i].max);

		ST_CHECK_EQ_U64(n, cases[i].n);
		for (size_t k = 0; k < n && k < cases[i].n; k++)
			ST_CHECK_STR(items[k], cases[i].items[k]);
		for (size_t k = 0; k < n; k++)
			free(items[k]);
		free(items);
	}
}

int
main(void)
{
	ST_RUN(t_duration);
	ST_RUN(t_parse_ok);
	ST_RUN(t_exit2);
	ST_RUN(t_refused_in_process);
	ST_RUN(t_help);
	ST_RUN(t_split);
	return st_test_done();
}
