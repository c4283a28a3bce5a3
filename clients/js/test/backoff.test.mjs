// Waits before a new connection: bounded on both sides for every random draw.
import { test } from "node:test";
import assert from "node:assert/strict";
import { backoffDelay, reconnectDelay, retryAfterMs } from "../src/index.js";

test("back-off: at least half the exponential step, at most the step, capped", () => {
  for (const r of [0, 0.5, 0.999999]) {
    for (let n = 1; n <= 40; n++) {
      const step = Math.min(30000, 500 * 2 ** (Math.min(n, 30) - 1));
      const d = backoffDelay(n, r);
      assert.ok(d >= step / 2 && d <= step, `attempt ${n} random ${r}: ${d} not in [${step / 2}, ${step}]`);
    }
  }
  assert.equal(backoffDelay(0, 0), 250, "attempt 0 counts as the first");
});

test("reconnect: retry_ms +-25 %, never below 100 ms (a retry_ms of 0 is no loop)", () => {
  assert.equal(reconnectDelay(1000, 0), 750);
  assert.equal(reconnectDelay(1000, 0.999999), 1250);
  assert.equal(reconnectDelay(0, 0), 100);
  assert.equal(reconnectDelay(120, 0), 100);
  assert.equal(reconnectDelay(undefined, 0.5), 100);
  assert.equal(reconnectDelay(-5, 0.5), 100);
});

test("Retry-After: seconds or an HTTP date", () => {
  assert.equal(retryAfterMs("3", 0), 3000);
  assert.equal(retryAfterMs(null, 0), null);
  assert.equal(retryAfterMs("soon", 0), null);
  const now = Date.parse("Fri, 04 Dec 2026 10:00:00 GMT");
  assert.equal(retryAfterMs("Fri, 04 Dec 2026 10:00:05 GMT", now), 5000);
  assert.equal(retryAfterMs("99999999", 0), 86400000, "capped at a day");
});
