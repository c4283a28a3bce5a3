// One subscription of the JavaScript client, driven the same way in Node
// (node_driver.mjs) and in headless Chromium (page.html), reporting what it
// saw to the Python test (test_js_client.py) through `report(obj)`.
//
// cfg: {name, urls, topics, lastEventId, until, format, transport,
//       tokenUrl, withCredentials, observeMs, connectTimeoutMs,
//       throwOnce (onItem throws once, on its n-th call), throwAlways
//       (onOpen and onOutcome throw after reporting)}
// host: {report(obj), target(): Promise<number|null>, fetch}
//
// It runs until the subscription ends by itself (complete, failure) or the
// client's lastEventId reaches the target the test announces (then close()).
// After an end by itself it watches `observeMs` more and reports how many
// connections the client made: the proof that it did not reconnect.
export async function runScenario(mod, cfg, host) {
  let batch = [];
  const flush = () => {
    if (batch.length) host.report({ name: cfg.name, ev: "items", ids: batch });
    batch = [];
  };
  let calls = 0;
  const boom = (what) => {
    if (cfg.throwAlways) throw new Error(`${what} throws (test)`);
  };
  const opts = {
    url: cfg.urls,
    connectTimeoutMs: cfg.connectTimeoutMs,
    topics: cfg.topics,
    lastEventId: cfg.lastEventId ?? null,
    until: cfg.until ?? undefined,
    format: cfg.format,
    transport: cfg.transport || "auto",
    withCredentials: !!cfg.withCredentials,
    backoff: { baseMs: 200, capMs: 2000 },
    onItem: (i) => {
      if (++calls === cfg.throwOnce) throw new Error(`onItem throws once, at ${i.id} (test)`);
      batch.push(Number(i.id));
    },
    onError: (e, info) => host.report({ name: cfg.name, ev: "error", callback: info.callback, error: String(e) }),
    onResync: (id, reason) => {
      flush();
      host.report({ name: cfg.name, ev: "resync", id, reason });
    },
    onOpen: (o) => {
      host.report({ name: cfg.name, ev: "open", url: o.url, lastEventId: o.lastEventId });
      boom("onOpen");
    },
    onOutcome: (o) => {
      flush();
      host.report({ name: cfg.name, ev: "outcome", kind: o.kind, reason: o.reason ?? null,
        status: o.status ?? null, title: (o.problem && o.problem.title) || null,
        detail: (o.problem && o.problem.detail) || null, error: o.error ?? null });
      boom("onOutcome");
    },
  };
  if (cfg.tokenUrl) {
    opts.token = async () => {
      const r = await host.fetch(cfg.tokenUrl, { cache: "no-store" });
      return r.text();
    };
  }
  const s = mod.subscribe(opts);
  // lastEventId as it moves (the stream position shows here before any item).
  let told = s.lastEventId;
  const ticker = setInterval(() => {
    flush();
    if (s.lastEventId !== told) {
      told = s.lastEventId;
      host.report({ name: cfg.name, ev: "last", id: told, state: s.state });
    }
  }, 100);
  let why = null;
  const reached = (async () => {
    while (why === null) {
      await new Promise((r) => setTimeout(r, 100));
      const t = await host.target().catch(() => null);
      if (t !== null && s.lastEventId !== null && Number(s.lastEventId) >= t) return "target";
    }
    return null;
  })();
  const ended = s.done.then((o) => o.kind);
  why = await Promise.race([ended, reached]);
  if (why === "target") s.close();
  flush();
  if (why !== "target" && cfg.observeMs) {
    // A bounded observation window: the only way to see that nothing happens.
    await new Promise((r) => setTimeout(r, cfg.observeMs));
  }
  clearInterval(ticker);
  host.report({ name: cfg.name, ev: "end", why, lastEventId: s.lastEventId, state: s.state,
    stats: s.stats, outcome: s.outcome ? s.outcome.kind : null });
  return why;
}
