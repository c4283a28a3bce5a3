// How long to wait before the next connection.  Pure functions of the
// attempt count and a random number in [0, 1), so tests pass their own.
//
// Why "equal jitter" (half fixed, half random) and not full jitter: full
// jitter may draw a delay near zero several times in a row, which is the
// tight loop a client must never fall into; half of the exponential step is
// always waited, and the other half spreads a crowd of clients that lost the
// same edge at the same moment.

export const BACKOFF_DEFAULTS = Object.freeze({ baseMs: 500, capMs: 30000 });

// The smallest wait after a server's `reconnect`, whatever its retry_ms says:
// a retry_ms of 0 must not become a loop.
export const RECONNECT_FLOOR_MS = 100;

// The longest wait a `reconnect` envelope can ask for: a broken or hostile
// hint (retry_ms of a day) must not park a client for good.  The edge's own
// hints stay far below it (a drain spreads over its grace, 25 s by default).
export const RECONNECT_CAP_MS = 120000;

// attempt 1 is the first retry after a failed or cut connection.
export function backoffDelay(attempt, random, baseMs = BACKOFF_DEFAULTS.baseMs, capMs = BACKOFF_DEFAULTS.capMs) {
  const n = Math.max(1, Math.min(attempt, 30));
  const step = Math.min(capMs, baseMs * 2 ** (n - 1));
  return Math.round(step / 2 + random * (step / 2));
}

// The wait asked for by a `reconnect` envelope: retry_ms spread by +-25 %
// (the edge already spreads its hints when it drains; this spreads clients
// that were told the same number), never below RECONNECT_FLOOR_MS, never
// above RECONNECT_CAP_MS.
export function reconnectDelay(retryMs, random) {
  const base = Number.isFinite(retryMs) ? Math.min(Math.max(retryMs, 0), RECONNECT_CAP_MS / 1.25) : 0;
  return Math.max(RECONNECT_FLOOR_MS, Math.round(base * (0.75 + random * 0.5)));
}

// Retry-After: delta-seconds, or an HTTP date.  Returns ms, or null.
export function retryAfterMs(header, nowMs) {
  if (header == null || header === "") return null;
  const s = String(header).trim();
  if (/^\d+$/.test(s)) return Math.min(Number(s), 86400) * 1000;
  const t = Date.parse(s);
  if (Number.isNaN(t)) return null;
  return Math.max(0, Math.min(t - nowMs, 86400000));
}
