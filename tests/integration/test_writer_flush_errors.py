"""writer: what a failed flush does (docs/writer.md, "Failed flushes").

- A data error (one request's event breaks a constraint) refuses that request
  alone, `invalid` with the database's reason; the other requests of the same
  flush are stored and answered, and the writer goes on flushing.
- A transient error is retried, but not for ever: past the give-up time the
  writer logs one line and exits 1 (the limit is 12 h; the test hook
  STUDIO_TEST_FLUSH_GIVE_UP_MS shortens it).
- The session settings the flush relies on are pinned against database
  defaults."""
import json
import os
import subprocess
import threading

import harness as h

t = h.Tests()

LOCK_KEY = 4242
SECRET = "s3cret-payload-that-must-stay-out-of-logs"


def stats(w):
    p = h.studioctl("stats", "--control", w.control, check=True)
    return json.loads(p.stdout)


def log_text(proc):
    with open(proc.stderr_path, errors="replace") as f:
        return f.read()


def parallel(w, requests, timeout_ms=20000):
    """Sends every request at once, one thread each; returns the replies (or the error) in order."""
    out = [None] * len(requests)
    go = threading.Barrier(len(requests))

    def one(i):
        go.wait()
        try:
            out[i] = h.request(w, requests[i], timeout_ms=timeout_ms)
        except Exception as e:  # no reply at all: reported by the checks below
            out[i] = {"no reply": str(e)[:200]}

    th = [threading.Thread(target=one, args=(i,)) for i in range(len(requests))]
    for x in th:
        x.start()
    return th, out


