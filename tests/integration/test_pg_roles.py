#!/usr/bin/env python3
"""Three database roles, the SQL of docs/deploy.md "Database roles" (issue 26 item 5).

Edges only read, yet shared the writers' DSN and role, which can run DDL.
The documented SQL (extracted from docs/deploy.md, so the doc cannot
drift) makes studio_migrate (owns the schema: DDL), studio_writer (writes
events, no DDL) and studio_edge (reads broker_event, nothing else).  Then:
- migrate as studio_migrate; a writer as studio_writer (its start-up check
  of the schema issues no DDL), an edge as studio_edge: an event published
  reaches a stream, a resume replays it from the table, retention runs;
- studio_writer cannot create or drop a table; studio_edge cannot insert,
  delete or create; each refusal is PostgreSQL's "permission denied".
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
from harness import check, check_eq, log  # noqa: E402
import sse_client as sc  # noqa: E402

t = h.Tests()
HERE = os.path.dirname(os.path.abspath(__file__))
DOC = os.path.normpath(os.path.join(HERE, "..", "..", "docs", "deploy.md"))


def doc_sql(marker):
    """The ```sql block that follows the line containing marker in docs/deploy.md."""
    text = open(DOC).read()
    i = text.find(marker)
    check(i >= 0, "docs/deploy.md has no %r" % marker)
    m = re.search(r"```sql\n(.*?)```", text[i:], re.S)
    check(m is not None, "no ```sql block after %r in docs/deploy.md" % marker)
    return m.group(1)


def as_role(env, role):
    return re.sub(r"user=\S+", "user=%s" % role, env.dsn)


def refused(dsn, sql):
    """psql's answer to sql as the DSN's role: (exit status, output)."""
    import subprocess
    args = ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn]
    for stmt in sql.split(";"):   # each its own transaction (a SET of a default applies to the next)
        args += ["-c", stmt.strip()]
    p = subprocess.run(args,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    return p.returncode, p.stdout.decode(errors="replace").strip()


def drop_roles(admin_dsn, names):
    for n in names:
        h.psql(admin_dsn, "DROP ROLE IF EXISTS %s" % n)


@t.case
def three_roles_from_the_docs():
    names = []
    try:
        roles_case(names)
    finally:
        # The test database is gone: nothing of the roles' is left in it.
        drop_roles(os.environ["STUDIO_TEST_PG_DSN"], names)


def roles_case(names):
    with h.Env(migrate=False) as env:
        suffix = env.dbname[-12:].replace("-", "_")
        roles = {r: "%s_%s" % (r, suffix) for r in ("studio_migrate", "studio_writer", "studio_edge")}
        names.extend(roles.values())

        def named(sql):
            for r, n in roles.items():
                sql = re.sub(r"\b%s\b" % r, n, sql)
            return sql.replace("DATABASE studio", "DATABASE %s" % env.dbname)
        h.psql(env.admin_dsn, named(doc_sql("Before the first migration")))
        h.psql(env.dsn, named(doc_sql("In the database, as an administrator")))
        rc, out = refused(as_role(env, roles["studio_migrate"]), "SELECT 1")
        check_eq(rc, 0, "studio_migrate logs in: %s" % out)
        h.migrate(as_role(env, roles["studio_migrate"]))
        wdsn, edsn = as_role(env, roles["studio_writer"]), as_role(env, roles["studio_edge"])
        w = h.start_writer(wdsn, env=env, flush_interval_ms=100, retention="1h").wait_ready()
        e = h.start_edge(edsn, [w], env=env).wait_ready()
        c = sc.StreamClient(sc.edge_port(e), "/v1/stream?topic=roles.a")
        sc.run_until_open([c])
        seq = h.publish(w, "roles.a", data={"role": "writer"}, key="k-1")
        sc.run_clients([c], 30, until=lambda: seq in c.ids())
        check_eq(c.ids(), [seq], "the live stream's events")
        c.close()
        r = sc.fetch(sc.edge_port(e), "/v1/stream?topic=roles.a&format=ndjson&until=head",
                     headers={"Last-Event-ID": str(seq - 1)}, timeout=30)
        check_eq(r.ids(), [seq], "the replay (a SELECT as studio_edge)")
        check_eq(h.publish(w, "roles.a", data={"role": "writer"}, key="k-1"), seq,
                 "the same key again (the writer reads the table for it)")
        for what, dsn, sql in (("studio_writer creates a table", wdsn, "CREATE TABLE x_w (i int)"),
                               ("studio_writer drops broker_event", wdsn, "DROP TABLE broker_event"),
                               ("studio_edge inserts", edsn,
                                "INSERT INTO broker_event (topic, data) VALUES ('x', '1')"),
                               ("studio_edge deletes", edsn, "DELETE FROM broker_event"),
                               ("studio_edge creates a table", edsn, "CREATE TABLE x_e (i int)"),
                               # Past its read-only default, the privileges still refuse.
                               ("studio_edge inserts, read-only off", edsn, "SET default_transaction_read_only = off;"
                                " INSERT INTO broker_event (topic, data) VALUES ('x', '1')"),
                               ("studio_edge deletes, read-only off", edsn, "SET default_transaction_read_only = off;"
                                " DELETE FROM broker_event")):
            rc, out = refused(dsn, sql)
            log("%s: exit %d: %s" % (what, rc, out[-160:]))
            check(rc != 0 and ("permission denied" in out or "must be owner" in out
                               or ("read-only transaction" in out and "read-only off" not in what)),
                  "%s is refused: exit %d %r" % (what, rc, out[-200:]))
        check_eq(e.stop(), 0, "edge exit status")
        check_eq(w.stop(), 0, "writer exit status")


t.main()
