// A stream client for the edge's GET /v1/stream, for browsers and Node 20.
//
// What it is for: the edge ends every stream with one of three outcomes
// (`reconnect`, `complete`, `failure`), and a client that treats a closed
// connection as the end, or reconnects after `complete` or `failure`, is
// wrong.  A browser's EventSource is that client.  This one:
//   - sends the last id it saw on every new connection (Last-Event-ID), so a
//     drain, an edge's death or a token expiry loses and repeats nothing;
//   - honours `reconnect` with its retry_ms (jittered, never a tight loop);
//   - stops for good on `complete` and on `failure` (after calling back);
//   - hands `resync` to the application (refetch, then the stream goes on);
//   - backs off exponentially after a connection cut without a terminal
//     envelope or a retryable refusal (429, 502, 503, 504; Retry-After wins
//     when it is longer).
//
// Transport: fetch + a stream reader when the platform has them (headers such
// as Authorization can be sent), else EventSource (cookies via
// withCredentials, the last id as ?last_event_id=).  One connection at a
// time; one state machine: connecting -> open -> (waiting -> connecting)* ->
// closed.

import { BadFrame, FrameTooLarge, parserCreate } from "./parse.js";
import { BACKOFF_DEFAULTS, backoffDelay, reconnectDelay, retryAfterMs } from "./backoff.js";

export { BadFrame, FrameTooLarge, parserCreate } from "./parse.js";
export { backoffDelay, reconnectDelay, retryAfterMs } from "./backoff.js";

const ACCEPT = {
  sse: "text/event-stream",
  ndjson: "application/x-ndjson",
  "json-seq": "application/json-seq",
};

// Statuses that mean "not now" rather than "never": the edge's own 429 and
// 503 (with Retry-After), and what a proxy or an ingress answers while edge
// pods restart (502, 504; no problem document of ours).
const RETRYABLE_STATUS = new Set([429, 502, 503, 504]);

// A refused request's body is read up to this many bytes: enough for any
// problem document the edge writes, and a bound against a proxy's error page.
const PROBLEM_MAX_BYTES = 65536;

function runningInNode() {
  return typeof process !== "undefined" && process.versions != null && process.versions.node != null &&
    typeof window === "undefined";
}

function fetchStreaming() {
  return typeof globalThis.fetch === "function" && typeof globalThis.ReadableStream === "function" &&
    typeof globalThis.TextDecoder === "function" && typeof globalThis.AbortController === "function";
}

function thenable(v) {
  return v != null && typeof v.then === "function";
}

// Ids are decimal seqs (int64): compared as BigInt, never as float.
function idAfter(a, b) {
  if (b === null) return true;
  try {
    return BigInt(a) > BigInt(b);
  } catch {
    return true; // not a decimal id: never drop what we cannot compare
  }
}

async function bodyBounded(res, limit) {
  if (!res.body || typeof res.body.getReader !== "function") return "";
  const reader = res.body.getReader();
  const parts = [];
  let n = 0;
  try {
    while (n < limit) {
      const { value, done } = await reader.read();
      if (done) break;
      parts.push(value);
      n += value.length;
    }
  } finally {
    reader.cancel().catch(() => {});
  }
  const all = new Uint8Array(Math.min(n, limit));
  let off = 0;
  for (const p of parts) {
    const take = Math.min(p.length, all.length - off);
    all.set(p.subarray(0, take), off);
    off += take;
  }
  return new TextDecoder().decode(all);
}

export function subscribe(options) {
  return new StudioStream(options);
}

