// One subscription of the JavaScript client, driven the same way in Node
// (node_driver.mjs) and in headless Chromium (page.html), reporting what it
// saw to the Python test (test_js_client.py) through `report(obj)`.
//
// cfg: {name, urls, topics, lastEventId, until, format, transport,
//       tokenUrl, withCredentials, observeMs}
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
  const opts = {
    url: cfg.urls,
    topics: cfg.topics,
    lastEventId: cfg.lastEventId ?? null,
    until: cfg.until ?? undefined,
    format: cfg.format,
    transport: cfg.transport || "auto",
    withCredentials: !!cfg.withCredentials,
    backoff: { baseMs: 200, capMs: 2000 },
    onItem: (i) => batch.push(Number(i.id)),
    onResync: (id, reason) => {
      flush();
      host.report({ name: cfg.name, ev: "resync", id, reason });
    },
    onOpen: (o) => host.report({ name: cfg.name, ev: "open", url: o.url, lastEventId: o.lastEventId }),
    onOutcome: (o) => {
      flush();
      host.report({ name: cfg.name, ev: "outcome", kind: o.kind, reason: o.reason ?? null,
        status: o.status ?? null, title: (o.problem && o.problem.title) || null, error: o.error ?? null });
    },
  };
  if (cfg.tokenUrl) {
    opts.token = async () => {
      const r = await host.fetch(cfg.tokenUrl, { cache: "no-store" });
      return r.text();
    };
  }
  const s = mod.subscribe(opts);
  const ticker = setInterval(flush, 100);
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
