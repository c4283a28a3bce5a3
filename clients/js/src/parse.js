// Frame parsers for the three stream formats, fed with decoded text chunks of
// any size (a chunk may end in the middle of a line or of a UTF-16 pair: the
// caller decodes with TextDecoder {stream: true}, so pairs are whole here).
//
// Each parser keeps at most `maxFrameChars` characters of an unfinished frame:
// a frame longer than that is a protocol error (FrameTooLarge), raised before
// the buffer grows past the bound, so a hostile or broken upstream cannot make
// the client hold more than one bounded frame.
//
// push(text) returns the parsed events in order: {kind: "envelope", value}
// for each JSON envelope, {kind: "beat"} for an SSE comment (the edge's
// heartbeat) so the caller can reset its idle timer, and {kind: "beat", id}
// for an SSE event with an id and no data (the edge's stream position,
// "id: P" then an empty line: EventSource dispatches nothing for it, but
// keeps P as its last event id, and so does this client).  A frame that is not JSON
// throws BadFrame: the connection is broken, the caller reconnects.

export class FrameTooLarge extends Error {
  constructor(limit) {
    super(`stream frame longer than ${limit} characters`);
    this.name = "FrameTooLarge";
  }
}

export class BadFrame extends Error {
  constructor(text) {
    super(`stream frame is not a JSON envelope: ${text.slice(0, 120)}`);
    this.name = "BadFrame";
  }
}

function envelope(text) {
  let v;
  try {
    v = JSON.parse(text);
  } catch {
    throw new BadFrame(text);
  }
  if (v === null || typeof v !== "object" || typeof v.type !== "string") throw new BadFrame(text);
  return { kind: "envelope", value: v };
}

// Server-sent events (the WHATWG "event stream" grammar): lines end in CRLF,
// LF or CR; "data:" lines of one event are joined with LF; a blank line ends
// the event; a line starting with ":" is a comment.  The edge puts exactly one
// JSON envelope in each event's data, so `event:`, `id:` and `retry:` carry
// nothing the envelope does not (the envelope is the source of truth).
class SseParser {
  constructor(maxFrameChars) {
    this.max = maxFrameChars;
    this.buf = "";
    this.data = null; // data lines of the event being read, joined
    this.id = null; // the id field of the event being read
    this.skipLf = false; // the previous chunk ended in CR: a leading LF belongs to it
  }

  push(text) {
    const out = [];
    let s = this.buf + text;
    this.buf = "";
    let i = 0;
    if (this.skipLf && s.charCodeAt(0) === 10) i = 1;
    this.skipLf = false;
    for (;;) {
      let j = i;
      while (j < s.length) {
        const c = s.charCodeAt(j);
        if (c === 10 || c === 13) break;
        j++;
      }
      if (j === s.length) break; // unfinished line
      const line = s.slice(i, j);
      if (s.charCodeAt(j) === 13) {
        if (j + 1 === s.length) this.skipLf = true;
        else if (s.charCodeAt(j + 1) === 10) j++;
      }
      i = j + 1;
      this.line(line, out);
    }
    this.buf = s.slice(i);
    const held = this.buf.length + (this.data === null ? 0 : this.data.length);
    if (held > this.max) throw new FrameTooLarge(this.max);
    return out;
  }

  line(line, out) {
    if (line === "") {
      if (this.data !== null) out.push(envelope(this.data));
      else if (this.id !== null) out.push({ kind: "beat", id: this.id });
      this.data = null;
      this.id = null;
      return;
    }
    if (line.charCodeAt(0) === 58) {
      out.push({ kind: "beat" });
      return;
    }
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    if (field === "id") {
      if (!value.includes("\0")) this.id = value.slice(0, 40); // an id is a decimal seq
      return;
    }
    if (field !== "data") return; // event, retry: the envelope says it all
    this.data = this.data === null ? value : this.data + "\n" + value;
    if (this.data.length > this.max) throw new FrameTooLarge(this.max);
  }
}

// NDJSON (one envelope a line) and JSON text sequences (RFC 7464: each
// envelope after an RS, 0x1E, and ended by LF): the edge writes every
// envelope on one line (JSON escapes LF inside strings), so both are read by
// line and a json-seq record's leading RS is dropped.
class LineParser {
  constructor(maxFrameChars) {
    this.max = maxFrameChars;
    this.buf = "";
  }

  push(text) {
    const out = [];
    const parts = (this.buf + text).split("\n");
    this.buf = parts.pop();
    for (const p of parts) {
      const t = p.replace(/^\x1e+/, "").trim();
      if (t !== "") out.push(envelope(t));
    }
    if (this.buf.length > this.max) throw new FrameTooLarge(this.max);
    return out;
  }
}

export function parserCreate(format, maxFrameChars) {
  if (format === "sse") return new SseParser(maxFrameChars);
  if (format === "ndjson" || format === "json-seq") return new LineParser(maxFrameChars);
  throw new TypeError(`unknown format ${format}: use sse, ndjson or json-seq`);
}
