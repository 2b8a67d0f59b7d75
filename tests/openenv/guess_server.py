#!/usr/bin/env python3
"""An OpenEnv environment server with Python's standard library only.

It follows the HTTP interface of OpenEnv's HTTPEnvServer (meta-pytorch/OpenEnv,
openenv.core.env_server.http_server) as published: one environment per
server, and

  GET  /health  -> 200 {"status": "healthy"}
  POST /reset   body {"seed": int?, "episode_id": str?} (may be empty)
                -> 200 {"observation": {...}, "reward": null, "done": false}
  POST /step    body {"action": {...}, "timeout_s": float?, "request_id": str?}
                -> 200 {"observation": {...}, "reward": float|null, "done": bool}
                -> 422 {"detail": [{"type", "loc", "msg", "input"}]} for an action
                   that fails validation (the Action model forbids extra fields)
  GET  /state   -> 200 {"episode_id": str|null, "step_count": int}
  an unknown path -> 404 {"detail": "Not Found"}; a wrong method -> 405
  {"detail": "Method Not Allowed"}; a body that is not JSON -> 422
  {"detail": [{"type": "json_invalid", ...}]}; an exception in the
  environment (a step before any reset) -> 500 "Internal Server Error".

and, as OpenEnv's current releases do for multi-step episodes, a WebSocket
session endpoint, each connection with an environment of its own:

  GET  /ws (Upgrade: websocket), then text messages
    -> {"type": "reset", "data": {"seed": int?, "episode_id": str?}}
    <- {"type": "observation", "data": {"observation": {...}, "reward": null, "done": false}}
    -> {"type": "step", "data": {<action fields>}}
    <- {"type": "observation", "data": {...}} or
       {"type": "error", "data": {"message": str, "code": "VALIDATION_ERROR", "errors": [...]}}
    -> {"type": "state"}   <- {"type": "state", "data": {"episode_id": ..., "step_count": ...}}
    -> {"type": "close"}   (the server closes the connection)
  other errors: codes INVALID_JSON, UNKNOWN_TYPE, EXECUTION_ERROR, and
  CAPACITY_REACHED when --max-sessions sessions are open already.

The environment is guess-the-number: the seed picks lo, hi and a secret in
[lo, hi]; the observation is {"text": "lo-hi?", "attempts_left": k,
"won": false}; the action is {"guess": "<text>"}; each wrong guess answers
"higher" or "lower"; a right guess ends the episode with reward 1 and
"won": true, running out of guesses with reward 0.

  python3 guess_server.py [--host 127.0.0.1] [--port 0] [--fault MODE] [--max-sessions 64]

prints "listening PORT" on stdout once it accepts connections. --fault makes
it misbehave for tests: hang_step (a step never answers), bad_json_step,
no_done (a step reply without "done"), error_step (HTTP 500), unhealthy
(/health answers 503), ws_hang_step (a step over /ws never answers),
ws_drop_step (the connection closes on a step), no_ws (no /ws endpoint: 404).
"""
import argparse
import base64
import hashlib
import json
import math
import random
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class GuessEnvironment:
    def __init__(self):
        self.lock = threading.Lock()
        self.episode_id = None
        self.step_count = 0
        self.secret = None
        self.lo = self.hi = 0
        self.attempts_left = 0
        self.done = True

    def reset(self, seed=None, episode_id=None):
        rng = random.Random(seed)
        self.lo = rng.randint(1, 60)
        self.hi = self.lo + rng.randint(7, 31)
        self.secret = rng.randint(self.lo, self.hi)
        self.attempts_left = math.ceil(math.log2(self.hi - self.lo + 1)) + 1
        self.episode_id = episode_id
        self.step_count = 0
        self.done = False
        return {"text": f"{self.lo}-{self.hi}?", "attempts_left": self.attempts_left, "won": False}, None, False

    def step(self, guess):
        if self.secret is None:
            raise RuntimeError("step before reset")
        self.step_count += 1
        self.attempts_left -= 1
        try:
            number = int(guess.strip())
        except ValueError:
            number = None
        if number == self.secret:
            self.done = True
            return {"text": "correct", "attempts_left": self.attempts_left, "won": True}, 1.0, True
        text = "not a number" if number is None else ("higher" if number < self.secret else "lower")
        self.done = self.attempts_left <= 0
        return {"text": text, "attempts_left": self.attempts_left, "won": False}, 0.0, self.done


