#!/usr/bin/env python3
# ctest-labels: nosan deploy
# ctest-timeout: 300
"""The dashboard and the alerts (deploy/grafana, deploy/prometheus) against
the real programs and a real Prometheus (Debian's `prometheus` package).

- promtool checks the rule file and runs its unit tests (every alert firing
  and not firing, deploy/prometheus/alerts_test.yaml); the prod overlay's
  PrometheusRule holds exactly the same groups; every alert has a severity,
  a summary, a description and a runbook that is a heading of
  docs/operations.md.
- A Prometheus of the test's own (its binary run directly as a child, a
  temp config and storage, a free loopback port, scrape and evaluation
  every second) scrapes a writer and an edge while events are published
  and streams are open. Every `expr` of the dashboard, with Grafana's
  variables replaced ($namespace: all, $__rate_interval: 10s), must return
  data from /api/v1/query; every metric a query or an alert names is one
  the programs export; the alert rules loaded are all healthy
  (/api/v1/rules); a few values are what the load makes them (streams open,
  frames delivered, both pods ready, database up), and the retention lag
  rises while a session holds the retention lock and falls back to 0 once
  it lets go.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PROM_DIR = os.path.join(ROOT, "deploy", "prometheus")
ALERTS = os.path.join(PROM_DIR, "alerts.yaml")
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "studio.json")
OPERATIONS = os.path.join(ROOT, "docs", "operations.md")
RATE_INTERVAL = "10s"
DEADLINE_S = 60
RETENTION_LOCK = 7450001 + 1  # the writer's default --lock-key + 1 (docs/writer.md "Retention")
t = h.Tests(needs_pg=False)


def sh(args, timeout=60, **kw):
    return subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, **kw)


def need(cmd):
    path = shutil.which(cmd)
    h.check(path, "%s not found: the test command installs Debian's prometheus package"
            " (scripts/test.sh; by hand: apt-get install prometheus)" % cmd)
    return path


def load_yaml(path):
    import yaml
    with open(path) as f:
        return yaml.safe_load(f)


def github_anchor(heading):
    """The anchor GitHub gives a markdown heading."""
    a = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return a.replace(" ", "-")


def dashboard_exprs():
    """Every target expr of every panel (rows' nested panels too)."""
    with open(DASHBOARD) as f:
        dash = json.load(f)
    out = []

    def walk(panels):
        for p in panels:
            for tgt in p.get("targets", []):
                out.append((p["title"], tgt["expr"]))
            walk(p.get("panels", []))
    walk(dash["panels"])
    return out


def grafana_to_promql(expr):
    return expr.replace('namespace=~"$namespace"', 'namespace=~".*"').replace("$__rate_interval", RATE_INTERVAL)


def metric_names(expr):
    """studio_* names a query reads, histogram suffixes folded to the family."""
    return {re.sub(r"_(bucket|count|sum)$", "", n) for n in re.findall(r"\bstudio_[a-z_]+", expr)}


@t.case
def promtool_checks_and_unit_tests_the_rules():
    promtool = need("promtool")
    p = sh([promtool, "check", "rules", ALERTS])
    h.check(p.returncode == 0, "promtool check rules alerts.yaml:\n%s" % p.stdout.decode())
    p = sh([promtool, "test", "rules", "alerts_test.yaml"], cwd=PROM_DIR)
    h.check(p.returncode == 0, "promtool test rules alerts_test.yaml:\n%s" % p.stdout.decode())
    h.log(p.stdout.decode().strip())
    # every alert is tested firing (exp_alerts non-empty) and not firing (empty) somewhere
    tests = load_yaml(os.path.join(PROM_DIR, "alerts_test.yaml"))["tests"]
    seen = {}
    for tc in tests:
        for a in tc.get("alert_rule_test", []):
            seen.setdefault(a["alertname"], set()).add(bool(a.get("exp_alerts")))
    alerts = [r for g in load_yaml(ALERTS)["groups"] for r in g["rules"] if "alert" in r]
    for r in alerts:
        h.check_eq(seen.get(r["alert"]), {True, False}, "alerts_test.yaml cases of %s (firing, not firing)" % r["alert"])


@t.case
def alerts_have_severity_annotations_and_runbooks():
    with open(OPERATIONS) as f:
        anchors = {github_anchor(m) for m in re.findall(r"^#+ (.*)$", f.read(), re.M)}
    alerts = [r for g in load_yaml(ALERTS)["groups"] for r in g["rules"] if "alert" in r]
    h.check(len(alerts) >= 9, "alerts in alerts.yaml: %d" % len(alerts))
    for r in alerts:
        what = "alert %s" % r["alert"]
        h.check(r.get("labels", {}).get("severity") in ("critical", "warning"), what + " severity: %r" % r.get("labels"))
        ann = r.get("annotations", {})
        for k in ("summary", "description", "runbook"):
            h.check(ann.get(k), what + " has no %s annotation" % k)
        m = re.fullmatch(r"docs/operations\.md#([\w-]+)", ann["runbook"])
        h.check(m and m.group(1) in anchors, what + " runbook %r is no heading of docs/operations.md" % ann["runbook"])
        h.check_eq(m.group(1), r["alert"].lower(), what + " runbook anchor")
    # the prod overlay's PrometheusRule is the same groups, generated
    p = sh([sys.executable, os.path.join(ROOT, "scripts", "prometheusrule.py"), "--check"])
    h.check(p.returncode == 0, "scripts/prometheusrule.py --check: %s" % p.stdout.decode())
    rule = load_yaml(os.path.join(ROOT, "deploy", "k8s", "overlays", "prod", "prometheusrule.yaml"))
    h.check_eq(rule["spec"]["groups"], load_yaml(ALERTS)["groups"], "PrometheusRule groups and alerts.yaml")


class Prometheus:
    """Debian's prometheus binary as a child of the test (not the service)."""

    def __init__(self, env, targets):
        self.port = h.free_port()
        self.base = "http://127.0.0.1:%d" % self.port
        cfg = os.path.join(env.tmp, "prometheus.yml")
        # JSON is YAML: no yaml writer needed for the config
        with open(cfg, "w") as f:
            json.dump({
                "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
                "rule_files": [ALERTS],
                "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [addr]}]}
                                   for job, addr in targets],
            }, f)
        self.proc = h.Proc("prometheus", [
            need("prometheus"), "--config.file=" + cfg, "--storage.tsdb.path=" + os.path.join(env.tmp, "tsdb"),
            "--web.listen-address=127.0.0.1:%d" % self.port, "--log.level=warn"], env.tmp)
        self.proc.ready_url = self.base + "/-/ready"
        env.procs.append(self.proc)
        self.proc.wait_ready(60)

    def api(self, path, **params):
        url = self.base + path + ("?" + urllib.parse.urlencode(params) if params else "")
        status, _, body = h.http_get(url, timeout=10)
        h.check_eq(status, 200, "GET %s: %s" % (url, body[:500]))
        doc = json.loads(body)
        h.check_eq(doc.get("status"), "success", "GET %s: %s" % (url, body[:500]))
        return doc["data"]

    def query(self, q):
        return self.api("/api/v1/query", query=q)["result"]


