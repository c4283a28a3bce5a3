"""studioctl exit codes (docs/api.md "studioctl"), with a real writer and database.

0 done; 1 a refused request: an event the writer would refuse (bad topic,
data not JSON, unknown member, too many `about`, too large), whether
studioctl finds it itself or the writer answers `invalid`, and an
unreachable writer; 2 bad usage: wrong flags, a missing or unreadable file,
a line that is not JSON at all.  Every refused or bad case must store
nothing: the rows are counted after each, and a good publish at the end
(which returns only after its commit, and flushes are in arrival order)
proves nothing refused was stored late either.

An unknown outcome (a writer that accepted the request and flushes after
--timeout-ms) exits 1 with one line naming the --key-base to rerun with;
the rerun as advised stores nothing twice, for one event and for a file.
"""
import json
import os
import re

import harness as h
from harness import check, check_eq

t = h.Tests()


def rows(env):
    return int(h.psql_one(env.dsn, "SELECT count(*) FROM broker_event"))


def expect(env, code, args, what, input=None, stored=0):
    before = rows(env)
    p = h.studioctl(*args, input=input, timeout=60)
    err = p.stderr.decode(errors="replace")
    check_eq(p.returncode, code, "studioctl exit status for %s (stderr %r)" % (what, err[-300:]))
    if code != 0:
        lines = err.splitlines()
        check_eq(len(lines), 1, "%s: one line on stderr: %r" % (what, err[-500:]))
        check(lines[0].startswith("studioctl: "), "%s: the line names the program: %r" % (what, lines[0]))
    check_eq(rows(env) - before, stored, "events stored by %s" % what)
    h.log("  exit %d: %s%s" % (code, what, (": " + err.strip()[:160]) if err else ""))


def ndjson(env, name, lines):
    path = os.path.join(env.tmp, name)
    with open(path, "w") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    return path


@t.case
def exit_codes_and_nothing_stored():
    with h.Env() as env:
        w = env.start_writer().wait_ready()
        url = w.ingest
        pub = ["publish", "--writer", url]
        good = 0

        # 0: stored
        expect(env, 0, pub + ["--topic", "ok", "--data", '{"a":1}'], "a good event", stored=1)
        good += 1

        # 1: events the writer would refuse, found by studioctl before sending
        for args, what in [
            (["--topic", "a b"], "topic with a space"),
            (["--topic", "t" * 201], "topic of 201 bytes"),
            (["--topic", "caf\u00e9"], "topic not ASCII"),
            (["--topic", ""], "empty topic"),
            (["--topic", "ok", "--data", "{"], "--data not JSON"),
            (["--topic", "ok", "--data", "1 2"], "--data two JSON values"),
            (["--topic", "ok", "--about", ",".join("a%d" % i for i in range(65))], "65 about entries"),
            (["--topic", "ok", "--about", "b" * 201], "about entry of 201 bytes"),
            (["--topic", "ok", "--key", "k" * 201], "key of 201 bytes"),
        ]:
            expect(env, 1, pub + args, what)

        big = '"' + "x" * (256 * 1024) + '"'  # one byte over 256 KiB of data text
        for lines, what in [
            ([{"topic": "ok"}, {"topic": "a b"}], "file: bad topic on line 2"),
            ([{"topic": "ok"}, {"topic": "ok", "colour": "red"}], "file: unknown member"),
            ([{"topic": "ok", "about": ["a%d" % i for i in range(65)]}], "file: 65 about entries"),
            ([{"topic": "ok"}, '{"topic":"ok","data":%s}' % big], "file: data over 256 KiB"),
            ([{"topic": 7}], "file: topic not a string"),
            (["[1,2]"], "file: a JSON line that is not an object"),
            ([{"topic": "ok"}, '{"topic":"ok","about":[%s]}' % ",".join(["1"] * 400000)],
             "file: JSON with more values than any event"),
            (['{"topic":"ok","data":"%s"}' % ("y" * (1024 * 1024 + 10))], "file: a line over 1 MiB"),
        ]:
            expect(env, 1, pub + ["--file", ndjson(env, "bad.ndjson", lines)], what)
        # the same through stdin
        expect(env, 1, pub + ["--file", "-"], "stdin: bad topic", input=b'{"topic":"ok"}\n{"topic":"a b"}\n')

        # 1: the writer is not there (after --timeout-ms)
        expect(env, 1, ["publish", "--writer", "tcp://127.0.0.1:%d" % h.free_port(), "--topic", "ok",
                        "--timeout-ms", "300"], "no writer")

        # 2: bad usage or input that is not JSON at all
        for args, what in [
            (["--topic", "ok", "--nope"], "unknown flag"),
            (["--topic", "ok", "--file", os.path.join(env.tmp, "none.ndjson")], "--topic and --file"),
            (["--file", os.path.join(env.tmp, "none.ndjson")], "missing file"),
            (["--file", env.tmp], "unreadable file (a directory)"),
            (["--file", ndjson(env, "notjson.ndjson", [{"topic": "ok"}, "not json"])], "a line not JSON at all"),
            (["--file", ndjson(env, "trunc.ndjson", ['{"topic":"ok"'])], "a truncated JSON line"),
            (["--topic", "ok", "--timeout-ms", "0"], "--timeout-ms 0"),
        ]:
            expect(env, 2, pub + args, what)
        for args, what in [
            (["publish", "--topic", "ok"], "publish without --writer"),
            (["publish", "--writer", "tcp://127.0.0.1", "--topic", "ok"], "--writer without a port"),
            (["publish", "--writer", "garbage", "--topic", "a b"], "bad --writer wins over a bad event"),
            ([], "no command"),
            (["frobnicate"], "unknown command"),
        ]:
            expect(env, 2, args, what)

        # a good batch goes through, and everything stored is exactly the good events
        expect(env, 0, pub + ["--file", ndjson(env, "good.ndjson", [{"topic": "ok"}, {"topic": "ok2", "data": [1]}])],
               "a good file", stored=2)
        good += 2
        check_eq(rows(env), good, "rows stored in all: only the good events")


