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
//     when it is longer);
//   - marks an item delivered (lastEventId) only once onItem has returned,
//     or its promise resolved: a callback that throws or rejects ends the
//     connection (outcome `callback`) and the item comes again on the next
//     one, after the back-off: at least once, never lost;
//   - keeps the stream position the edge sends first on a stream opened
//     without a last id, so a cut before the first item loses nothing;
//   - catches every callback's error (reported to onError, else
//     console.error): `done` always settles and reconnection never stops.
//
// Transport: fetch + a stream reader when the platform has them (headers such
// as Authorization can be sent), else EventSource (cookies via
// withCredentials, the last id as ?last_event_id=).  One connection at a
// time; one state machine: connecting -> open -> (waiting -> connecting)* ->
// closed.
//
// Time limits: a connection has connectTimeoutMs (default 10 s) to get its
// response headers (a stopped edge, a black-holed address), then
// idleTimeoutMs without a byte (fetch: heartbeats count) or without an
// event (EventSource, which hides the heartbeat comments).

import { BadFrame, FrameTooLarge, parserCreate } from "./parse.js";
import { BACKOFF_DEFAULTS, backoffDelay, reconnectDelay, retryAfterMs } from "./backoff.js";

// Defaults of the time limits (ms).  The fetch path sees every byte, the
// edge's heartbeats among them (every 15 s): three missed is a dead
// connection.  EventSource dispatches no heartbeat (an SSE comment) and no
// stream position, only events: its idle limit must let a quiet topic be.
const CONNECT_TIMEOUT_MS = 10000;
const IDLE_TIMEOUT_MS = 45000;
const IDLE_TIMEOUT_ES_MS = 300000;
const DECIMAL_ID = /^[0-9]{1,20}$/;

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

function errText(e) {
  return String(e && e.message ? e.message : e);
}

// The caller's lastEventId: a decimal string, a bigint, or a Number that is a
// safe integer (a larger one has already lost its last digits).
function idOption(v) {
  if (v == null) return null;
  if (typeof v === "bigint" && v >= 0n) return v.toString();
  if (typeof v === "number" && Number.isSafeInteger(v) && v >= 0) return String(v);
  if (typeof v === "string" && DECIMAL_ID.test(v)) return v;
  throw new TypeError("lastEventId: a decimal id string, a bigint, or a safe integer (ids above 2^53 as strings)");
}

// Ids are decimal seqs (int64): kept as strings, compared as BigInt, never
// as float (a Number loses precision above 2^53).
function idAfter(a, b) {
  if (b === null) return true;
  try {
    return BigInt(a) > BigInt(b);
  } catch {
    return true; // not a decimal id: never drop what we cannot compare
  }
}

