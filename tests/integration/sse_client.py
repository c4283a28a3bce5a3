"""Socket-level streaming client for the edge-gateway integration tests.

Size: over 800 lines on purpose: one client state machine, the three body
parsers it feeds and the flows built on them, shared by every stream test.

Design: every stream is a StreamClient, a small non-blocking state machine
(connect -> send request -> read headers -> read body) driven by a selectors
loop (run_clients), so one thread can hold hundreds of streams, some reading
at full speed, some throttled to a byte rate, some stalled (connected, request
sent, never read, with a small SO_RCVBUF).  The body is de-chunked and then
fed to one incremental parser chosen from Content-Type (or forced):

  SseParser     WHATWG "event stream interpretation": CR, LF and CRLF line
                ends, comments, id/event/data/retry, multi-line data, BOM.
  NdjsonParser  one JSON text per LF-terminated line; a partial last line at
                EOF is reported as truncated.
  JsonSeqParser RFC 7464: a record starts at 0x1E and ends at LF; a record
                that is not a complete JSON text when the next 0x1E (or EOF)
                arrives is reported as truncated and parsing resynchronises at
                that 0x1E.

Each parsed frame is a dict: {"type", "env" (the envelope), "sse_id",
"sse_event", "sse_retry", "t"}; SSE comments become {"type": "comment"} (or
"heartbeat" for ": heartbeat").  The terminal outcome is the type of the
first terminal envelope (complete, failure, reconnect), or "abrupt_close" when
the server closed without one, or "client_closed" when the test stopped
reading on purpose.  Nothing here asserts: tests inspect the results.

Python standard library only.
"""

import json
import re
import selectors
import socket
import threading
import time

TERMINAL = ("complete", "failure", "reconnect")
RS = 0x1E

# ---------------------------------------------------------------- parsers


class SseParser:
    """Incremental WHATWG event-stream parser."""

    name = "sse"

    def __init__(self):
        self.buf = b""
        self.first = True
        self.data = []
        self.event = ""
        self.last_id = ""          # the WHATWG "last event ID buffer"
        self.id_in_event = None    # id field seen in the current event
        self.retry = None          # reconnection time, persists
        self.retry_in_event = None
        self.errors = []

    def feed(self, b):
        out = []
        self.buf += b
        if self.first and len(self.buf) >= 3:
            if self.buf.startswith(b"\xef\xbb\xbf"):
                self.buf = self.buf[3:]
            self.first = False
        elif self.first:
            return out
        # A CR at the very end may be the first half of a CRLF: keep it.
        if self.buf.endswith(b"\r"):
            work, self.buf = self.buf[:-1], b"\r"
        else:
            work, self.buf = self.buf, b""
        parts = re.split(rb"\r\n|\r|\n", work)
        self.buf = parts.pop() + self.buf
        for line in parts:
            self._line(line.decode("utf-8", "replace"), out)
        return out

    def finish(self):
        """EOF: an event without its blank line is discarded (WHATWG)."""
        out = []
        if self.first and self.buf:
            self.first = False
            if self.buf.startswith(b"\xef\xbb\xbf"):
                self.buf = self.buf[3:]
        if self.buf and self.buf != b"\r":
            self.errors.append(("truncated", self.buf[:200]))
        elif self.data:
            self.errors.append(("truncated", b"undispatched event"))
        self.buf = b""
        return out

    def _line(self, line, out):
        if line == "":
            self._dispatch(out)
            return
        if line.startswith(":"):
            text = line[1:]
            if text.startswith(" "):
                text = text[1:]
            out.append({"type": "heartbeat" if text == "heartbeat" else "comment",
                        "comment": text, "env": None, "sse_id": None,
                        "sse_event": None, "sse_retry": None,
                        "t": time.monotonic()})
            return
        if ":" in line:
            field, value = line.split(":", 1)
            if value.startswith(" "):
                value = value[1:]
        else:
            field, value = line, ""
        if field == "event":
            self.event = value
        elif field == "data":
            self.data.append(value)
        elif field == "id":
            if "\0" not in value:
                self.last_id = value
                self.id_in_event = value
        elif field == "retry":
            if value and all("0" <= c <= "9" for c in value):
                self.retry = int(value)
                self.retry_in_event = int(value)
        # any other field is ignored, as the spec says

    def _dispatch(self, out):
        if not self.data:
            self.event = ""
            self.id_in_event = None
            self.retry_in_event = None
            return
        data = "\n".join(self.data)
        frame = {"type": None, "env": None, "data": data,
                 "sse_id": self.id_in_event, "last_event_id": self.last_id,
                 "sse_event": self.event or None,
                 "sse_retry": self.retry_in_event, "t": time.monotonic()}
        try:
            env = json.loads(data)
            frame["env"] = env
            frame["type"] = env.get("type") if isinstance(env, dict) else None
        except ValueError:
            frame["type"] = "_bad_json"
            self.errors.append(("bad_json", data[:200]))
        out.append(frame)
        self.data = []
        self.event = ""
        self.id_in_event = None
        self.retry_in_event = None


class NdjsonParser:
    """One JSON text per LF-terminated line."""

    name = "ndjson"

    def __init__(self):
        self.buf = b""
        self.errors = []

    def feed(self, b):
        out = []
        self.buf += b
        if b"\n" not in self.buf:
            return out
        lines = self.buf.split(b"\n")
        self.buf = lines.pop()
        for ln in lines:
            if ln.endswith(b"\r"):
                ln = ln[:-1]
            if not ln.strip():
                continue
            out.append(_frame_from_json(ln, self.errors))
        return out

    def finish(self):
        if self.buf.strip():
            self.errors.append(("truncated", self.buf[:200]))
        self.buf = b""
        return []


