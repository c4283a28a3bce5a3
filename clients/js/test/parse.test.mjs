// The frame parsers, fed in every possible split: a frame must come out the
// same however the network cut the bytes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { FrameTooLarge, BadFrame, parserCreate } from "../src/index.js";

function feedSplit(format, text, cut) {
  const p = parserCreate(format, 1 << 20);
  return [...p.push(text.slice(0, cut)), ...p.push(text.slice(cut))];
}

const sse =
  'id: 1\ndata: {"type":"item","id":"1","topic":"t","about":[]}\n\n' +
  ": heartbeat\n" +
  'event: resync\r\nid: 9\r\ndata: {"type":"resync","id":"9","reason":"gap"}\r\n\r\n' +
  'event: reconnect\rretry: 250\rdata: {"type":"reconnect",\rdata: "retry_ms":250,"reason":"draining"}\r\r';

test("sse: every split point gives the same frames", () => {
  const want = feedSplit("sse", sse, sse.length);
  assert.deepEqual(want.map((e) => e.kind === "beat" ? "beat" : e.value.type),
    ["item", "beat", "resync", "reconnect"]);
  assert.equal(want[3].value.retry_ms, 250); // data lines joined with LF, valid JSON
  for (let cut = 0; cut <= sse.length; cut++) {
    assert.deepEqual(feedSplit("sse", sse, cut), want, `split at ${cut}`);
  }
});

for (const [format, sep, pre] of [["ndjson", "\n", ""], ["json-seq", "\n", "\x1e"]]) {
  test(`${format}: every split point gives the same frames`, () => {
    const text = [{ type: "item", id: "1", topic: "t", about: [] }, { type: "heartbeat" }, { type: "complete" }]
      .map((e) => pre + JSON.stringify(e) + sep).join("");
    const want = feedSplit(format, text, text.length).map((e) => e.value.type);
    assert.deepEqual(want, ["item", "heartbeat", "complete"]);
    for (let cut = 0; cut <= text.length; cut++) {
      assert.deepEqual(feedSplit(format, text, cut).map((e) => e.value.type), want, `split at ${cut}`);
    }
  });
}

test("a frame longer than the bound is refused before the buffer grows past it", () => {
  for (const format of ["sse", "ndjson", "json-seq"]) {
    const p = parserCreate(format, 64);
    assert.throws(() => p.push((format === "sse" ? "data: " : "") + "x".repeat(65)), FrameTooLarge, format);
  }
  const p = parserCreate("sse", 64); // many data lines of one event count together
  assert.throws(() => { for (let i = 0; i < 20; i++) p.push("data: 0123456789\n"); }, FrameTooLarge);
});

test("a frame that is not a JSON envelope is BadFrame", () => {
  assert.throws(() => parserCreate("ndjson", 100).push("{nope\n"), BadFrame);
  assert.throws(() => parserCreate("ndjson", 100).push("[1]\n"), BadFrame);
  assert.throws(() => parserCreate("sse", 100).push("data: 42\n\n"), BadFrame);
});