export class StudioStream {
  constructor(options) {
    const o = options || {};
    const urls = Array.isArray(o.url) ? o.url : [o.url];
    if (urls.length === 0 || urls.some((u) => typeof u !== "string" || u === "")) {
      throw new TypeError("url: the stream URL (…/v1/stream), or an array of them tried in turn");
    }
    const topics = Array.isArray(o.topics) ? o.topics : o.topic != null ? [o.topic] : [];
    if (topics.length < 1 || topics.length > 64 || topics.some((t) => typeof t !== "string" || t === "")) {
      throw new TypeError("topics: 1 to 64 non-empty strings");
    }
    const format = o.format || (runningInNode() ? "ndjson" : "sse");
    parserCreate(format, 1); // throws on an unknown format
    const transport = o.transport || "auto";
    if (!["auto", "fetch", "eventsource"].includes(transport)) {
      throw new TypeError("transport: auto, fetch or eventsource");
    }
    if (transport === "eventsource" && format !== "sse") throw new TypeError("EventSource reads only sse");
    this._o = o; // owned by the caller, read only
    this._urls = urls.slice();
    this._topics = topics.slice();
    this._format = format;
    this._transport = transport;
    this._random = o.random || Math.random;
    this._baseMs = (o.backoff && o.backoff.baseMs) || BACKOFF_DEFAULTS.baseMs;
    this._capMs = (o.backoff && o.backoff.capMs) || BACKOFF_DEFAULTS.capMs;
    this._idleMs = o.idleTimeoutMs === undefined ? 45000 : o.idleTimeoutMs;
    this._maxFrame = o.maxFrameChars || 20 * 1024 * 1024;

    /** The id of the newest item or resync seen; sent on every reconnection. */
    this.lastEventId = o.lastEventId == null ? null : String(o.lastEventId);
    /** How the last connection ended: {kind: reconnect|complete|failure|refused|cut|closed, ...}. */
    this.outcome = null;
    /** connecting | open | waiting | closed */
    this.state = "connecting";
    this.stats = { connects: 0, items: 0, resyncs: 0, duplicatesDropped: 0 };

    this._fails = 0; // connections in a row that delivered nothing
    this._authRetried = false; // one immediate retry with a fresh token after a 401
    this._next = 0; // index into _urls of the next connection
    this._timer = null;
    this._abort = null; // the open fetch's AbortController
    this._esEnd = null; // ends the open EventSource connection
    this._closed = false;
    this._delivered = false; // the current connection delivered an item, resync or heartbeat
    this.done = new Promise((resolve) => {
      this._resolveDone = resolve;
    });
    // Connect on the next turn, so that code after `subscribe()` runs first.
    this._schedule(0);
  }

  /** Ends the subscription for good: no more callbacks, no reconnection. */
  close() {
    if (this._closed) return;
    this._closed = true;
    this.state = "closed";
    if (this._timer !== null) clearTimeout(this._timer);
    this._timer = null;
    if (this._abort) this._abort.abort();
    if (this._esEnd) this._esEnd({ kind: "closed" });
    this._resolveDone({ kind: "closed" });
  }

  _schedule(ms) {
    this.state = ms > 0 ? "waiting" : "connecting";
    this._timer = setTimeout(() => {
      this._timer = null;
      this._connect();
    }, ms);
  }

  _useFetch() {
    if (this._transport === "fetch") return true;
    if (this._transport === "eventsource") return false;
    return fetchStreaming() || typeof (this._o.EventSource || globalThis.EventSource) !== "function";
  }

  async _connect() {
    if (this._closed) return;
    this.state = "connecting";
    const base = this._urls[this._next % this._urls.length];
    this.stats.connects++;
    this._delivered = false;
    let out;
    try {
      out = this._useFetch() ? await this._runFetch(base) : await this._runEventSource(base);
    } catch (e) {
      out = { kind: "cut", error: String(e && e.message ? e.message : e) };
    }
    this._settle(out);
  }

  _url(base, forEventSource, token) {
    const here = typeof location !== "undefined" ? location.href : undefined;
    const u = new URL(base, here);
    u.searchParams.delete("topic");
    for (const t of this._topics) u.searchParams.append("topic", t);
    if (this._o.until != null) u.searchParams.set("until", String(this._o.until));
    if (this._format !== "sse") u.searchParams.set("format", this._format);
    if (forEventSource && this.lastEventId !== null) u.searchParams.set("last_event_id", this.lastEventId);
    if (token && this._o.tokenInQuery) u.searchParams.set("access_token", token);
    return u.toString();
  }

  async _token() {
    const t = this._o.token;
    const v = typeof t === "function" ? await t() : t;
    return v == null || v === "" ? null : String(v);
  }