def validate_action(action, where=("body", "action")):
    """The pydantic errors OpenEnv's Action model would give, or None. `where`
    starts each "loc": FastAPI's body path over HTTP, nothing over /ws."""
    where = list(where)
    if not isinstance(action, dict):
        return [{"type": "model_type", "loc": where, "msg": "Input should be a valid dictionary",
                 "input": action}]
    errors = []
    if "guess" not in action:
        errors.append({"type": "missing", "loc": where + ["guess"], "msg": "Field required",
                       "input": action})
    elif not isinstance(action["guess"], str):
        errors.append({"type": "string_type", "loc": where + ["guess"],
                       "msg": "Input should be a valid string", "input": action["guess"]})
    for key in action:
        if key not in ("guess", "metadata"):
            errors.append({"type": "extra_forbidden", "loc": where + [key],
                           "msg": "Extra inputs are not permitted", "input": action[key]})
    return errors or None


WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def read_exact(stream, count):
    data = b""
    while len(data) < count:
        chunk = stream.read(count - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def read_frame(stream):
    """One frame from the client (RFC 6455 section 5.2; client frames are masked)."""
    first, second = read_exact(stream, 2)
    opcode, fin = first & 0x0F, bool(first & 0x80)
    length = second & 0x7F
    if length == 126:
        length = struct.unpack("!H", read_exact(stream, 2))[0]
    elif length == 127:
        length = struct.unpack("!Q", read_exact(stream, 8))[0]
    if not second & 0x80:
        raise ConnectionError("unmasked client frame")
    mask = read_exact(stream, 4)
    payload = bytes(b ^ mask[i % 4] for i, b in enumerate(read_exact(stream, length)))
    return fin, opcode, payload


def write_frame(stream, opcode, payload):
    header = bytes([0x80 | opcode])
    if len(payload) < 126:
        header += bytes([len(payload)])
    elif len(payload) < 65536:
        header += bytes([126]) + struct.pack("!H", len(payload))
    else:
        header += bytes([127]) + struct.pack("!Q", len(payload))
    stream.write(header + payload)
    stream.flush()


class Sessions:
    def __init__(self, limit):
        self.lock = threading.Lock()
        self.open = 0
        self.limit = limit

    def enter(self):
        with self.lock:
            if self.open >= self.limit:
                return False
            self.open += 1
            return True

    def leave(self):
        with self.lock:
            self.open -= 1


def serve_websocket(handler, sessions, fault):
    key = handler.headers.get("Sec-WebSocket-Key", "")
    accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
    handler.send_response(101, "Switching Protocols")
    handler.send_header("Upgrade", "websocket")
    handler.send_header("Connection", "Upgrade")
    handler.send_header("Sec-WebSocket-Accept", accept)
    handler.end_headers()
    handler.wfile.flush()
    handler.close_connection = True

    def send(message):
        write_frame(handler.wfile, 0x1, json.dumps(message).encode())

    def error(message, code, **extra):
        send({"type": "error", "data": dict({"message": message, "code": code}, **extra)})

    if not sessions.enter():
        error("Server at capacity (max sessions reached)", "CAPACITY_REACHED")
        write_frame(handler.wfile, 0x8, struct.pack("!H", 1013))
        return
    environment = GuessEnvironment()
    try:
        pieces = b""
        while True:
            fin, opcode, payload = read_frame(handler.rfile)
            if opcode == 0x8:
                write_frame(handler.wfile, 0x8, payload[:2])
                return
            if opcode == 0x9:
                write_frame(handler.wfile, 0xA, payload)
                continue
            if opcode in (0x1, 0x0):
                pieces += payload
                if not fin:
                    continue
            else:
                continue
            text, pieces = pieces.decode("utf-8", "replace"), b""
            try:
                message = json.loads(text)
            except ValueError as failure:
                error(f"Invalid JSON: {failure}", "INVALID_JSON")
                continue
            kind = message.get("type") if isinstance(message, dict) else None
            data = message.get("data", {}) if isinstance(message, dict) else {}
            if kind == "reset":
                observation, reward, done = environment.reset(data.get("seed"), data.get("episode_id"))
                send({"type": "observation", "data": {"observation": observation, "reward": reward, "done": done}})
            elif kind == "step":
                errors = validate_action(data, where=())
                if errors:
                    error(f"{len(errors)} validation error(s) for GuessAction", "VALIDATION_ERROR", errors=errors)
                    continue
                if fault == "ws_hang_step":
                    threading.Event().wait()
                if fault == "ws_drop_step":
                    return
                try:
                    observation, reward, done = environment.step(data["guess"])
                except RuntimeError as failure:
                    error(str(failure), "EXECUTION_ERROR")
                    continue
                send({"type": "observation", "data": {"observation": observation, "reward": reward, "done": done}})
            elif kind == "state":
                send({"type": "state", "data": {"episode_id": environment.episode_id,
                                                "step_count": environment.step_count}})
            elif kind == "close":
                write_frame(handler.wfile, 0x8, struct.pack("!H", 1000))
                return
            else:
                error(f"Unknown message type: {kind}", "UNKNOWN_TYPE")
    except (ConnectionError, OSError):
        pass
    finally:
        sessions.leave()


def make_handler(environment, fault, sessions):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def reply(self, status, value, content_type="application/json"):
            body = value if isinstance(value, bytes) else json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def read_body(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not raw:
                return {}
            try:
                return json.loads(raw)
            except ValueError as error:
                self.reply(422, {"detail": [{"type": "json_invalid", "loc": ["body", 0],
                                             "msg": f"JSON decode error: {error}", "input": {}}]})
                return None

        def do_GET(self):
            if self.path == "/ws" and self.headers.get("Upgrade", "").lower() == "websocket" and fault != "no_ws":
                return serve_websocket(self, sessions, fault)
            if self.path == "/health":
                if fault == "unhealthy":
                    return self.reply(503, {"detail": "starting"})
                return self.reply(200, {"status": "healthy"})
            if self.path == "/state":
                with environment.lock:
                    return self.reply(200, {"episode_id": environment.episode_id,
                                            "step_count": environment.step_count})
            if self.path in ("/reset", "/step"):
                return self.reply(405, {"detail": "Method Not Allowed"})
            return self.reply(404, {"detail": "Not Found"})

        def do_POST(self):
            if self.path in ("/health", "/state"):
                return self.reply(405, {"detail": "Method Not Allowed"})
            if self.path not in ("/reset", "/step"):
                return self.reply(404, {"detail": "Not Found"})
            body = self.read_body()
            if body is None:
                return
            if not isinstance(body, dict):
                return self.reply(422, {"detail": [{"type": "model_attributes_type", "loc": ["body"],
                                                    "msg": "Input should be a valid dictionary", "input": body}]})
            if self.path == "/reset":
                with environment.lock:
                    observation, reward, done = environment.reset(body.get("seed"), body.get("episode_id"))
                return self.reply(200, {"observation": observation, "reward": reward, "done": done})
            if "action" not in body:
                return self.reply(422, {"detail": [{"type": "missing", "loc": ["body", "action"],
                                                    "msg": "Field required", "input": body}]})
            errors = validate_action(body["action"])
            if errors:
                return self.reply(422, {"detail": errors})
            if fault == "hang_step":
                threading.Event().wait()
            if fault == "bad_json_step":
                return self.reply(200, b"{\"observation\": {\"text\": ", "application/json")
            if fault == "error_step":
                return self.reply(500, b"Internal Server Error", "text/plain; charset=utf-8")
            try:
                with environment.lock:
                    observation, reward, done = environment.step(body["action"]["guess"])
            except RuntimeError:
                return self.reply(500, b"Internal Server Error", "text/plain; charset=utf-8")
            if fault == "no_done":
                return self.reply(200, {"observation": observation, "reward": reward})
            return self.reply(200, {"observation": observation, "reward": reward, "done": done})

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--fault", default="none",
                        choices=["none", "hang_step", "bad_json_step", "no_done", "error_step", "unhealthy",
                                 "ws_hang_step", "ws_drop_step", "no_ws"])
    parser.add_argument("--max-sessions", type=int, default=64)
    args = parser.parse_args()
    ThreadingHTTPServer.allow_reuse_address = True
    ThreadingHTTPServer.daemon_threads = True
    server = ThreadingHTTPServer((args.host, args.port), make_handler(GuessEnvironment(), args.fault, Sessions(args.max_sessions)))
    print(f"listening {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