async function bodyBounded(res, limit) {
  // Not every fetch gives a body reader (a HEAD answer, some polyfills).
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
  // Everything is private (#): the typed `readonly` state is read-only at run
  // time too, through the getters below.
  #o; // the caller's options, read only
  #urls;
  #topics;
  #format;
  #transport;
  #random;
  #baseMs;
  #capMs;
  #idleMs;
  #connectMs;
  #maxFrame;
  #lastEventId;
  #outcome = null;
  #state = "connecting";
  #fails = 0; // connections in a row that delivered nothing
  #authRetried = false; // one immediate retry with a fresh token after a 401
  #next = 0; // index into #urls of the next connection
  #timer = null;
  #abort = null; // the open fetch's AbortController
  #esEnd = null; // ends the open EventSource connection
  #closed = false;
  #untilBound = null; // the bound until: "head" resolved to at the first connection (Studio-Until), fetch only
  #delivered = false; // the current connection delivered an item, resync, position or heartbeat
  #resolveDone;
  #signal = null;
  #onAbort = null;
  #stats;
  #done;

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
    this.#o = o;
    this.#urls = urls.slice();
    this.#topics = topics.slice();
    this.#format = format;
    this.#transport = transport;
    this.#random = o.random || Math.random;
    this.#baseMs = (o.backoff && o.backoff.baseMs) || BACKOFF_DEFAULTS.baseMs;
    this.#capMs = (o.backoff && o.backoff.capMs) || BACKOFF_DEFAULTS.capMs;
    this.#idleMs = o.idleTimeoutMs; // undefined: the transport's default
    this.#connectMs = o.connectTimeoutMs === undefined ? CONNECT_TIMEOUT_MS : o.connectTimeoutMs;
    this.#maxFrame = o.maxFrameChars || 20 * 1024 * 1024;
    this.#lastEventId = idOption(o.lastEventId);
    this.#stats = { connects: 0, items: 0, resyncs: 0, duplicatesDropped: 0, callbackErrors: 0 };
    this.#done = new Promise((resolve) => {
      this.#resolveDone = resolve;
    });
    if (o.signal != null) {
      this.#signal = o.signal;
      if (o.signal.aborted) {
        this.close();
        return;
      }
      this.#onAbort = () => this.close();
      o.signal.addEventListener("abort", this.#onAbort, { once: true });
    }
    // Connect on the next turn, so that code after `subscribe()` runs first.
    this.#schedule(0);
  }

  /** The id of the newest item, resync or stream position delivered; sent on every reconnection. */
  get lastEventId() {
    return this.#lastEventId;
  }

  /** How the last connection ended, or {kind: "closed"} after close(). */
  get outcome() {
    return this.#outcome;
  }

  /** connecting | open | waiting | closed */
  get state() {
    return this.#state;
  }

  /** Counters: connects, items, resyncs, duplicatesDropped, callbackErrors. */
  get stats() {
    return this.#stats;
  }

  /** Settles when the subscription ends (complete, failure, close()); never rejects. */
  get done() {
    return this.#done;
  }

  /** Ends the subscription for good: no more callbacks, no reconnection. */
  close() {
    if (this.#closed) return;
    this.#closed = true;
    this.#state = "closed";
    this.#outcome = { kind: "closed" };
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    if (this.#abort) this.#abort.abort();
    if (this.#esEnd) this.#esEnd({ kind: "closed" });
    this.#finish({ kind: "closed" });
  }

  #finish(out) {
    if (this.#signal && this.#onAbort) this.#signal.removeEventListener("abort", this.#onAbort);
    this.#onAbort = null;
    this.#resolveDone(out);
  }

  // An application callback's error: reported, never thrown on (it would
  // end Node with status 1, or stop the browser's reconnections for good).
  #report(error, callback) {
    this.#stats.callbackErrors++;
    try {
      if (typeof this.#o.onError === "function") {
        this.#o.onError(error, { callback });
        return;
      }
    } catch (e) {
      error = e; // onError itself threw: fall back to the console
    }
    try {
      console.error(`studio-stream-client: ${callback} threw`, error);
    } catch {
      // no console: nothing left to tell
    }
  }

  // A notification callback (onOpen, onOutcome, onComplete, onFailure): its
  // error is reported and changes nothing.
  #notify(name, ...args) {
    const f = this.#o[name];
    if (typeof f !== "function") return;
    try {
      const r = f(...args);
      if (r != null && typeof r.then === "function") r.then(undefined, (e) => this.#report(e, name));
    } catch (e) {
      this.#report(e, name);
    }
  }

  #schedule(ms) {
    this.#state = ms > 0 ? "waiting" : "connecting";
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.#connect();
    }, ms);
  }

  #useFetch() {
    if (this.#transport === "fetch") return true;
    if (this.#transport === "eventsource") return false;
    return fetchStreaming() || typeof (this.#o.EventSource || globalThis.EventSource) !== "function";
  }

  async #connect() {
    if (this.#closed) return;
    this.#state = "connecting";
    const base = this.#urls[this.#next % this.#urls.length];
    this.#stats.connects++;
    this.#delivered = false;
    let out;
    try {
      out = this.#useFetch() ? await this.#runFetch(base) : await this.#runEventSource(base);
    } catch (e) {
      out = { kind: "cut", error: errText(e), cause: e };
    }
    try {
      this.#settle(out);
    } catch (e) {
      // A bug of ours: never leave `done` pending for it.
      this.#closed = true;
      this.#state = "closed";
      this.#finish({ kind: "failure", status: 0, problem: { title: errText(e) } });
    }
  }

  #url(base, forEventSource, token) {
    const here = typeof location !== "undefined" ? location.href : undefined;
    const u = new URL(base, here);
    u.searchParams.delete("topic");
    for (const t of this.#topics) u.searchParams.append("topic", t);
    // until=head is resolved by the edge at the first connection (Studio-Until):
    // later connections send that bound, so a cut never moves it forward.
    const until = this.#untilBound ?? this.#o.until;
    if (until != null) u.searchParams.set("until", String(until));
    if (this.#format !== "sse") u.searchParams.set("format", this.#format);
    if (forEventSource && this.#lastEventId !== null) u.searchParams.set("last_event_id", this.#lastEventId);
    if (token && this.#o.tokenInQuery) u.searchParams.set("access_token", token);
    return u.toString();
  }

  async #token() {
    const t = this.#o.token;
    let v;
    try {
      v = typeof t === "function" ? await t() : t;
    } catch (e) {
      this.#report(e, "token");
      throw e;
    }
    return v == null || v === "" ? null : String(v);
  }

  // A stream position (the first frame of a stream opened without a last
  // id): the client's last id from now on.
  #position(id) {
    this.#delivered = true;
    if (typeof id === "string" && DECIMAL_ID.test(id) && idAfter(id, this.#lastEventId)) this.#lastEventId = id;
  }

  // One envelope: callbacks, then the outcome if it ends the connection.
  // An item or resync counts as delivered (lastEventId, stats) only once its
  // callback returned or its promise resolved; a throw or a rejection ends
  // the connection with outcome `callback`, so the next connection asks
  // again from the last id delivered.
  async #envelope(env) {
    const o = this.#o;
    switch (env.type) {
      case "item": {
        const id = String(env.id);
        if (!idAfter(id, this.#lastEventId)) {
          this.#stats.duplicatesDropped++;
          return null;
        }
        if (typeof o.onItem === "function") {
          try {
            await o.onItem({ id, topic: env.topic, about: env.about || [], data: env.data });
          } catch (e) {
            this.#report(e, "onItem");
            return { kind: "callback", callback: "onItem", id, error: errText(e), cause: e };
          }
        }
        // Handed over: delivered, even if the callback closed the subscription.
        if (idAfter(id, this.#lastEventId)) this.#lastEventId = id;
        this.#stats.items++;
        this.#delivered = true;
        return this.#closed ? { kind: "closed" } : null;
      }
      case "resync": {
        const id = env.id == null ? null : String(env.id);
        if (typeof o.onResync === "function") {
          try {
            await o.onResync(id, env.reason);
          } catch (e) {
            this.#report(e, "onResync");
            return { kind: "callback", callback: "onResync", id, error: errText(e), cause: e };
          }
        }
        if (id !== null && idAfter(id, this.#lastEventId)) this.#lastEventId = id;
        this.#stats.resyncs++;
        this.#delivered = true;
        return this.#closed ? { kind: "closed" } : null;
      }
      case "heartbeat":
        if (env.id != null) this.#position(String(env.id));
        this.#delivered = true;
        return null;
      case "reconnect":
        return { kind: "reconnect", reason: env.reason, retryMs: env.retry_ms };
      case "complete":
        return { kind: "complete" };
      case "failure": {
        const problem = env.problem && typeof env.problem === "object" ? env.problem : {};
        return { kind: "failure", status: problem.status || 0, problem };
      }
      default:
        return null; // a newer edge's envelope: ignored, never fatal
    }
  }

  // What a non-200 answer means.
  #refusal(status, problem, retryAfter) {
    const p = problem || { status, title: `HTTP ${status}` };
    if (status === 401 && typeof this.#o.token === "function" && !this.#authRetried) {
      // The token may have expired between the provider's answer and the
      // request: ask once more, at once; a second 401 is a failure.
      this.#authRetried = true;
      return { kind: "refused", status, problem: p, retryAfterMs: null, retryNow: true };
    }
    if (RETRYABLE_STATUS.has(status)) {
      return { kind: "refused", status, problem: p, retryAfterMs: retryAfterMs(retryAfter, Date.now()) };
    }
    return { kind: "failure", status, problem: p };
  }

  // A non-200 answer's problem document, read within the caller's deadline.
  async #problemOf(res) {
    try {
      const v = JSON.parse(await bodyBounded(res, PROBLEM_MAX_BYTES));
      return v && typeof v === "object" ? v : null;
    } catch {
      return null; // a proxy's page, or nothing: the status says enough
    }
  }

  async #runFetch(base) {
    const ac = new AbortController();
    this.#abort = ac;
    // Until the headers are in (the token provider's answer included): a
    // stopped edge or a black hole must not hold the client in connecting.
    let expired = false;
    const headersTimer = this.#connectMs
      ? setTimeout(() => {
          expired = true;
          ac.abort();
        }, this.#connectMs)
      : null;
    const noHeaders = (e) => ({ kind: "cut", error: `no response headers within ${this.#connectMs} ms`, cause: e });
    let res;
    try {
      const token = await this.#token();
      if (this.#closed) return { kind: "closed" };
      if (expired) return noHeaders(null);
      const headers = { Accept: ACCEPT[this.#format] };
      if (this.#lastEventId !== null) headers["Last-Event-ID"] = this.#lastEventId;
      if (token !== null && !this.#o.tokenInQuery) headers.Authorization = `Bearer ${token}`;
      const fetchFn = this.#o.fetch || globalThis.fetch;
      res = await fetchFn(this.#url(base, false, token), {
        headers,
        signal: ac.signal,
        credentials: this.#o.withCredentials ? "include" : "same-origin",
        cache: "no-store",
      });
      if (res.status !== 200) {
        const problem = await this.#problemOf(res);
        if (expired) return noHeaders(null);
        return this.#refusal(res.status, problem, res.headers.get("retry-after"));
      }
    } catch (e) {
      if (this.#closed) return { kind: "closed" };
      if (expired) return noHeaders(e);
      return { kind: "cut", error: errText(e), cause: e };
    } finally {
      if (headersTimer !== null) clearTimeout(headersTimer);
      if (res === undefined || res.status !== 200) this.#abort = null;
    }
    this.#state = "open";
    this.#authRetried = false;
    const bound = res.headers.get("studio-until");
    if (this.#o.until === "head" && this.#untilBound === null && bound !== null && /^[0-9]{1,20}$/.test(bound))
      this.#untilBound = bound;
    this.#notify("onOpen", { url: base, lastEventId: this.#lastEventId });
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    const parser = parserCreate(this.#format, this.#maxFrame);
    const idleMs = this.#idleMs === undefined ? IDLE_TIMEOUT_MS : this.#idleMs;
    let idle = null;
    let idleFired = false;
    const disarm = () => {
      if (idle !== null) clearTimeout(idle);
      idle = null;
    };
    // Armed while waiting for bytes only: a slow callback is not a silent edge.
    const arm = () => {
      disarm();
      if (!idleMs) return;
      idle = setTimeout(() => {
        idleFired = true;
        ac.abort();
      }, idleMs);
    };
    arm();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        disarm();
        for (const ev of parser.push(decoder.decode(value, { stream: true }))) {
          if (ev.kind === "beat") {
            if (ev.id !== undefined) this.#position(ev.id);
            this.#delivered = true;
            continue;
          }
          const out = await this.#envelope(ev.value);
          if (this.#closed) return { kind: "closed" };
          if (out) return out;
        }
        arm();
      }
      return { kind: "cut", error: "the stream ended without reconnect, complete or failure" };
    } catch (e) {
      if (this.#closed) return { kind: "closed" };
      if (e instanceof FrameTooLarge) return { kind: "failure", status: 0, problem: { title: e.message } };
      if (idleFired) return { kind: "cut", error: `nothing received for ${idleMs} ms`, cause: e };
      return { kind: "cut", error: errText(e), cause: e };
    } finally {
      disarm();
      ac.abort(); // the server closes after a terminal envelope; we do not wait for it
      reader.cancel().catch(() => {});
      this.#abort = null;
    }
  }

  // EventSource: cookies only, no back-pressure (events come as they come),
  // so they are queued here and handed to the callbacks one at a time, in
  // order, each after the previous one's promise settled.
  async #runEventSource(base) {
    const token = await this.#token();
    if (this.#closed) return { kind: "closed" };
    const ES = this.#o.EventSource || globalThis.EventSource;
    const url = this.#url(base, true, token);
    const idleMs = this.#idleMs === undefined ? IDLE_TIMEOUT_ES_MS : this.#idleMs;
    return new Promise((resolve) => {
      const es = new ES(url, { withCredentials: !!this.#o.withCredentials });
      let opened = false;
      let finished = false;
      let dispatched = 0; // events EventSource dispatched on this connection
      let selfRetry = false; // EventSource reconnects by itself (see onerror)
      let chain = Promise.resolve();
      let timer = null;
      const clear = () => {
        if (timer !== null) clearTimeout(timer);
        timer = null;
      };
      const end = (out) => {
        if (finished) return;
        finished = true;
        clear();
        this.#esEnd = null;
        es.close(); // before EventSource reconnects by itself
        // After the callback running now (queued ones are dropped): the next
        // connection starts from the id it delivers, never beside it.
        resolve(chain.then(() => out, () => out));
      };
      const waitHeaders = () => {
        clear();
        if (this.#connectMs) {
          timer = setTimeout(() => end({ kind: "cut", error: `no response headers within ${this.#connectMs} ms` }),
            this.#connectMs);
        }
      };
      const waitEvent = () => {
        clear();
        if (idleMs) timer = setTimeout(() => end({ kind: "cut", error: `no event for ${idleMs} ms` }), idleMs);
      };
      this.#esEnd = end;
      waitHeaders();
      es.onopen = () => {
        if (finished) return;
        opened = true;
        waitEvent();
        this.#state = "open";
        this.#authRetried = false;
        this.#notify("onOpen", { url: base, lastEventId: this.#lastEventId });
      };
      const onData = (e) => {
        if (finished) return;
        dispatched++;
        waitEvent();
        let env;
        try {
          env = JSON.parse(e.data);
        } catch (err) {
          chain = chain.then(() => end({ kind: "cut", error: new BadFrame(String(e.data)).message, cause: err }));
          return;
        }
        if (env === null || typeof env !== "object") return;
        const esId = typeof e.lastEventId === "string" ? e.lastEventId : "";
        chain = chain.then(async () => {
          if (finished) return;
          if (esId !== "" && env.type !== "item" && env.type !== "resync") {
            // EventSource's last event id: the stream position it kept
            // (or the last item's id, which is ours already).
            this.#position(esId);
          }
          const out = await this.#envelope(env);
          if (out) end(out);
        });
      };
      es.onmessage = onData;
      for (const t of ["resync", "heartbeat", "reconnect", "complete", "failure"]) es.addEventListener(t, onData);
      es.onerror = () => {
        if (finished) return;
        const retrying = es.readyState !== 2; // CONNECTING: EventSource reconnects by itself
        if (opened && retrying && dispatched === 0 && this.#lastEventId === null) {
          // Cut before its first event, with no id of ours: only this
          // EventSource knows the stream position the edge sent ("id: P",
          // which it does not dispatch), and it sends it as Last-Event-ID
          // when it reconnects by itself.  Let it, for as long as the idle
          // limit: a new EventSource would start from "now" and lose what
          // was published in between.
          opened = false;
          selfRetry = true;
          this.#state = "connecting";
          this.#stats.connects++;
          this.#outcome = { kind: "cut", error: "cut before the first event; EventSource resumes from the stream position" };
          this.#notify("onOutcome", this.#outcome);
          waitEvent();
          return;
        }
        if (opened) {
          // What was dispatched before the cut is delivered first; the
          // EventSource must not reconnect by itself meanwhile.
          es.close();
          clear();
          chain = chain.then(() => end({ kind: "cut", error: "the stream ended without reconnect, complete or failure" }));
          return;
        }
        if (selfRetry && retrying) return; // another of its attempts failed; it tries again
        // EventSource hides the status of a refusal: ask with the same GET.
        finished = true;
        clear();
        this.#esEnd = null;
        es.close();
        this.#probe(url).then(resolve, (e) => resolve({ kind: "cut", error: errText(e), cause: e }));
      };
    });
  }

  // The answer EventSource hid: the same GET (a HEAD may answer 200 where the
  // GET is refused), read up to its problem document, within the headers
  // limit.  200 means the stream itself was fine: a cut.
  async #probe(url) {
    const fetchFn = this.#o.fetch || globalThis.fetch;
    if (typeof fetchFn !== "function") return { kind: "cut", error: "EventSource refused the stream" };
    const ac = new AbortController();
    const timer = this.#connectMs ? setTimeout(() => ac.abort(), this.#connectMs) : null;
    try {
      const res = await fetchFn(url, {
        headers: { Accept: ACCEPT.sse },
        signal: ac.signal,
        credentials: this.#o.withCredentials ? "include" : "same-origin",
        cache: "no-store",
      });
      if (res.status === 200) return { kind: "cut", error: "EventSource error; the stream answers 200" };
      const problem = await this.#problemOf(res);
      return this.#refusal(res.status, problem, res.headers.get("retry-after"));
    } catch (e) {
      return { kind: "cut", error: errText(e), cause: e };
    } finally {
      if (timer !== null) clearTimeout(timer);
      ac.abort();
    }
  }

  // A connection ended: decide whether and when the next one starts.
  #settle(out) {
    if (this.#closed) return;
    if (this.#delivered) this.#fails = 0;
    else this.#fails++;
    this.#outcome = out;
    this.#notify("onOutcome", out);
    if (this.#closed) return; // onOutcome called close()
    if (out.kind === "complete" || out.kind === "failure") {
      this.#closed = true;
      this.#state = "closed";
      if (out.kind === "complete") this.#notify("onComplete");
      else this.#notify("onFailure", out.problem, out.status);
      this.#finish(out);
      return;
    }
    let delay;
    const backoff = (n) => backoffDelay(n, this.#random(), this.#baseMs, this.#capMs);
    if (out.kind === "reconnect") {
      // Honour the server's hint; but a server that keeps sending reconnect
      // before anything else (not ready, overloaded) gets our back-off too.
      delay = reconnectDelay(out.retryMs, this.#random());
      if (this.#fails >= 3) delay = Math.max(delay, backoff(this.#fails - 2));
    } else if (out.kind === "refused" && out.retryNow) {
      delay = reconnectDelay(0, this.#random());
    } else {
      delay = backoff(this.#fails);
      if (out.kind === "refused" && out.retryAfterMs != null) delay = Math.max(delay, out.retryAfterMs);
    }
    this.#next++;
    this.#schedule(delay);
  }
}