  // One envelope: callbacks, and the outcome if it ends the connection.
  // Returns {out, wait}: `wait` is the promise a callback returned (the fetch
  // path reads on only after it settles: back-pressure for a refetch).
  _envelope(env) {
    const o = this._o;
    let wait = null;
    switch (env.type) {
      case "item": {
        if (!idAfter(env.id, this.lastEventId)) {
          this.stats.duplicatesDropped++;
          return { out: null, wait };
        }
        this.lastEventId = String(env.id);
        this.stats.items++;
        this._delivered = true;
        if (o.onItem) {
          const r = o.onItem({ id: String(env.id), topic: env.topic, about: env.about || [], data: env.data });
          if (thenable(r)) wait = r;
        }
        return { out: null, wait };
      }
      case "resync": {
        if (env.id != null && idAfter(env.id, this.lastEventId)) this.lastEventId = String(env.id);
        this.stats.resyncs++;
        this._delivered = true;
        if (o.onResync) {
          const r = o.onResync(env.id == null ? null : String(env.id), env.reason);
          if (thenable(r)) wait = r;
        }
        return { out: null, wait };
      }
      case "heartbeat":
        this._delivered = true;
        return { out: null, wait };
      case "reconnect":
        return { out: { kind: "reconnect", reason: env.reason, retryMs: env.retry_ms }, wait };
      case "complete":
        return { out: { kind: "complete" }, wait };
      case "failure": {
        const problem = env.problem && typeof env.problem === "object" ? env.problem : {};
        return { out: { kind: "failure", status: problem.status || 0, problem }, wait };
      }
      default:
        return { out: null, wait }; // a newer edge's envelope: ignored, never fatal
    }
  }

  // What a non-200 answer means.
  _refusal(status, problem, retryAfter) {
    const p = problem || { status, title: `HTTP ${status}` };
    if (status === 401 && typeof this._o.token === "function" && !this._authRetried) {
      // The token may have expired between the provider's answer and the
      // request: ask once more, at once; a second 401 is a failure.
      this._authRetried = true;
      return { kind: "refused", status, problem: p, retryAfterMs: null, retryNow: true };
    }
    if (RETRYABLE_STATUS.has(status)) {
      return { kind: "refused", status, problem: p, retryAfterMs: retryAfterMs(retryAfter, Date.now()) };
    }
    return { kind: "failure", status, problem: p };
  }