class JsonSeqParser:
    """RFC 7464 JSON text sequences, resynchronising at the next 0x1E."""

    name = "json-seq"

    def __init__(self):
        self.buf = bytearray()
        self.in_record = False
        self.scan = 0          # offset in buf already tried for an LF
        self.errors = []

    def feed(self, b):
        out = []
        self.buf += b
        while True:
            if not self.in_record:
                i = self.buf.find(RS)
                if i < 0:
                    if bytes(self.buf).strip():
                        self.errors.append(("junk", bytes(self.buf[:200])))
                    self.buf.clear()
                    return out
                if bytes(self.buf[:i]).strip():
                    self.errors.append(("junk", bytes(self.buf[:i][:200])))
                del self.buf[:i + 1]
                self.in_record = True
                self.scan = 0
            nxt = self.buf.find(RS)
            region_end = nxt if nxt >= 0 else len(self.buf)
            done = False
            pos = self.scan
            while True:
                lf = self.buf.find(b"\n", pos, region_end)
                if lf < 0:
                    break
                text = bytes(self.buf[:lf])
                try:
                    env = json.loads(text)
                except ValueError:
                    pos = lf + 1
                    continue
                out.append(_frame_from_env(env, text.decode("utf-8", "replace")))
                if bytes(self.buf[lf + 1:region_end]).strip():
                    self.errors.append(("junk", bytes(self.buf[lf + 1:region_end][:200])))
                del self.buf[:region_end]
                self.in_record = False
                done = True
                break
            if done:
                continue
            if nxt >= 0:
                # The next record began before this one was complete: it was cut.
                self.errors.append(("truncated", bytes(self.buf[:nxt][:200])))
                del self.buf[:nxt]
                self.in_record = False
                continue
            self.scan = pos
            return out

    def finish(self):
        if self.in_record and bytes(self.buf).strip():
            self.errors.append(("truncated", bytes(self.buf[:200])))
        elif self.in_record:
            self.errors.append(("truncated", b""))
        self.buf = bytearray()
        self.in_record = False
        return []


class RawParser:
    """Collects the body (problem documents, /metrics)."""

    name = "raw"

    def __init__(self):
        self.errors = []

    def feed(self, b):
        return []

    def finish(self):
        return []


def _frame_from_env(env, text=None):
    return {"type": env.get("type") if isinstance(env, dict) else None,
            "env": env, "data": text, "sse_id": None, "sse_event": None, "sse_retry": None,
            "t": time.monotonic()}


def _frame_from_json(text, errors):
    try:
        return _frame_from_env(json.loads(text), text.decode("utf-8", "replace"))
    except ValueError:
        errors.append(("bad_json", bytes(text[:200])))
        return {"type": "_bad_json", "env": None, "sse_id": None,
                "sse_event": None, "sse_retry": None, "t": time.monotonic()}


PARSERS = {"sse": SseParser, "ndjson": NdjsonParser, "json-seq": JsonSeqParser,
           "raw": RawParser}
CTYPES = {"text/event-stream": "sse", "application/x-ndjson": "ndjson",
          "application/json-seq": "json-seq"}