@t.case
def data_error_refuses_only_its_request():
    with h.Env() as env:
        env.psql("ALTER TABLE broker_event ADD CONSTRAINT test_no_poison CHECK (topic <> 'poison')")
        w = env.start_writer(flush_interval_ms=200, lock_key=LOCK_KEY).wait_ready()
        # hold the flush lock, so that the requests below wait together for one flush
        locker = subprocess.Popen([h.PSQL, "-X", "-q", "-d", env.dsn, "-c",
                                   "SELECT pg_advisory_lock(%d)" % LOCK_KEY, "-c", "SELECT pg_sleep(60)"],
                                  env=dict(os.environ, PGAPPNAME="test_locker"),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            h.wait_until(lambda: h.psql_one(env.dsn, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                                                     "AND granted AND objid = %d" % LOCK_KEY) == "1",
                         10, "the test session holding the flush lock")
            th0, first = parallel(w, [{"topic": "good", "data": "0"}])
            h.wait_until(lambda: stats(w)["inflight_flush"], 10, "the first flush waiting for the lock")
            good = [{"topic": "good", "data": str(i)} for i in range(1, 6)]
            # the database's DETAIL ("Failing row contains (...)") repeats the row, data included
            poison = [{"topic": "good", "data": "99"}, {"topic": "poison", "data": '"%s"' % SECRET}]
            th, replies = parallel(w, good + [poison])
            h.wait_until(lambda: stats(w)["pending_events"] == len(good) + len(poison), 10,
                         "every request pending behind the first flush")
        finally:
            h.psql(env.admin_dsn, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                  "WHERE application_name = 'test_locker'")
            locker.wait(30)
        for x in th0 + th:
            x.join(60)
        h.check(first[0].get("ok") is True, "the first request: %r" % (first[0],))
        for i, r in enumerate(replies[:-1]):
            h.check(r.get("ok") is True and len(r["seqs"]) == 1, "good request %d: %r" % (i + 1, r))
        bad = replies[-1]
        h.check(bad.get("ok") is False and bad.get("error") == "invalid",
                "the request with the poison event is refused invalid: %r" % (bad,))
        h.check("test_no_poison" in bad.get("detail", ""), "the refusal names the database's reason: %r" % (bad,))
        rows = h.db_events(env.dsn)
        h.check_eq(sorted(r[3] for r in rows), ["0", "1", "2", "3", "4", "5"],
                   "stored data (nothing of the refused request)")
        logs = log_text(w)
        h.check("flushing its requests one at a time" in logs, "the failed flush was split by request")
        failures = h.metric(w.http_url, "studio_writer_flush_failures_total")
        # and the writer goes on: no endless retry of the batch
        r = h.request(w, {"topic": "good", "data": "6"})
        h.check(r.get("ok") is True, "a request after the refusal: %r" % (r,))
        h.check_eq(h.metric(w.http_url, "studio_writer_flush_failures_total"), failures,
                   "flush failures after the refusal")
        h.check_eq(sum(1 for ln in logs.splitlines() if "retrying" in ln and "test_no_poison" in ln), 0,
                   "retries of the data error")
        h.check_eq([ln for ln in logs.splitlines() if SECRET in ln], [],
                   "log lines carrying an event's data (an event may hold personal data)")
        h.log("FIGURE flush_errors split_failures=%s" % failures)
        h.check_eq(w.stop(), 0, "writer exit status")


@t.case
def transient_error_gives_up_after_the_limit():
    with h.Env() as env:
        env.psql("CREATE FUNCTION test_fail() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                 "RAISE EXCEPTION 'test: try again' USING ERRCODE = '40001'; END $$; "
                 "CREATE TRIGGER test_fail BEFORE INSERT ON broker_event FOR EACH ROW "
                 "WHEN (NEW.topic = 'transient') EXECUTE FUNCTION test_fail()")
        w = env.start_writer(flush_interval_ms=100, extra_env={"STUDIO_TEST_FLUSH_GIVE_UP_MS": 3000}).wait_ready()
        th, replies = parallel(w, [{"topic": "transient", "data": "1"}], timeout_ms=15000)
        rc = w.wait_exit(30)
        th[0].join(30)
        logs = log_text(w)
        h.check_eq(rc, 1, "writer exit status once the flush failed for longer than the limit")
        h.check("retrying" in logs and "test: try again" in logs, "the transient error was retried first")
        lines = [ln for ln in logs.splitlines() if "since its first attempt" in ln]
        h.check_eq(len(lines), 1, "one line saying why the writer exits")
        h.check("exiting so that its producers resend" in lines[0] and "test: try again" in lines[0],
                "the exit line: %s" % lines[0])
        h.check("ok" not in replies[0] or replies[0].get("ok") is not True, "no success reply: %r" % (replies[0],))
        h.check_eq(h.db_events(env.dsn), [], "nothing stored")


@t.case
def session_settings_pinned():
    with h.Env() as env:
        env.psql("CREATE TABLE test_settings (iso text, ro text, sc text); "
                 "CREATE FUNCTION test_record() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                 "INSERT INTO test_settings VALUES (current_setting('transaction_isolation'), "
                 "current_setting('transaction_read_only'), current_setting('synchronous_commit')); "
                 "RETURN NULL; END $$; "
                 "CREATE TRIGGER test_record AFTER INSERT ON broker_event FOR EACH STATEMENT "
                 "EXECUTE FUNCTION test_record()")
        w = env.start_writer(flush_interval_ms=100).wait_ready()
        h.check(h.request(w, {"topic": "s", "data": "1"}).get("ok") is True, "publish before")
        up = log_text(w).count("flush: connected to the database")
        # database defaults that would break the flush's assumptions
        env.psql("ALTER DATABASE %s SET default_transaction_isolation = 'serializable'; "
                 "ALTER DATABASE %s SET default_transaction_read_only = on; "
                 "ALTER DATABASE %s SET synchronous_commit = off" % ((env.dbname,) * 3))
        env.psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                 "AND application_name = 'broker-writer'")
        h.wait_until(lambda: log_text(w).count("flush: connected to the database") > up, 30,
                     "the writer reconnected (with the new defaults)")
        r = h.request(w, {"topic": "s", "data": "2"}, timeout_ms=15000)
        h.check(r.get("ok") is True, "publish under hostile database defaults: %r" % (r,))
        rows = h.psql(env.dsn, "SELECT iso, ro, sc FROM test_settings")
        h.check_eq(rows[-1], ("read committed", "off", "on"), "settings inside the flush transaction")
        h.check_eq(w.stop(), 0, "writer exit status")


t.main()
