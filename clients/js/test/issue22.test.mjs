// Issue 22 (JavaScript client), one test per defect, each against a scripted
// HTTP server on loopback (the real edge: tests/integration/test_js_client.py).
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { subscribe, reconnectDelay } from "../src/index.js";

const item = (id) => JSON.stringify({ type: "item", id: String(id), topic: "t", about: [], data: { n: String(id) } }) + "\n";
const env = (o) => JSON.stringify(o) + "\n";

// One handler per request, in order; requests after the last get `rest` (or 500).
async function scripted(handlers, rest = null) {
  const seen = [];
  const server = http.createServer((req, res) => {
    seen.push({ method: req.method, url: req.url, lastEventId: req.headers["last-event-id"] ?? null });
    const h = handlers[seen.length - 1] || rest;
    if (!h) {
      res.writeHead(500).end();
      return;
    }
    h(res, req);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${server.address().port}/v1/stream`;
  return { url, seen, close: () => { server.closeAllConnections(); server.close(); } };
}

const ndjson = (res, body, end = true) => {
  res.writeHead(200, { "Content-Type": "application/x-ndjson" });
  res.write(body);
  if (end) res.end();
};

const quiet = () => {}; // onError: the tests look at what was reported themselves
const base = { topics: ["t"], backoff: { baseMs: 10, capMs: 40 }, random: () => 0.5, onError: quiet };

async function until(pred, what, ms = 10000) {
  const t0 = Date.now();
  while (!pred()) {
    if (Date.now() - t0 > ms) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

// 6: the id advances only after the callback; a failing one gets the item again.
for (const how of ["throws", "rejects"]) {
  test(`an onItem that ${how} once gets the item again, from the id before it`, async () => {
    const srv = await scripted([
      (res) => ndjson(res, item(1) + item(2) + item(3), false),
      (res) => ndjson(res, item(2) + item(3) + env({ type: "complete" })),
    ]);
    const calls = [];
    const errors = [];
    let failed = false;
    const s = subscribe({
      ...base, url: srv.url, lastEventId: "0",
      onError: (e, info) => errors.push([info.callback, e.message]),
      onItem: async (i) => {
        calls.push(i.id);
        if (i.id === "2" && !failed) {
          failed = true;
          if (how === "throws") throw new Error("disk full");
          await new Promise((r) => setImmediate(r));
          return Promise.reject(new Error("disk full"));
        }
      },
    });
    const out = await s.done;
    srv.close();
    assert.equal(out.kind, "complete");
    assert.deepEqual(calls, ["1", "2", "2", "3"], "item 2 is handed over again, 3 only after it");
    assert.deepEqual(srv.seen.map((x) => x.lastEventId), ["0", "1"], "the reconnection asks from 1, not 2");
    assert.deepEqual(errors, [["onItem", "disk full"]]);
    assert.equal(s.lastEventId, "3");
    assert.equal(s.stats.items, 3, "items counted once each, when delivered");
  });
}

test("the id is not advanced while onItem's promise is pending", async () => {
  let release;
  const srv = await scripted([(res) => ndjson(res, item(5) + env({ type: "complete" }))]);
  const s = subscribe({ ...base, url: srv.url, onItem: () => new Promise((r) => { release = r; }) });
  await until(() => release !== undefined, "onItem called");
  assert.equal(s.lastEventId, null, "lastEventId while the callback runs");
  release();
  await s.done;
  srv.close();
  assert.equal(s.lastEventId, "5");
});

test("an onResync that throws gets the resync again", async () => {
  const srv = await scripted([
    (res) => ndjson(res, env({ type: "resync", id: "50", reason: "replay_cap" }), false),
    (res) => ndjson(res, env({ type: "resync", id: "60", reason: "replay_cap" }) + env({ type: "complete" })),
  ]);
  const calls = [];
  const s = subscribe({ ...base, url: srv.url, lastEventId: 3,
    onResync: (id) => { calls.push(id); if (calls.length === 1) throw new Error("refetch failed"); } });
  assert.equal((await s.done).kind, "complete");
  srv.close();
  assert.deepEqual(calls, ["50", "60"]);
  assert.deepEqual(srv.seen.map((x) => x.lastEventId), ["3", "3"]);
  assert.equal(s.lastEventId, "60");
});

// 7: callbacks' errors never escape; done always settles.
test("callbacks that throw never stop reconnection and done settles", async () => {
  const srv = await scripted([
    (res) => ndjson(res, item(1)), // cut
    (res) => ndjson(res, env({ type: "reconnect", retry_ms: 0, reason: "draining" })),
    (res) => ndjson(res, item(2) + env({ type: "complete" })),
  ]);
  const errors = [];
  const boom = (name) => () => { throw new Error(name); };
  const s = subscribe({ ...base, url: srv.url, onError: (e, i) => errors.push(i.callback),
    onOpen: boom("onOpen"), onOutcome: boom("onOutcome"), onComplete: boom("onComplete") });
  assert.equal((await s.done).kind, "complete");
  srv.close();
  assert.equal(srv.seen.length, 3, "reconnected after each throw");
  assert.deepEqual(errors, ["onOpen", "onOutcome", "onOpen", "onOutcome", "onOpen", "onOutcome", "onComplete"]);
});

test("an onFailure that throws (and an onError that throws) still settle done", async () => {
  const srv = await scripted([(res) => res.writeHead(400, { "Content-Type": "application/problem+json" })
    .end(JSON.stringify({ status: 400, title: "bad topic" }))]);
  const logged = [];
  const orig = console.error;
  console.error = (...a) => logged.push(a[0]);
  try {
    const s = subscribe({ ...base, url: srv.url, onFailure: () => { throw new Error("f"); },
      onError: () => { throw new Error("e"); } });
    const out = await s.done;
    assert.equal(out.kind, "failure");
    assert.equal(out.problem.title, "bad topic");
  } finally {
    console.error = orig;
    srv.close();
  }
  assert.deepEqual(logged, ["studio-stream-client: onFailure threw"]);
});

// 8: the stream position is the last id of a fresh subscription.
test("a fresh subscription keeps the stream position (ndjson) and resumes from it", async () => {
  const srv = await scripted([
    (res) => ndjson(res, env({ type: "heartbeat", id: "40" })), // cut before the first item
    (res) => ndjson(res, item(41) + env({ type: "complete" })),
  ]);
  const got = [];
  const s = subscribe({ ...base, url: srv.url, onItem: (i) => got.push(i.id) });
  await s.done;
  srv.close();
  assert.deepEqual(srv.seen.map((x) => x.lastEventId), [null, "40"]);
  assert.deepEqual(got, ["41"]);
});

test("a fresh subscription keeps the stream position (sse over fetch: id without data)", async () => {
  const sse = (body, end) => (res) => {
    res.writeHead(200, { "Content-Type": "text/event-stream" });
    res.write(body);
    if (end) res.end();
  };
  const srv = await scripted([
    sse("id: 9007199254740993\n\n: heartbeat\n\n", true),
    sse('id: 9007199254740995\ndata: {"type":"item","id":"9007199254740995","topic":"t","about":[]}\n\n' +
      'event: complete\ndata: {"type":"complete"}\n\n', true),
  ]);
  const s = subscribe({ ...base, url: srv.url, format: "sse", transport: "fetch" });
  await s.done;
  srv.close();
  assert.deepEqual(srv.seen.map((x) => x.lastEventId), [null, "9007199254740993"], "ids above 2^53 exactly");
  assert.equal(s.lastEventId, "9007199254740995");
});

// 9: deadlines.
test("no response headers within connectTimeoutMs: the connection is cut and retried", async () => {
  const held = [];
  const srv = await scripted([(res) => held.push(res), (res) => ndjson(res, env({ type: "complete" }))]);
  const outs = [];
  const s = subscribe({ ...base, url: srv.url, connectTimeoutMs: 100, onOutcome: (o) => outs.push(o) });
  const t0 = Date.now();
  await until(() => outs.length > 0, "the first outcome");
  const took = Date.now() - t0;
  assert.equal(outs[0].kind, "cut");
  assert.match(outs[0].error, /no response headers within 100 ms/);
  assert.ok(took < 5000, `left connecting after ${took} ms`);
  assert.equal((await s.done).kind, "complete");
  srv.close();
});

// A minimal EventSource for Node: opens when the answer is 200, dispatches
// `data` events, reports errors as the WHATWG one does (readyState 2 when the
// answer is not a stream).
function fakeEventSource() {
  const made = [];
  class FakeES {
    constructor(url) {
      this.url = url;
      this.readyState = 0;
      this.lastId = "";
      this.listeners = {};
      made.push(this);
      this.ac = new AbortController();
      fetch(url, { headers: { Accept: "text/event-stream" }, signal: this.ac.signal }).then(async (res) => {
        if (res.status !== 200) {
          this.readyState = 2;
          res.body?.cancel().catch(() => {});
          this.onerror?.({});
          return;
        }
        this.readyState = 1;
        this.onopen?.({});
        const dec = new TextDecoder();
        let buf = "";
        try {
          for await (const chunk of res.body) {
            buf += dec.decode(chunk, { stream: true });
            let k;
            while ((k = buf.indexOf("\n\n")) >= 0) {
              const block = buf.slice(0, k);
              buf = buf.slice(k + 2);
              const idLine = block.split("\n").find((l) => l.startsWith("id: "));
              if (idLine) this.lastId = idLine.slice(4);
              const data = block.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
              const ev = (block.split("\n").find((l) => l.startsWith("event: ")) || "event: message").slice(7);
              if (!data) continue;
              const me = { data, lastEventId: this.lastId };
              if (ev === "message") this.onmessage?.(me);
              else (this.listeners[ev] || []).forEach((f) => f(me));
            }
          }
        } catch {
          // closed by us
        }
        if (this.readyState === 2) return;
        this.readyState = 2;
        this.onerror?.({});
      }, () => {
        this.readyState = 2;
        this.onerror?.({});
      });
    }
    addEventListener(t, f) {
      (this.listeners[t] ||= []).push(f);
    }
    close() {
      this.readyState = 2;
      this.ac.abort();
    }
  }
  return { FakeES, made };
}

test("EventSource path: a 400 (where HEAD would answer 200) reaches onFailure with its problem", async () => {
  const srv = await scripted([], (res, req) => {
    if (req.method === "HEAD") {
      res.writeHead(200, { "Content-Type": "text/event-stream" }).end();
      return;
    }
    res.writeHead(400, { "Content-Type": "application/problem+json" })
      .end(JSON.stringify({ status: 400, title: "Bad Request", detail: "Last-Event-ID is beyond the newest committed event" }));
  });
  const { FakeES } = fakeEventSource();
  const failures = [];
  const s = subscribe({ ...base, url: srv.url, format: "sse", transport: "eventsource", EventSource: FakeES,
    lastEventId: "999999", onFailure: (p, st) => failures.push([st, p.detail]) });
  const out = await s.done;
  srv.close();
  assert.equal(out.kind, "failure");
  assert.deepEqual(failures, [[400, "Last-Event-ID is beyond the newest committed event"]]);
  assert.ok(srv.seen.length <= 3, `requests: ${srv.seen.map((x) => x.method)}`);
});

test("EventSource path: an idle timer cuts a silent connection; callbacks wait in order", async () => {
  const srv = await scripted([
    (res) => {
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      res.write('id: 1\ndata: {"type":"item","id":"1","topic":"t","about":[]}\n\n'); // then silence
    },
    (res) => {
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      res.end('id: 2\ndata: {"type":"item","id":"2","topic":"t","about":[]}\n\nevent: complete\ndata: {"type":"complete"}\n\n');
    },
  ]);
  const { FakeES, made } = fakeEventSource();
  const outs = [];
  const got = [];
  const s = subscribe({ ...base, url: srv.url, format: "sse", transport: "eventsource", EventSource: FakeES,
    idleTimeoutMs: 100, onOutcome: (o) => outs.push(o.kind),
    onItem: async (i) => { await new Promise((r) => setTimeout(r, 5)); got.push(i.id); } });
  assert.equal((await s.done).kind, "complete");
  srv.close();
  assert.deepEqual(outs, ["cut", "complete"]);
  assert.deepEqual(got, ["1", "2"]);
  assert.match(made[1].url, /last_event_id=1/);
});

test("EventSource path: the position it kept comes with a reconnect envelope, and the next connection sends it", async () => {
  const sse = (body) => (res) => {
    res.writeHead(200, { "Content-Type": "text/event-stream" });
    res.end(body);
  };
  const srv = await scripted([
    sse('id: 70\n\nevent: reconnect\ndata: {"type":"reconnect","retry_ms":0,"reason":"draining"}\n\n'),
    sse('id: 71\ndata: {"type":"item","id":"71","topic":"t","about":[]}\n\nevent: complete\ndata: {"type":"complete"}\n\n'),
  ]);
  const { FakeES, made } = fakeEventSource();
  const s = subscribe({ ...base, url: srv.url, format: "sse", transport: "eventsource", EventSource: FakeES });
  assert.equal((await s.done).kind, "complete");
  srv.close();
  assert.doesNotMatch(made[0].url, /last_event_id/);
  assert.match(made[1].url, /last_event_id=70/);
  assert.equal(s.lastEventId, "71");
});

// 10: the smaller ones.
test("state, outcome and lastEventId cannot be written", async () => {
  const srv = await scripted([(res) => ndjson(res, env({ type: "complete" }))]);
  const s = subscribe({ ...base, url: srv.url });
  assert.throws(() => { s.state = "open"; }, TypeError);
  assert.throws(() => { s.lastEventId = "7"; }, TypeError);
  assert.throws(() => { s.outcome = null; }, TypeError);
  await s.done;
  srv.close();
});

test("an AbortSignal ends the subscription", async () => {
  const srv = await scripted([(res) => ndjson(res, item(1), false)]);
  const ac = new AbortController();
  const s = subscribe({ ...base, url: srv.url, signal: ac.signal, onItem: () => ac.abort() });
  assert.deepEqual(await s.done, { kind: "closed" }); // settles at the abort, inside onItem
  srv.close();
  assert.equal(s.state, "closed");
  await new Promise((r) => setImmediate(r)); // onItem has returned
  assert.equal(s.lastEventId, "1", "the item whose onItem returned counts as delivered");
  const pre = new AbortController();
  pre.abort();
  const s2 = subscribe({ ...base, url: srv.url, signal: pre.signal });
  assert.deepEqual(await s2.done, { kind: "closed" });
});

test("ids above 2^53: a Number that lost precision is refused, strings and bigints are exact", () => {
  assert.throws(() => subscribe({ ...base, url: "http://127.0.0.1:9/v1/stream", lastEventId: 2 ** 53 + 2 }), TypeError);
  const a = subscribe({ ...base, url: "http://127.0.0.1:9/v1/stream", lastEventId: 9007199254740993n });
  assert.equal(a.lastEventId, "9007199254740993");
  a.close();
  assert.throws(() => subscribe({ ...base, url: "http://127.0.0.1:9/v1/stream", lastEventId: "12abc" }), TypeError);
});

test("retry_ms has an upper cap", () => {
  assert.ok(reconnectDelay(86400000, 0.999) <= 120000, `${reconnectDelay(86400000, 0.999)}`);
  assert.equal(reconnectDelay(1000, 0.5), 1000);
});

test("a cut keeps the underlying error as its cause", async () => {
  const outs = [];
  const s = subscribe({ ...base, url: "http://127.0.0.1:9/v1/stream", onOutcome: (o) => { outs.push(o); s.close(); } });
  await s.done;
  assert.equal(outs[0].kind, "cut");
  assert.ok(outs[0].cause instanceof Error, `cause: ${outs[0].cause}`);
});
