// Types of studio-stream-client (src/index.js).

/** One event of a topic, in seq order.  `data` is absent for a change signal. */
export interface StreamItem {
  id: string;
  topic: string;
  about: string[];
  data?: unknown;
}

/** An RFC 9457 problem document as the edge sends it. */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  [member: string]: unknown;
}

/** How one connection ended. */
export type Outcome =
  | { kind: "reconnect"; reason: string; retryMs: number }
  | { kind: "complete" }
  | { kind: "failure"; status: number; problem: Problem }
  | { kind: "refused"; status: number; problem: Problem; retryAfterMs: number | null; retryNow?: boolean }
  | { kind: "cut"; error: string }
  | { kind: "closed" };

export type Format = "sse" | "ndjson" | "json-seq";

export interface StreamOptions {
  /** The stream endpoint (`https://edge.example/v1/stream`), or several tried in turn on each reconnection. */
  url: string | string[];
  /** 1 to 64 topics. */
  topics?: string[];
  /** One topic (instead of `topics`). */
  topic?: string;
  /** Resume after this id (the edge replays what came after it). */
  lastEventId?: string | number | null;
  /** `head` or an id: a bounded stream that ends in `complete`. Sent on every connection. */
  until?: "head" | string | number;
  /** Default: `ndjson` in Node, `sse` in browsers. */
  format?: Format;
  /** `auto` (default): fetch with a stream reader when available, else EventSource. */
  transport?: "auto" | "fetch" | "eventsource";
  /** A JWT, or a function called before every connection (may return a promise). */
  token?: string | null | (() => string | null | Promise<string | null>);
  /** Send the token as `access_token=` (edges started with --auth-query-token) instead of a header. */
  tokenInQuery?: boolean;
  /** Send cookies across origins (fetch credentials "include", EventSource withCredentials). */
  withCredentials?: boolean;
  /** Exponential back-off after a cut or a retryable refusal (default 500 ms doubling up to 30 s). */
  backoff?: { baseMs?: number; capMs?: number };
  /** A connection silent this long is taken as cut (default 45000 = three edge heartbeats; 0: never). */
  idleTimeoutMs?: number;
  /** The longest frame accepted, in characters (default 20 Mi); a longer one is a failure. */
  maxFrameChars?: number;
  /** Items in order.  A returned promise holds reading until it settles (fetch transport). */
  onItem?: (item: StreamItem) => void | Promise<void>;
  /** The edge cannot replay what came after your last id: refetch your state, then the stream goes on from `id`. */
  onResync?: (id: string | null, reason: string) => void | Promise<void>;
  /** A connection was accepted (status 200). */
  onOpen?: (info: { url: string; lastEventId: string | null }) => void;
  /** Every connection's end, whatever it was. */
  onOutcome?: (outcome: Outcome) => void;
  /** The stream reached its `until`: the subscription is over. */
  onComplete?: () => void;
  /** The edge refused for good (a problem document): the subscription is over. */
  onFailure?: (problem: Problem, status: number) => void;
  /** For tests: a random source in [0, 1), a fetch and an EventSource. */
  random?: () => number;
  fetch?: typeof fetch;
  EventSource?: unknown;
}

export declare class StudioStream {
  constructor(options: StreamOptions);
  /** The newest item or resync id seen; sent on every reconnection. */
  readonly lastEventId: string | null;
  /** How the last connection ended (null before the first one ends). */
  readonly outcome: Outcome | null;
  readonly state: "connecting" | "open" | "waiting" | "closed";
  readonly stats: { connects: number; items: number; resyncs: number; duplicatesDropped: number };
  /** Settles when the subscription ends: complete, failure, or close(). */
  readonly done: Promise<Outcome>;
  /** Ends the subscription: no more callbacks, no reconnection. */
  close(): void;
}

export declare function subscribe(options: StreamOptions): StudioStream;

export declare class FrameTooLarge extends Error {}
export declare class BadFrame extends Error {}
export interface FrameParser {
  push(text: string): Array<{ kind: "envelope"; value: { type: string; [k: string]: unknown } } | { kind: "beat" }>;
}
export declare function parserCreate(format: Format, maxFrameChars: number): FrameParser;
export declare function backoffDelay(attempt: number, random: number, baseMs?: number, capMs?: number): number;
export declare function reconnectDelay(retryMs: number, random: number): number;
export declare function retryAfterMs(header: string | null, nowMs: number): number | null;
