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

/** How one connection ended (`closed`: the application called close() or aborted its signal). */
export type Outcome =
  | { kind: "reconnect"; reason: string; retryMs: number }
  | { kind: "complete" }
  | { kind: "failure"; status: number; problem: Problem }
  | { kind: "refused"; status: number; problem: Problem; retryAfterMs: number | null; retryNow?: boolean }
  | { kind: "cut"; error: string; cause?: unknown }
  /** onItem or onResync threw or rejected: the item (or resync) was not delivered and comes again on the next connection. */
  | { kind: "callback"; callback: "onItem" | "onResync"; id: string | null; error: string; cause: unknown }
  | { kind: "closed" };

export type Format = "sse" | "ndjson" | "json-seq";

export interface StreamOptions {
  /** The stream endpoint (`https://edge.example/v1/stream`), or several tried in turn on each reconnection. */
  url: string | string[];
  /** 1 to 64 topics. */
  topics?: string[];
  /** One topic (instead of `topics`). */
  topic?: string;
  /** Resume after this id (the edge replays what came after it): a decimal string, a bigint, or a safe integer. */
  lastEventId?: string | bigint | number | null;
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
  /** A connection without response headers this long is cut (default 10000; 0: never). */
  connectTimeoutMs?: number;
  /**
   * A connection silent this long is taken as cut; 0: never.  fetch: no byte (default 45000, three edge
   * heartbeats); EventSource: no event (default 300000: it hides heartbeats).
   */
  idleTimeoutMs?: number;
  /** The longest frame accepted, in characters (default 20 Mi); a longer one is a failure. */
  maxFrameChars?: number;
  /**
   * Items in order, one at a time: the next one waits until this one returned or its promise settled.
   * `lastEventId` moves to the item's id only then; a throw or a rejection ends the connection (outcome
   * `callback`) and the item comes again on the next one, after the back-off.
   */
  onItem?: (item: StreamItem) => void | Promise<void>;
  /** The edge cannot replay what came after your last id: refetch your state, then the stream goes on from `id` (same rule as onItem). */
  onResync?: (id: string | null, reason: string) => void | Promise<void>;
  /** A connection was accepted (status 200). */
  onOpen?: (info: { url: string; lastEventId: string | null }) => void;
  /** Every connection's end, whatever it was. */
  onOutcome?: (outcome: Outcome) => void;
  /** The stream reached its `until`: the subscription is over. */
  onComplete?: () => void;
  /** The edge refused for good (a problem document): the subscription is over. */
  onFailure?: (problem: Problem, status: number) => void;
  /** A callback (or the token function) threw or rejected; default: console.error.  Nothing stops for it. */
  onError?: (error: unknown, info: { callback: string }) => void;
  /** Aborting it is close(). */
  signal?: AbortSignal;
  /** For tests: a random source in [0, 1), a fetch and an EventSource. */
  random?: () => number;
  fetch?: typeof fetch;
  EventSource?: unknown;
}

export declare class StudioStream {
  constructor(options: StreamOptions);
  /** The id of the newest item or resync delivered, or the stream position; sent on every reconnection. */
  readonly lastEventId: string | null;
  /** How the last connection ended (null before the first one ends; `closed` after close()). */
  readonly outcome: Outcome | null;
  readonly state: "connecting" | "open" | "waiting" | "closed";
  readonly stats: {
    readonly connects: number;
    readonly items: number;
    readonly resyncs: number;
    readonly duplicatesDropped: number;
    readonly callbackErrors: number;
  };
  /** Settles when the subscription ends: complete, failure, or close(). */
  readonly done: Promise<Outcome>;
  /** Ends the subscription: no more callbacks, no reconnection. */
  close(): void;
}

export declare function subscribe(options: StreamOptions): StudioStream;

export declare class FrameTooLarge extends Error {}
export declare class BadFrame extends Error {}
export interface FrameParser {
  push(text: string): Array<{ kind: "envelope"; value: { type: string; [k: string]: unknown } } | { kind: "beat"; id?: string }>;
}
export declare function parserCreate(format: Format, maxFrameChars: number): FrameParser;
export declare function backoffDelay(attempt: number, random: number, baseMs?: number, capMs?: number): number;
export declare function reconnectDelay(retryMs: number, random: number): number;
export declare function retryAfterMs(header: string | null, nowMs: number): number | null;