@t.case
def a_refusal_answered_by_the_writer_exits_1():
    # studioctl's own checks are the writer's, so no event reaches the writer's
    # `invalid`; the writer-side refusal path is the same code for every
    # code: a draining writer answers `unavailable`.
    with h.Env() as env:
        w = env.start_writer().wait_ready()
        expect(env, 0, ["drain", "--control", w.control], "drain the writer")
        before = rows(env)
        p = h.studioctl("publish", "--writer", w.ingest, "--topic", "ok", "--timeout-ms", "5000")
        err = p.stderr.decode(errors="replace")
        check_eq(p.returncode, 1, "exit status of a publish the writer refuses (%r)" % err)
        check("refused: unavailable" in err, "the writer's answer is shown: %r" % err)
        check_eq(rows(env), before, "events stored by a refused publish")


@t.case
def unknown_outcome_rerun_as_advised_stores_once():
    with h.Env() as env:
        # Flushes every 5 s: a 1 s --timeout-ms ends before the writer answers.
        w = env.start_writer(flush_interval_ms=5000).wait_ready()
        for what, args in [("one event", ["--topic", "rerun.one", "--data", '{"n":1}']),
                           ("a file", ["--file", ndjson(env, "rerun.ndjson",
                                                        [{"topic": "rerun.file", "data": {"i": i}} for i in range(3)]
                                                        + [{"topic": "rerun.file", "key": "own-key"}])])]:
            topic = "rerun.one" if what == "one event" else "rerun.file"
            want = 1 if what == "one event" else 4
            p = h.studioctl("publish", "--writer", w.ingest, "--timeout-ms", "1000", *args)
            err = p.stderr.decode(errors="replace")
            check_eq(p.returncode, 1, "%s: exit of a publish whose outcome is unknown (%r)" % (what, err))
            check_eq(len(err.splitlines()), 1, "%s: one line on stderr: %r" % (what, err))
            m = re.search(r"outcome unknown after 1000 ms .*run the same command again with --key-base (\S+),", err)
            check(m is not None, "%s: the line says how to rerun: %r" % (what, err))
            h.wait_until(lambda: int(h.psql_one(env.dsn, "SELECT count(*) FROM broker_event WHERE topic = '%s'"
                                                % topic)) == want, 60,
                         "%s: the first run's events committed by the slow flush" % what)
            p = h.studioctl("publish", "--writer", w.ingest, "--timeout-ms", "30000", "--key-base", m.group(1), *args)
            check_eq(p.returncode, 0, "%s: the rerun as advised (%r)" % (what, p.stderr.decode(errors="replace")))
            seqs = [int(x) for x in p.stdout.decode().split()]
            stored = h.psql(env.dsn, "SELECT seq FROM broker_event WHERE topic = '%s' ORDER BY seq" % topic)
            check_eq(sorted(seqs), [int(r[0]) for r in stored],
                     "%s: rows stored once, and the rerun printed their first seqs" % what)
            h.log("  %s: key base %s, seqs %s" % (what, m.group(1), seqs))


if __name__ == "__main__":
    t.main()