def parse_bytes(fmt, data, pieces=1):
    """Parse a whole body in `pieces` feeds; returns (frames, errors)."""
    p = PARSERS[fmt]()
    out = []
    step = max(1, len(data) // max(1, pieces))
    for i in range(0, len(data), step):
        out += p.feed(data[i:i + step])
    out += p.finish()
    return out, p.errors


# ---------------------------------------------------------- chunked decoding


class ChunkDecoder:
    def __init__(self):
        self.state = "size"
        self.buf = bytearray()
        self.left = 0
        self.done = False
        self.error = None

    def feed(self, b):
        """Returns the decoded bytes; sets done at the last chunk."""
        out = bytearray()
        self.buf += b
        while self.buf and not self.done and self.error is None:
            if self.state == "size":
                i = self.buf.find(b"\r\n")
                if i < 0:
                    if len(self.buf) > 1024:
                        self.error = "chunk size line too long"
                    break
                line = bytes(self.buf[:i]).split(b";")[0].strip()
                del self.buf[:i + 2]
                try:
                    self.left = int(line, 16)
                except ValueError:
                    self.error = "bad chunk size %r" % line
                    break
                self.state = "data" if self.left else "trailer"
            elif self.state == "data":
                n = min(self.left, len(self.buf))
                out += self.buf[:n]
                del self.buf[:n]
                self.left -= n
                if self.left == 0:
                    self.state = "crlf"
            elif self.state == "crlf":
                if len(self.buf) < 2:
                    break
                if bytes(self.buf[:2]) != b"\r\n":
                    self.error = "missing CRLF after chunk"
                    break
                del self.buf[:2]
                self.state = "size"
            elif self.state == "trailer":
                i = self.buf.find(b"\r\n")
                if i < 0:
                    break
                line = bytes(self.buf[:i])
                del self.buf[:i + 2]
                if line == b"":
                    self.done = True
        return bytes(out)


# ------------------------------------------------------------------ client


class StreamClient:
    """One HTTP request whose response body is parsed as it arrives.

    Options: headers (dict or list of pairs), method, rcvbuf (SO_RCVBUF set
    before connect), stall (send the request, then never read until
    unstall()), read_rate (bytes per second after the headers, read in
    slices of read_slice_s seconds' worth, default 0.05), keep_raw
    (keep the decoded body), parser (force one), stop (callable(client) ->
    True to close the stream from the client side), on_frame (callable).
    """

    def __init__(self, port, target, host="127.0.0.1", headers=None,
                 method="GET", rcvbuf=None, stall=False, read_rate=None, read_slice_s=0.05,
                 keep_raw=False, parser=None, stop=None, on_frame=None,
                 name="", body=None, raw_request=None):
        self.host, self.port, self.target = host, port, target
        self.method = method
        self.headers = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
        self.rcvbuf, self.stalled, self.read_rate = rcvbuf, stall, read_rate
        self.read_slice_s = read_slice_s
        self.keep_raw = keep_raw
        self.force_parser = parser
        self.stop, self.on_frame = stop, on_frame
        self.name = name
        self.req_body = body
        self.raw_request = raw_request
        self.sock = None
        self.state = "init"
        self.out = b""
        self.hbuf = bytearray()
        self.status = None
        self.reason = ""
        self.resp_headers = []
        self.chunks = None
        self.body_left = None
        self.parser = None
        self.raw = bytearray()
        self.frames = []
        self.outcome = None
        self.error = None
        self.bytes_in = 0
        self.body_bytes = 0
        self.transport_complete = False
        self.frames_after_terminal = 0
        self.terminal = None
        self.n_items = 0
        self.last_id = None       # id of the newest item/resync received
        self.t_start = self.t_headers = self.t_end = None
        self.t_body0 = None
        self.next_read = 0.0

    # -- public helpers
    def header(self, name, default=None):
        name = name.lower()
        for k, v in self.resp_headers:
            if k.lower() == name:
                return v
        return default

    def header_all(self, name):
        name = name.lower()
        return [v for k, v in self.resp_headers if k.lower() == name]

    @property
    def done(self):
        return self.state == "done"

    def items(self):
        return [f for f in self.frames if f["type"] == "item"]

    def ids(self, types=("item",)):
        return [int(f["env"]["id"]) for f in self.frames
                if f["type"] in types and f["env"] and "id" in f["env"]]

    def of_type(self, t):
        return [f for f in self.frames if f["type"] == t]

    def body_json(self):
        try:
            return json.loads(bytes(self.raw).decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return None

    def parse_errors(self):
        return list(self.parser.errors) if self.parser else []

    def unstall(self):
        self.stalled = False

    def close(self):
        if self.state != "done":
            self._finish("client_closed")

    # -- state machine
    def start(self):
        self.t_start = time.monotonic()
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if self.rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
        s.setblocking(False)
        self.sock = s
        try:
            s.connect((self.host, self.port))
        except BlockingIOError:
            pass
        except OSError as e:
            self.error = "connect: %s" % e
            self._finish("connect_error")
            return
        if self.raw_request is not None:
            self.out = self.raw_request
        else:
            hdrs = [("Host", "%s:%d" % (self.host, self.port))] + self.headers
            if self.req_body is not None:
                hdrs.append(("Content-Length", str(len(self.req_body))))
            req = "%s %s HTTP/1.1\r\n" % (self.method, self.target)
            req += "".join("%s: %s\r\n" % kv for kv in hdrs) + "\r\n"
            self.out = req.encode("latin-1") + (self.req_body or b"")
        self.state = "send"

    def interest(self, now):
        """Selector mask wanted now (0 = none); second value: wake time."""
        if self.state == "send":
            return selectors.EVENT_WRITE, None
        if self.state in ("headers", "body"):
            if self.stalled:
                return 0, None
            if self.read_rate and self.state == "body" and now < self.next_read:
                return 0, self.next_read
            return selectors.EVENT_READ, None
        return 0, None

    def on_event(self, mask, now):
        if self.state == "send" and mask & selectors.EVENT_WRITE:
            err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self.error = "connect: errno %d" % err
                self._finish("connect_error")
                return
            try:
                n = self.sock.send(self.out)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                self.error = "send: %s" % e
                self._finish("connect_error")
                return
            self.out = self.out[n:]
            if not self.out:
                self.state = "headers"
            return
        if mask & selectors.EVENT_READ:
            self._read(now)

    def _read(self, now):
        size = 65536
        if self.read_rate and self.state == "body":
            size = max(1, min(size, int(self.read_rate * self.read_slice_s) or 1))
        try:
            b = self.sock.recv(size)
        except (BlockingIOError, InterruptedError):
            return
        except ConnectionResetError:
            self.error = "reset"
            self._eof()
            return
        except OSError as e:
            self.error = "recv: %s" % e
            self._eof()
            return
        if not b:
            self._eof()
            return
        self.bytes_in += len(b)
        if self.read_rate and self.state == "body":
            self.body_bytes += len(b)
            self.next_read = self.t_body0 + self.body_bytes / self.read_rate
        if self.state == "headers":
            self.hbuf += b
            i = self.hbuf.find(b"\r\n\r\n")
            sep = 4
            if i < 0:
                i = self.hbuf.find(b"\n\n")
                sep = 2
            if i < 0:
                if len(self.hbuf) > 65536:
                    self.error = "headers too long"
                    self._finish("bad_response")
                return
            head, rest = bytes(self.hbuf[:i]), bytes(self.hbuf[i + sep:])
            self.hbuf = bytearray()
            if not self._parse_head(head):
                return
            self.t_headers = self.t_body0 = now
            self.next_read = now
            self.state = "body"
            if self.read_rate:
                self.body_bytes = len(rest)
                self.next_read = now + len(rest) / self.read_rate
            if self.body_left == 0:
                self._end_body()
                return
            if rest:
                self._body(rest)
            return
        self._body(b)

    def _parse_head(self, head):
        lines = head.decode("latin-1").replace("\r\n", "\n").split("\n")
        m = re.match(r"HTTP/(\d\.\d) (\d{3})(?: (.*))?$", lines[0])
        if not m:
            self.error = "bad status line %r" % lines[0]
            self._finish("bad_response")
            return False
        self.status = int(m.group(2))
        self.reason = m.group(3) or ""
        for ln in lines[1:]:
            if ":" in ln:
                k, v = ln.split(":", 1)
                self.resp_headers.append((k.strip(), v.strip()))
        te = (self.header("transfer-encoding") or "").lower()
        cl = self.header("content-length")
        if self.method == "HEAD" or self.status in (204, 304) or 100 <= self.status < 200:
            self.body_left = 0
        elif "chunked" in te:
            self.chunks = ChunkDecoder()
        elif cl is not None:
            try:
                self.body_left = int(cl)
            except ValueError:
                self.error = "bad content-length"
                self._finish("bad_response")
                return False
        ctype = (self.header("content-type") or "").split(";")[0].strip().lower()
        kind = self.force_parser or CTYPES.get(ctype, "raw")
        self.parser = PARSERS[kind]()
        if kind == "raw":
            self.keep_raw = True
        return True

    def _body(self, b):
        if self.chunks is not None:
            b = self.chunks.feed(b)
            if self.chunks.error:
                self.error = self.chunks.error
        elif self.body_left is not None:
            b = b[:self.body_left]
            self.body_left -= len(b)
        if b:
            if self.keep_raw:
                self.raw += b
            self._frames(self.parser.feed(b))
        if self.state == "done":
            return
        if (self.chunks is not None and self.chunks.done) or self.body_left == 0:
            self.transport_complete = True
            self._end_body()
        elif self.stop is not None and self.stop(self):
            self._finish("client_closed")

    def _frames(self, frames):
        for f in frames:
            if self.terminal is not None:
                self.frames_after_terminal += 1
            elif f["type"] in TERMINAL:
                self.terminal = f
            if f["type"] in ("item", "resync") and isinstance(f["env"], dict):
                try:
                    self.last_id = int(f["env"].get("id"))
                except (TypeError, ValueError):
                    pass
                if f["type"] == "item":
                    self.n_items += 1
            self.frames.append(f)
            if self.on_frame:
                self.on_frame(self, f)

    def _end_body(self):
        if self.parser:
            self._frames(self.parser.finish())
        self._finish(self._outcome())

    def _eof(self):
        if self.state == "headers":
            self._finish("no_response")
            return
        if self.state == "body":
            if self.chunks is None and self.body_left is None:
                self.transport_complete = True   # close-delimited body
            self._end_body()
            return
        self._finish("closed")

    def _outcome(self):
        if self.parser is None or self.parser.name == "raw":
            return "response"
        return self.terminal["type"] if self.terminal else "abrupt_close"

    def _finish(self, outcome):
        if self.state == "done":
            return
        self.outcome = outcome
        self.state = "done"
        self.t_end = time.monotonic()
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass


OPEN_TIMEOUT_S = 60  # a busy CI machine: a deadline to fail by, not a time to wait


def run_until_open(clients, timeout=OPEN_TIMEOUT_S, also=None):
    """Drives clients until every one has its response status (or ended),
    and also() (when given) is true: the condition a fixed "let them
    connect" wait only hoped for.  Returns run_clients' verdict; the
    caller's checks then say what was expected and what came."""
    clients = list(clients)
    return run_clients(clients, timeout,
                       until=lambda: all(c.status is not None or c.done for c in clients) and
                       (also is None or also()))


def run_clients(clients, timeout, until=None, tick=None):
    """Drive clients until all are done, until() is true, or timeout (s).

    Clients not started yet are started here.  Returns True when every
    client finished (or until() became true) before the timeout.
    tick(now) is called about every 50 ms (to add clients, unstall, ...)."""
    sel = selectors.DefaultSelector()
    reg = {}
    deadline = time.monotonic() + timeout
    clients = list(clients)
    for c in clients:
        if c.state == "init":
            c.start()
    ok = False
    last_tick = 0.0
    try:
        while True:
            now = time.monotonic()
            if tick is not None and now - last_tick >= 0.05:
                last_tick = now
                more = tick(now)
                if more:
                    for c in more:
                        if c.state == "init":
                            c.start()
                    clients += more
            if until is not None and until():
                ok = True
                break
            if all(c.done for c in clients):
                ok = True
                break
            if now >= deadline:
                break
            wake = min(deadline, now + 0.05)
            for c in clients:
                mask, t = c.interest(now) if not c.done else (0, None)
                if t is not None and t < wake:
                    wake = t
                cur = reg.get(id(c))
                if mask != (cur[1] if cur else 0):
                    if cur:
                        try:
                            sel.unregister(cur[0])
                        except (KeyError, ValueError):
                            pass
                        del reg[id(c)]
                    if mask:
                        sel.register(c.sock, mask, c)
                        reg[id(c)] = (c.sock, mask)
                elif cur and c.done:
                    try:
                        sel.unregister(cur[0])
                    except (KeyError, ValueError):
                        pass
                    del reg[id(c)]
            if not reg:
                time.sleep(max(0.0, min(0.05, wake - time.monotonic())))
                continue
            for key, mask in sel.select(max(0.0, wake - time.monotonic())):
                c = key.data
                if not c.done:
                    c.on_event(mask, time.monotonic())
                if c.done and id(c) in reg:
                    try:
                        sel.unregister(reg[id(c)][0])
                    except (KeyError, ValueError):
                        pass
                    del reg[id(c)]
    finally:
        sel.close()
    return ok


def open_raw_stream(port, target, headers=(), src="127.0.0.1", timeout=10.0):
    """A GET of target from source address src on a socket of its own, left open: (socket, status or
    None, the response head as text).  For tests that hold streams open (per-address limits)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    req = "GET %s HTTP/1.1\r\nHost: x\r\n" % target
    req += "".join("%s: %s\r\n" % (k, v) for k, v in headers)
    s.sendall((req + "\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(4096)
        if not b:
            break
        head += b
    text = head.decode(errors="replace")
    status = int(text.split(" ", 2)[1]) if text.startswith("HTTP/1.1 ") else None
    return s, status, text


def fetch(port, target, method="GET", headers=None, timeout=10.0, body=None,
          host="127.0.0.1", **kw):
    """One request, run to the end (or timeout); returns the client."""
    c = StreamClient(port, target, host=host, method=method, headers=headers,
                     body=body, **kw)
    run_clients([c], timeout)
    if not c.done:
        c.close()
        c.outcome = "timeout"
    return c


# ------------------------------------------------------------------ checks


def check_problem(c, status):
    """Errors (list of str) of a response that must be an RFC 9457 problem."""
    errs = []
    if c.status != status:
        errs.append("status %r, want %d%s" % (c.status, status, "" if c.status else
                                              " (outcome %s, %s)" % (c.outcome, c.error)))
    ct = (c.header("content-type") or "").split(";")[0].strip().lower()
    if ct != "application/problem+json":
        errs.append("content-type %r, want application/problem+json" % ct)
    doc = c.body_json()
    if not isinstance(doc, dict):
        errs.append("body is not a JSON object: %r" % bytes(c.raw[:200]))
        return errs
    for k in ("type", "title", "detail"):
        if not isinstance(doc.get(k), str) or not doc.get(k):
            errs.append("problem.%s missing or not a non-empty string: %r" % (k, doc.get(k)))
    if doc.get("status") != status or isinstance(doc.get("status"), bool):
        errs.append("problem.status %r, want %d" % (doc.get("status"), status))
    return errs


def check_refusal(c, fmt, reason, status):
    """Errors (list of str) of a refusal that retrying can fix.  SSE: 200 and
    exactly one reconnect envelope with that reason and a retry hint (SSE
    retry: equal to retry_ms), then the end; NDJSON and json-seq: the
    problem status with a numeric Retry-After."""
    if fmt != "sse":
        errs = check_problem(c, status)
        ra = c.header("retry-after")
        if ra is None or not ra.isdigit():
            errs.append("Retry-After %r, want whole seconds" % ra)
        return errs
    errs = []
    if c.status != 200:
        errs.append("status %r, want 200 (an EventSource gives up on anything else)%s"
                    % (c.status, " body %r" % bytes(c.raw[:200]) if c.status else ""))
        return errs
    frames = [f for f in c.frames if f["type"] not in ("comment", "heartbeat")]
    if len(frames) != 1 or frames[0]["type"] != "reconnect":
        errs.append("frames %r, want exactly one reconnect" % [(f["type"], f.get("data")) for f in frames])
        return errs
    env = frames[0]["env"]
    if env.get("reason") != reason:
        errs.append("reconnect reason %r, want %r" % (env.get("reason"), reason))
    r = env.get("retry_ms")
    if not isinstance(r, int) or isinstance(r, bool) or r <= 0:
        errs.append("retry_ms %r, want a positive integer" % r)
    elif frames[0]["sse_retry"] != r:
        errs.append("SSE retry: %r, want retry_ms %r" % (frames[0]["sse_retry"], r))
    if c.outcome != "reconnect":
        errs.append("outcome %r, want reconnect (the response ends after it)" % c.outcome)
    return errs + check_envelopes(c, "sse")


def check_envelopes(c, fmt="sse"):
    """Structural errors of a parsed stream: ids strictly increase, SSE
    fields match the envelope, nothing after the terminal envelope, no parse
    errors."""
    errs = []
    last = None
    seen = 0
    for f in c.frames:
        t = f["type"]
        env = f["env"]
        if t in ("comment",):
            continue
        seen += 1
        if t == "heartbeat" and isinstance(env, dict) and "id" in env:
            # The stream position (NDJSON/json-seq; SSE's "id: P" dispatches
            # no frame): first, and the id every later one must exceed.
            if seen != 1:
                errs.append("stream position %r is not the first frame" % env)
            if not isinstance(env["id"], str) or not env["id"].isdigit():
                errs.append("stream position id %r is not a decimal string" % env["id"])
            else:
                last = int(env["id"])
            continue
        if t == "heartbeat" and env is None:
            if fmt != "sse":
                errs.append("comment heartbeat outside SSE")
            continue
        if env is None or not isinstance(env, dict):
            errs.append("frame without an envelope: %r" % f.get("data"))
            continue
        if t in ("item", "resync"):
            sid = env.get("id")
            if not isinstance(sid, str) or not sid.isdigit():
                errs.append("%s id %r is not a decimal string" % (t, sid))
                continue
            if last is not None and int(sid) <= last:
                errs.append("id %s after %d: not strictly increasing" % (sid, last))
            last = int(sid)
            if fmt == "sse" and f["sse_id"] != sid:
                errs.append("SSE id field %r != envelope id %r" % (f["sse_id"], sid))
        elif fmt == "sse" and f["sse_id"] is not None:
            errs.append("SSE id field on a %s frame" % t)
        if fmt == "sse":
            want = None if t == "item" else t
            if f["sse_event"] != want:
                errs.append("SSE event %r on a %s frame, want %r" % (f["sse_event"], t, want))
            if t == "reconnect" and f["sse_retry"] != env.get("retry_ms"):
                errs.append("SSE retry %r != retry_ms %r" % (f["sse_retry"], env.get("retry_ms")))
        if t == "heartbeat" and fmt == "sse":
            errs.append("SSE heartbeat sent as data, not as the comment ': heartbeat'")
    if c.frames_after_terminal:
        errs.append("%d frames after the terminal envelope" % c.frames_after_terminal)
    for e in c.parse_errors():
        errs.append("parse error %s: %r" % e)
    return errs


def parse_metrics(text):
    """Prometheus text -> {(name, frozenset(labels.items())): float}."""
    out = {}
    for ln in text.splitlines():
        if not ln or ln.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)', ln)
        if not m:
            continue
        labels = {}
        if m.group(2):
            for lm in re.finditer(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2)):
                labels[lm.group(1)] = lm.group(2)
        try:
            v = float(m.group(3))
        except ValueError:
            continue
        out[(m.group(1), frozenset(labels.items()))] = v
    return out


def metric(metrics, name, **labels):
    """Sum of the samples of `name` whose labels include `labels`."""
    total = 0.0
    found = False
    want = set(labels.items())
    for (n, ls), v in metrics.items():
        if n == name and want <= set(ls):
            total += v
            found = True
    return total if found else None


def get_metrics(port, timeout=5.0):
    c = fetch(port, "/metrics", timeout=timeout)
    if c.status != 200:
        return {}
    return parse_metrics(bytes(c.raw).decode("utf-8", "replace"))


def vm_rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for ln in f:
                if ln.startswith("VmRSS:"):
                    return int(ln.split()[1])
    except OSError:
        pass
    return None


class Results:
    """Pass/fail bookkeeping with the required final line."""

    def __init__(self, name):
        self.name = name
        self.passed = 0
        self.failed = 0

    def check(self, cond, what, detail=""):
        if cond:
            self.passed += 1
            print("PASS %s" % what, flush=True)
        else:
            self.failed += 1
            print("FAIL %s%s" % (what, (": " + str(detail)) if detail != "" else ""), flush=True)
        return cond

    def figure(self, what, value):
        print("FIGURE %s: %s" % (what, value), flush=True)

    def finish(self):
        print("%d passed, %d failed" % (self.passed, self.failed), flush=True)
        return 0 if self.failed == 0 and self.passed > 0 else 1


# ------------------------------------------------- integration helpers
# (use harness.py for processes and databases; these only add what G2's
# tests need on top of it)


def edge_port(proc):
    """The TCP port of an edge Proc started by harness.start_edge."""
    return int(proc.listen.rsplit(":", 1)[1])


def publish_batch(writer, events):
    """Publishes events (dicts: topic, about, data as a JSON text or absent)
    as one ingest request through harness.request; returns their seqs."""
    import harness
    out = []
    for e in events:
        m = {"topic": e["topic"], "about": list(e.get("about", []))}
        if e.get("data") is not None:
            m["data"] = e["data"] if isinstance(e["data"], str) else json.dumps(e["data"])
        if e.get("key") is not None:
            m["key"] = e["key"]
        out.append(m)
    rep = harness.request(writer, out, timeout_ms=60000)
    harness.check(isinstance(rep, dict) and rep.get("ok") is True,
                  "publish of %d events refused: %r" % (len(events), rep))
    return [int(x) for x in rep["seqs"]]


class PublishFlow(threading.Thread):
    """Publishes 4 events every `period` seconds (2 on topic, 2 on other)
    until stop is set; finish() stops it and fails the test on an error."""

    def __init__(self, writer, topic, other, period):
        super().__init__(daemon=True)
        self.writer, self.topic, self.other, self.period = writer, topic, other, period
        self.stop = threading.Event()
        self.error = None

    def run(self):
        k = 0
        try:
            while not self.stop.is_set():
                publish_batch(self.writer, [{"topic": self.topic if i % 2 == 0 else self.other,
                                             "data": {"k": k + i}} for i in range(4)])
                k += 4
                time.sleep(self.period)
        except Exception as e:  # reported by finish()
            self.error = e

    def finish(self):
        import harness
        self.stop.set()
        self.join(60)
        harness.check(self.error is None, "publisher: %r" % self.error)


def publish_many(writer, events, batch=2000):
    seqs = []
    for i in range(0, len(events), batch):
        seqs += publish_batch(writer, events[i:i + batch])
    return seqs


def table_rows(dsn, topics, after=0, upto=None):
    """[(seq, topic, about list, data text or None)] of broker_event, by seq."""
    import harness
    tl = ",".join("'%s'" % t.replace("'", "''") for t in topics)
    sql = ("SELECT seq, topic, array_to_json(about)::text, data::text FROM broker_event "
           "WHERE topic IN (%s) AND seq > %d%s ORDER BY seq" %
           (tl, after, "" if upto is None else " AND seq <= %d" % upto))
    return [(int(r[0]), r[1], json.loads(r[2]), r[3]) for r in harness.psql(dsn, sql)]


def db_head(dsn):
    import harness
    v = harness.psql_one(dsn, "SELECT coalesce(max(seq), 0) FROM broker_event")
    return int(v or 0)


def item_errors(frames, rows):
    """Compares item frames with table rows exactly (ids, topic, about, and the
    data text byte for byte).  Returns a list of error strings (first 10)."""
    import harness
    errs = []
    items = [f for f in frames if f["type"] == "item"]
    if len(items) != len(rows):
        errs.append("%d items, %d rows" % (len(items), len(rows)))
    for f, r in zip(items, rows):
        env = f["env"]
        want = {"type", "id", "topic", "about"} | ({"data"} if r[3] is not None else set())
        if set(env) != want:
            errs.append("seq %d: keys %s, want %s" % (r[0], sorted(env), sorted(want)))
        if env.get("id") != str(r[0]) or env.get("topic") != r[1] or env.get("about") != r[2]:
            errs.append("item %r != row %r" % ({k: env.get(k) for k in ("id", "topic", "about")}, r[:3]))
        if r[3] is not None and f.get("data") is not None:
            got = harness.envelope_data_text(f["data"])
            if got != r[3]:
                errs.append("seq %d: data text %r != stored %r" % (r[0], got, r[3]))
        if len(errs) >= 10:
            break
    return errs


def streamload_path():
    """tests/tools/streamload, built by tests/CMakeLists.txt into
    STUDIO_TOOLS_DIR; compiled here with cc when that build line is missing."""
    import harness
    import os
    import subprocess
    import tempfile
    p = os.path.join(harness.TOOLS_DIR, "streamload")
    if os.path.exists(p):
        return p
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "streamload.c")
    out = os.path.join(tempfile.gettempdir(), "streamload-%d" % os.getpid())
    if not os.path.exists(out):
        subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-o", out, src],
                       check=True)
    return out


class Streamload:
    """Runs streamload in the background; result() -> parsed JSON stats."""

    def __init__(self, port, path, n, tmpdir, rate=500, stall_s=None, rcvbuf=None,
                 timeout_s=120, hold_s=None, headers=(), per_stream=False):
        import os
        import subprocess
        self.ready_file = os.path.join(tmpdir, "streamload-%d.ready" % id(self))
        self.out_path = os.path.join(tmpdir, "streamload-%d.json" % id(self))
        args = [streamload_path(), "--port", str(port), "--path", path, "-n", str(n),
                "--rate", str(rate), "--timeout-s", str(timeout_s),
                "--ready-file", self.ready_file]
        if stall_s:
            args += ["--stall-s", str(stall_s)]
        if rcvbuf:
            args += ["--rcvbuf", str(rcvbuf)]
        if hold_s:
            args += ["--hold-s", str(hold_s)]
        for h in headers:
            args += ["--header", h]
        if per_stream:
            args.append("--per-stream")
        self.err_path = self.out_path + ".stderr"
        self._out = open(self.out_path, "wb")
        self._err = open(self.err_path, "wb")
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(args, stdout=self._out, stderr=self._err,
                                  stdin=subprocess.DEVNULL)

    def ready(self):
        import os
        return os.path.exists(self.ready_file)

    def wait_ready(self, timeout):
        import harness
        harness.wait_until(lambda: self.ready() or self.p.poll() is not None, timeout,
                           "streamload streams open")
        if not self.ready():
            with open(self.err_path, "rb") as f:
                err = f.read().decode(errors="replace")[-500:]
            raise harness.TestFailure("streamload exited before its streams were open: %s" % err)

    def result(self, timeout):
        import subprocess
        try:
            self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.terminate()   # streamload prints its stats on SIGTERM too
            self.p.wait(10)
        self._out.close()
        self._err.close()
        with open(self.out_path) as f:
            return json.loads(f.read())


def set_db_connections(admin_dsn, dbname, allow):
    """Makes a test database unreachable (allow=False: no new connections, and
    every existing session of it terminated) or reachable again.  This is a
    real outage for the programs using it, and only touches that database."""
    import harness
    harness.psql(admin_dsn, "ALTER DATABASE %s ALLOW_CONNECTIONS %s" % (dbname, "true" if allow else "false"))
    if not allow:
        harness.psql(admin_dsn, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                "WHERE datname = '%s' AND pid <> pg_backend_pid()" % dbname)


# ---------------------------------------------------------------- selftest


def _selftest():
    """Parser unit checks plus a fake chunked server (client proof only)."""
    import threading
    r = Results("sse_client selftest")
    # SSE: CR, LF, CRLF, comments, multi-line data, retry, id persistence.
    body = (b"\xef\xbb\xbf: hello\r\nid: 1\rdata: {\"type\":\"item\",\"id\":\"1\"}\n\n"
            b"data: {\"type\":\r\ndata: \"item\",\"id\":\"2\"}\r\nid: 2\r\n\r\n"
            b": heartbeat\n"
            b"event: reconnect\nretry: 1500\ndata: {\"type\":\"reconnect\",\"retry_ms\":1500,\"reason\":\"draining\"}\n\n"
            b"data: lost")
    for pieces in (1, 3, 7, len(body)):
        fr, errs = parse_bytes("sse", body, pieces)
        types = [f["type"] for f in fr]
        r.check(types == ["comment", "item", "item", "heartbeat", "reconnect"],
                "sse types pieces=%d" % pieces, types)
        r.check(fr[2]["env"] == {"type": "item", "id": "2"}, "sse multi-line data pieces=%d" % pieces, fr[2])
        r.check(fr[4]["sse_retry"] == 1500 and fr[4]["sse_event"] == "reconnect"
                and fr[4]["last_event_id"] == "2", "sse retry/event pieces=%d" % pieces)
        r.check(errs == [("truncated", b"data: lost")], "sse truncated tail pieces=%d" % pieces, errs)
    # json-seq: a record cut in the middle, resync at the next RS.
    js = (b"\x1e{\"type\":\"item\",\"id\":\"1\"}\n\x1e{\"type\":\"item\",\"i"
          b"\x1e{\"type\":\"item\",\"id\":\"3\"}\n\x1e{\"type\":\"complete\"}\n")
    for pieces in (1, 2, 5, len(js)):
        fr, errs = parse_bytes("json-seq", js, pieces)
        r.check([f["env"].get("id") for f in fr] == ["1", "3", None], "json-seq resync pieces=%d" % pieces, fr)
        r.check(len(errs) == 1 and errs[0][0] == "truncated", "json-seq truncation reported", errs)
    fr, errs = parse_bytes("json-seq", b"\x1e{\"type\":\"item\",\"id\":\"1\"}\n\x1e{\"ty", 3)
    r.check(len(fr) == 1 and errs and errs[-1][0] == "truncated", "json-seq cut at EOF")
    nd = b"{\"type\":\"item\",\"id\":\"1\"}\n{\"type\":\"heartbeat\"}\r\n{\"type\":\"it"
    fr, errs = parse_bytes("ndjson", nd, 4)
    r.check([f["type"] for f in fr] == ["item", "heartbeat"] and errs and errs[0][0] == "truncated",
            "ndjson lines + truncated tail", (fr, errs))

    # Fake chunked SSE server: proves the socket/chunk/selector path only.
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)
    port = ls.getsockname()[1]

    def serve():
        while True:
            try:
                s, _ = ls.accept()
            except OSError:
                return
            threading.Thread(target=one, args=(s,), daemon=True).start()

    def one(s):
        req = b""
        while b"\r\n\r\n" not in req:
            d = s.recv(4096)
            if not d:
                return
            req += d
        path = req.split(b" ")[1]
        if path.startswith(b"/big"):
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n")
            for i in range(1, 3001):
                fr = b'id: %d\ndata: {"type":"item","id":"%d","topic":"t","about":[],"data":{"x":"%s"}}\n\n' % (
                    i, i, b"y" * 200)
                s.sendall(b"%x\r\n%s\r\n" % (len(fr), fr))
            fr = b'event: complete\ndata: {"type":"complete"}\n\n'
            s.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(fr), fr))
        elif path.startswith(b"/cut"):
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json-seq\r\n\r\n"
                      b"\x1e{\"type\":\"item\",\"id\":\"1\"}\n\x1e{\"type\":")
        else:
            b = b'{"type":"about:blank","title":"Not Found","status":404,"detail":"no"}'
            s.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Type: application/problem+json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(b), b))
        s.close()

    threading.Thread(target=serve, daemon=True).start()
    cs = [StreamClient(port, "/big") for _ in range(30)]
    slow = StreamClient(port, "/big", read_rate=400000, rcvbuf=4096)
    stalled = StreamClient(port, "/big", stall=True, rcvbuf=4096)
    t0 = time.monotonic()
    run_clients(cs + [slow], 30)
    r.check(all(c.outcome == "complete" and c.ids() == list(range(1, 3001)) for c in cs),
            "30 parallel chunked streams complete", [c.outcome for c in cs][:3])
    r.check(all(not check_envelopes(c) for c in cs), "envelopes well formed", check_envelopes(cs[0])[:3])
    el = slow.t_end - slow.t_start
    r.check(slow.outcome == "complete" and el > 1.2, "rate-limited reader took %.2fs" % el)
    run_clients([stalled], 0.5)
    r.check(not stalled.done and stalled.bytes_in == 0, "stalled client reads nothing")
    stalled.unstall()
    run_clients([stalled], 10)
    r.check(stalled.outcome == "complete" and len(stalled.items()) == 3000, "stalled then read all")
    c = fetch(port, "/cut")
    r.check(c.outcome == "abrupt_close" and c.ids() == [1] and c.parse_errors(), "cut json-seq = abrupt_close")
    c = fetch(port, "/nope")
    r.check(check_problem(c, 404) == [], "problem document check", check_problem(c, 404))
    print("elapsed %.2fs" % (time.monotonic() - t0))
    ls.close()
    return r.finish()


if __name__ == "__main__":
    raise SystemExit(_selftest())