def scraped_families(url):
    _, _, body = h.http_get(url + "/metrics")
    return set(re.findall(r"^# TYPE (\S+) ", body.decode(), re.M))


@t.case
def every_dashboard_query_returns_data_from_a_real_prometheus():
    need("prometheus")
    if not os.environ.get("STUDIO_TEST_PG_DSN"):
        h.log("STUDIO_TEST_PG_DSN unset: no writer or edge to scrape")
        return
    with h.Env() as env:
        w = env.start_writer(flush_interval_ms=200, retention="1s").wait_ready()
        e = env.start_edge([w], flush_interval_ms=200).wait_ready()
        # Hold the retention lock (locks are per database: this one) so
        # retention deletes nothing while events age past --retention 1s.
        lock = h.PsqlSession(env.dsn)
        lock.execute("SELECT pg_advisory_lock(%d)" % RETENTION_LOCK)
        prom = Prometheus(env, [("writer", w.http), ("edge", e.listen)])
        families = scraped_families(w.http_url) | scraped_families(e.url)

        # the load: two live streams, one resuming from 0 (a replay), and a
        # producer publishing a batch every 0.2 s until the checks are done
        stop = threading.Event()
        published = [0]

        def produce():
            n = 0
            while not stop.is_set():
                h.publish_file(w, [{"topic": "obs/%d" % (i % 2), "data": {"n": n + i}} for i in range(5)])
                n += 5
                published[0] = n
                stop.wait(0.2)
        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        h.wait_until(lambda: published[0] >= 10, 30, "the first events published")
        clients = [h.SseClient(e.url + "/v1/stream?topic=obs/0&topic=obs/1"),
                   h.SseClient(e.url + "/v1/stream?topic=obs/0&last_event_id=0")]
        try:
            for c in clients:
                c.wait_items(5, 30)
            # one stream that ends: an outcome counted
            gone = h.SseClient(e.url + "/v1/stream?topic=obs/1")
            gone.wait_items(1, 30)
            gone.close()

            exprs = dashboard_exprs()
            h.check(len(exprs) >= 20, "dashboard queries: %d" % len(exprs))
            alert_exprs = [r["expr"] for g in load_yaml(ALERTS)["groups"] for r in g["rules"]]
            for title, expr in exprs + [("alerts.yaml", x) for x in alert_exprs]:
                unknown = metric_names(expr) - families
                h.check(not unknown, "%s: %s names metrics the programs do not export: %s (exported: %s)"
                        % (title, expr, sorted(unknown), sorted(families)))

            deadline = time.monotonic() + DEADLINE_S
            for title, expr in exprs:
                q = grafana_to_promql(expr)
                last = []

                def has_data():
                    last[:] = [prom.query(q)]
                    return bool(last[0])
                h.wait_until(has_data, max(1.0, deadline - time.monotonic()), "data for panel %r: %s" % (title, q),
                             interval=0.5, detail=lambda: "last response: %s" % json.dumps(last[:1])[:2000])
            h.log("FIGURE %d dashboard queries returned data" % len(exprs))

            def value(q):
                r = prom.query(q)
                return float(r[0]["value"][1]) if r else None
            checks = [
                ('sum(studio_streams_open)', lambda v: v >= 2, "two streams open"),
                ('sum(rate(studio_frames_delivered_total[%s]))' % RATE_INTERVAL, lambda v: v > 0, "frames delivered"),
                ('sum(rate(studio_writer_events_committed_total[%s]))' % RATE_INTERVAL, lambda v: v > 0,
                 "events committed"),
                ('sum(studio_stream_outcomes_total)', lambda v: v >= 1, "an outcome counted"),
                ('min(studio_ready)', lambda v: v == 1, "writer and edge ready"),
                ('count(studio_ready)', lambda v: v == 2, "studio_ready of both targets"),
                ('min(studio_database_up)', lambda v: v == 1, "database up on both"),
                ('max(studio_writer_retention_lag_seconds)', lambda v: v > 0, "retention lag while the lock is held"),
            ]
            for q, ok, what in checks:
                got = []
                h.wait_until(lambda: got.append(value(q)) or (got[-1] is not None and ok(got[-1])), DEADLINE_S,
                             "%s: %s" % (what, q), interval=0.5, detail=lambda: "values: %s" % got[-5:])
                h.log("FIGURE %s: %s = %s" % (what, q, got[-1]))
            lock.execute("SELECT pg_advisory_unlock(%d)" % RETENTION_LOCK)
            got = []
            h.wait_until(lambda: got.append(value('max(studio_writer_retention_lag_seconds)')) or got[-1] == 0,
                         DEADLINE_S, "the retention lag back to 0 once retention may run", interval=0.5,
                         detail=lambda: "values: %s" % got[-5:])

            expected = {r["alert"] for g in load_yaml(ALERTS)["groups"] for r in g["rules"]}
            last = []

            def rules_healthy():
                rules = [r for g in prom.api("/api/v1/rules")["groups"] for r in g["rules"]]
                last[:] = [(r["name"], r.get("health"), r.get("lastError")) for r in rules]
                return {r["name"] for r in rules} == expected and all(r.get("health") == "ok" for r in rules)
            h.wait_until(rules_healthy, DEADLINE_S, "every alert rule loaded and healthy", interval=0.5,
                         detail=lambda: "rules (name, health, lastError): %s; expected %s" % (last, sorted(expected)))
            firing = [a for a in prom.api("/api/v1/alerts")["alerts"] if a.get("state") == "firing"]
            h.check_eq(firing, [], "alerts firing against a healthy writer and edge")
        finally:
            stop.set()
            producer.join(10)
            for c in clients:
                c.close()
            lock.close()


if __name__ == "__main__":
    t.main()
