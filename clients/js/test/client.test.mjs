// The client's state machine against a scripted HTTP server on loopback: one
// handler per request, in order.  The real system is exercised by
// tests/integration/test_js_client.py; this file pins each rule alone.
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { subscribe } from "../src/index.js";

const item = (id) => JSON.stringify({ type: "item", id: String(id), topic: "t", about: [], data: { n: id } }) + "\n";
const env = (o) => JSON.stringify(o) + "\n";

export async function scripted(handlers) {
  const seen = [];
  const server = http.createServer((req, res) => {
    seen.push({ url: req.url, lastEventId: req.headers["last-event-id"] ?? null,
      auth: req.headers.authorization ?? null, accept: req.headers.accept });
    const h = handlers[seen.length - 1];
    if (!h) {
      res.writeHead(500).end();
      return;
    }
    h(res);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${server.address().port}/v1/stream`;
  return { url, seen, close: () => { server.closeAllConnections(); server.close(); } };
}

const stream = (res, body, end = true) => {
  res.writeHead(200, { "Content-Type": "application/x-ndjson" });
  res.write(body);
  if (end) res.end();
};

function run(url, extra = {}) {
  const got = { items: [], resyncs: [], outcomes: [], failures: [], completes: 0 };
  const s = subscribe({
    url, topics: ["t"], backoff: { baseMs: 10, capMs: 40 }, random: () => 0.5,
    onItem: (i) => got.items.push(Number(i.id)),
    onResync: (id, reason) => got.resyncs.push([id, reason]),
    onOutcome: (o) => got.outcomes.push(o.kind),
    onComplete: () => got.completes++,
    onFailure: (p, status) => got.failures.push([status, p.title]),
    ...extra,
  });
  return { s, got };
}

test("complete ends the subscription: one connection, no timer left", async () => {
  const srv = await scripted([(res) => stream(res, item(1) + item(2) + env({ type: "complete" }))]);
  const { s, got } = run(srv.url);
  assert.deepEqual(await s.done, { kind: "complete" });
  srv.close();
  assert.deepEqual(got.items, [1, 2]);
  assert.equal(got.completes, 1);
  assert.equal(s.state, "closed");
  assert.equal(s.outcome.kind, "complete");
  assert.equal(srv.seen.length, 1);
  assert.equal(srv.seen[0].accept, "application/x-ndjson");
  assert.match(srv.seen[0].url, /topic=t&format=ndjson$/);
});

test("a failure envelope and a 400 end the subscription with the problem", async () => {
  const srv = await scripted([(res) => stream(res, item(5) + env({ type: "failure", problem: { status: 500, title: "x" } }))]);
  const a = run(srv.url);
  assert.equal((await a.s.done).kind, "failure");
  assert.deepEqual(a.got.failures, [[500, "x"]]);
  srv.close();
  const srv2 = await scripted([(res) => {
    res.writeHead(400, { "Content-Type": "application/problem+json" });
    res.end(JSON.stringify({ type: "about:blank", title: "bad topic", status: 400 }));
  }]);
  const b = run(srv2.url);
  const out = await b.s.done;
  srv2.close();
  assert.equal(out.kind, "failure");
  assert.deepEqual(b.got.failures, [[400, "bad topic"]]);
  assert.equal(srv2.seen.length, 1, "no second request after a 400");
});

test("a cut stream reconnects with the last id; a reconnect envelope too", async () => {
  const srv = await scripted([
    (res) => stream(res, item(1) + item(2)), // cut: no terminal envelope
    (res) => stream(res, item(3) + env({ type: "reconnect", retry_ms: 0, reason: "draining" })),
    (res) => stream(res, item(3) + item(4) + env({ type: "complete" })), // 3 again: dropped
  ]);
  const { s, got } = run(srv.url, { lastEventId: 0 });
  await s.done;
  srv.close();
  assert.deepEqual(srv.seen.map((x) => x.lastEventId), ["0", "2", "3"]);
  assert.deepEqual(got.items, [1, 2, 3, 4]);
  assert.deepEqual(got.outcomes, ["cut", "reconnect", "complete"]);
  assert.equal(s.stats.duplicatesDropped, 1);
  assert.equal(s.lastEventId, "4");
});

test("503 with Retry-After and 502 from a proxy are retried; 429 too", async () => {
  const srv = await scripted([
    (res) => res.writeHead(503, { "Retry-After": "0", "Content-Type": "application/problem+json" })
      .end(JSON.stringify({ status: 503, title: "draining" })),
    (res) => res.writeHead(502, { "Content-Type": "text/html" }).end("<html>bad gateway</html>"),
    (res) => res.writeHead(429, { "Retry-After": "0" }).end(),
    (res) => stream(res, env({ type: "complete" })),
  ]);
  const { s, got } = run(srv.url);
  assert.equal((await s.done).kind, "complete");
  srv.close();
  assert.deepEqual(got.outcomes, ["refused", "refused", "refused", "complete"]);
});

test("resync calls back once, with its id and reason, and the stream goes on", async () => {
  const srv = await scripted([
    (res) => stream(res, env({ type: "resync", id: "50", reason: "replay_cap" }) + item(51) + env({ type: "complete" })),
  ]);
  let refetched = false;
  const { s, got } = run(srv.url, {
    lastEventId: 3,
    onResync: async (id, reason) => {
      got.resyncs.push([id, reason]);
      await new Promise((r) => setImmediate(r));
      refetched = true;
    },
    onItem: (i) => {
      assert.ok(refetched, "items after a resync wait for its callback");
      got.items.push(Number(i.id));
    },
  });
  await s.done;
  srv.close();
  assert.deepEqual(got.resyncs, [["50", "replay_cap"]]);
  assert.deepEqual(got.items, [51]);
});

test("401 asks the token provider once more, then fails", async () => {
  const refuse = (res) => res.writeHead(401, { "WWW-Authenticate": 'Bearer error="invalid_token"' })
    .end(JSON.stringify({ status: 401, title: "Unauthorized" }));
  const srv = await scripted([refuse, refuse]);
  let n = 0;
  const { s, got } = run(srv.url, { token: () => `tok${++n}` });
  assert.equal((await s.done).kind, "failure");
  srv.close();
  assert.deepEqual(srv.seen.map((x) => x.auth), ["Bearer tok1", "Bearer tok2"]);
  assert.deepEqual(got.failures, [[401, "Unauthorized"]]);
});

test("a silent connection is cut after idleTimeoutMs and resumed", async () => {
  const srv = await scripted([
    (res) => stream(res, item(7), false), // then silence
    (res) => stream(res, env({ type: "complete" })),
  ]);
  const { s, got } = run(srv.url, { idleTimeoutMs: 50 });
  await s.done;
  srv.close();
  assert.deepEqual(got.outcomes, ["cut", "complete"]);
  assert.equal(srv.seen[1].lastEventId, "7");
});

test("close() stops a waiting client: no further request", async () => {
  const srv = await scripted([(res) => stream(res, item(1))]);
  const { s } = run(srv.url, { backoff: { baseMs: 60000, capMs: 60000 } });
  while (s.state !== "waiting") await new Promise((r) => setTimeout(r, 5));
  s.close();
  assert.deepEqual(await s.done, { kind: "closed" });
  assert.deepEqual(s.outcome, { kind: "closed" }, "outcome after close()");
  srv.close();
  assert.equal(srv.seen.length, 1);
});

test("until: head is sent once; reconnections send the bound the edge resolved (Studio-Until)", async () => {
  const srv = await scripted([
    (res) => {
      res.writeHead(200, { "Content-Type": "application/x-ndjson", "Studio-Until": "7" });
      res.end(item(5)); // cut before the bound
    },
    (res) => stream(res, item(6) + item(7) + env({ type: "complete" })),
  ]);
  const { s, got } = run(srv.url, { lastEventId: 4, until: "head" });
  await s.done;
  srv.close();
  const untils = srv.seen.map((x) => new URL(x.url, "http://h").searchParams.get("until"));
  assert.deepEqual(untils, ["head", "7"]);
  assert.deepEqual(got.items, [5, 6, 7]);
});