  async _runFetch(base) {
    const ac = new AbortController();
    this._abort = ac;
    const token = await this._token();
    if (this._closed) return { kind: "closed" };
    const headers = { Accept: ACCEPT[this._format] };
    if (this.lastEventId !== null) headers["Last-Event-ID"] = this.lastEventId;
    if (token !== null && !this._o.tokenInQuery) headers.Authorization = `Bearer ${token}`;
    const fetchFn = this._o.fetch || globalThis.fetch;
    let res;
    try {
      res = await fetchFn(this._url(base, false, token), {
        headers,
        signal: ac.signal,
        credentials: this._o.withCredentials ? "include" : "same-origin",
        cache: "no-store",
      });
    } catch (e) {
      return this._closed ? { kind: "closed" } : { kind: "cut", error: String(e && e.message ? e.message : e) };
    }
    if (res.status !== 200) {
      let problem = null;
      try {
        const text = await bodyBounded(res, PROBLEM_MAX_BYTES);
        const v = JSON.parse(text);
        if (v && typeof v === "object") problem = v;
      } catch {
        problem = null; // a proxy's page, or nothing: the status says enough
      }
      return this._refusal(res.status, problem, res.headers.get("retry-after"));
    }
    this.state = "open";
    this._authRetried = false;
    if (this._o.onOpen) this._o.onOpen({ url: base, lastEventId: this.lastEventId });
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    const parser = parserCreate(this._format, this._maxFrame);
    let idle = null;
    let idleFired = false;
    const arm = () => {
      if (!this._idleMs) return;
      if (idle !== null) clearTimeout(idle);
      idle = setTimeout(() => {
        idleFired = true;
        ac.abort();
      }, this._idleMs);
    };
    arm();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        arm();
        for (const ev of parser.push(decoder.decode(value, { stream: true }))) {
          if (ev.kind === "beat") {
            this._delivered = true;
            continue;
          }
          const { out, wait } = this._envelope(ev.value);
          if (wait) await wait;
          if (this._closed) return { kind: "closed" };
          if (out) return out;
        }
      }
      return { kind: "cut", error: "the stream ended without reconnect, complete or failure" };
    } catch (e) {
      if (this._closed) return { kind: "closed" };
      if (e instanceof FrameTooLarge) return { kind: "failure", status: 0, problem: { title: e.message } };
      if (idleFired) return { kind: "cut", error: `nothing received for ${this._idleMs} ms` };
      if (e instanceof BadFrame) return { kind: "cut", error: e.message };
      return { kind: "cut", error: String(e && e.message ? e.message : e) };
    } finally {
      if (idle !== null) clearTimeout(idle);
      ac.abort(); // the server closes after a terminal envelope; we do not wait for it
      reader.cancel().catch(() => {});
      this._abort = null;
    }
  }

  async _runEventSource(base) {
    const token = await this._token();
    if (this._closed) return { kind: "closed" };
    const ES = this._o.EventSource || globalThis.EventSource;
    const url = this._url(base, true, token);
    return new Promise((resolve) => {
      const es = new ES(url, { withCredentials: !!this._o.withCredentials });
      let opened = false;
      let finished = false;
      const end = (out) => {
        if (finished) return;
        finished = true;
        this._esEnd = null;
        es.close(); // before EventSource reconnects by itself
        resolve(out);
      };
      this._esEnd = end;
      es.onopen = () => {
        opened = true;
        this.state = "open";
        this._authRetried = false;
        if (this._o.onOpen) this._o.onOpen({ url: base, lastEventId: this.lastEventId });
      };
      const onData = (e) => {
        if (finished) return;
        let env;
        try {
          env = JSON.parse(e.data);
        } catch {
          end({ kind: "cut", error: new BadFrame(String(e.data)).message });
          return;
        }
        if (env === null || typeof env !== "object") return;
        const { out } = this._envelope(env); // EventSource cannot wait: no back-pressure here
        if (out) end(out);
      };
      es.onmessage = onData;
      for (const t of ["resync", "heartbeat", "reconnect", "complete", "failure"]) es.addEventListener(t, onData);
      es.onerror = () => {
        if (finished) return;
        if (opened) {
          end({ kind: "cut", error: "the stream ended without reconnect, complete or failure" });
          return;
        }
        // EventSource hides the status of a refusal; ask once with HEAD.
        finished = true;
        this._esEnd = null;
        es.close();
        this._probe(url).then(resolve, (e) => resolve({ kind: "cut", error: String(e) }));
      };
    });
  }

  async _probe(url) {
    const fetchFn = this._o.fetch || globalThis.fetch;
    if (typeof fetchFn !== "function") return { kind: "cut", error: "EventSource refused the stream" };
    let res;
    try {
      res = await fetchFn(url, {
        method: "HEAD",
        credentials: this._o.withCredentials ? "include" : "same-origin",
        cache: "no-store",
      });
    } catch (e) {
      return { kind: "cut", error: String(e && e.message ? e.message : e) };
    }
    if (res.status === 200) return { kind: "cut", error: "EventSource error" };
    return this._refusal(res.status, null, res.headers.get("retry-after"));
  }

  // A connection ended: decide whether and when the next one starts.
  _settle(out) {
    if (this._closed) return;
    if (this._delivered) this._fails = 0;
    else this._fails++;
    this.outcome = out;
    const o = this._o;
    if (o.onOutcome) o.onOutcome(out);
    if (out.kind === "complete" || out.kind === "failure") {
      this._closed = true;
      this.state = "closed";
      if (out.kind === "complete" && o.onComplete) o.onComplete();
      if (out.kind === "failure" && o.onFailure) o.onFailure(out.problem, out.status);
      this._resolveDone(out);
      return;
    }
    let delay;
    const backoff = (n) => backoffDelay(n, this._random(), this._baseMs, this._capMs);
    if (out.kind === "reconnect") {
      // Honour the server's hint; but a server that keeps sending reconnect
      // before anything else (not ready, overloaded) gets our back-off too.
      delay = reconnectDelay(out.retryMs, this._random());
      if (this._fails >= 3) delay = Math.max(delay, backoff(this._fails - 2));
    } else if (out.kind === "refused" && out.retryNow) {
      delay = reconnectDelay(0, this._random());
    } else {
      delay = backoff(this._fails);
      if (out.kind === "refused" && out.retryAfterMs != null) delay = Math.max(delay, out.retryAfterMs);
    }
    this._next++;
    this._schedule(delay);
  }
}
