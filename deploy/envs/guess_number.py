#!/usr/bin/env python3
"""Guess the number: an example external environment for sao (stdlib only).

The protocol (docs/environments.md): one JSON request per line on stdin, one
JSON reply per line on stdout. Logs go to stderr, never stdout.

The game: the environment picks a secret integer in [lo, hi] and shows
"lo-hi?" (e.g. "17-40?"). Each turn the policy answers a number; the
environment says "higher" or "lower" until the guess is right (reward 1,
terminated) or the guesses run out (reward 0, terminated). Binary search
always wins: the guess budget is ceil(log2(hi - lo + 1)) + 1.

Held-out split: an episode is (lo, hi, secret); those whose crc32 hash is
0 mod 10 are held out. reset with "seed" never yields one; reset with
"heldout": i yields the i-th of a fixed list of HELDOUT_SIZE of them.

Run modes:
  python3 guess_number.py                          # stdin/stdout (the "command" route)
  python3 guess_number.py --listen 127.0.0.1:9000  # TCP (the "address" route), one game per connection
  python3 guess_number.py --listen 127.0.0.1:0 --once
      prints "listening HOST:PORT" on stdout, serves one connection, exits.
"""
import json
import math
import random
import socket
import sys
import threading
import zlib

HELDOUT_SIZE = 50


def is_heldout(lo, hi, secret):
    return zlib.crc32(f"{lo}-{hi}:{secret}".encode()) % 10 == 0


def draw(rng):
    lo = rng.randint(1, 60)
    hi = lo + rng.randint(7, 31)
    return lo, hi, rng.randint(lo, hi)


def heldout_list():
    rng, found, seen = random.Random(12345), [], set()
    while len(found) < HELDOUT_SIZE:
        episode = draw(rng)
        if is_heldout(*episode) and episode not in seen:
            seen.add(episode)
            found.append(episode)
    return found


HELDOUT = heldout_list()


class Game:
    def __init__(self):
        self.open = False

    def reset(self, request):
        if "heldout" in request:
            index = request["heldout"]
            if not isinstance(index, int) or not 0 <= index < HELDOUT_SIZE:
                raise ValueError(f"heldout index {index!r} outside [0, {HELDOUT_SIZE})")
            self.lo, self.hi, self.secret = HELDOUT[index]
        else:
            seed = request.get("seed")
            if not isinstance(seed, int):
                raise ValueError("reset needs an integer seed")
            rng = random.Random(seed)
            while True:
                self.lo, self.hi, self.secret = draw(rng)
                if not is_heldout(self.lo, self.hi, self.secret):
                    break
        self.left = math.ceil(math.log2(self.hi - self.lo + 1)) + 1
        self.guesses = 0
        self.open = True
        key = f"{self.lo}-{self.hi}:{self.secret}"
        return {"observation": f"{self.lo}-{self.hi}?", "reward": 0.0, "terminated": False,
                "truncated": False, "info": {"episode_key": key, "budget": self.left}}

    def step(self, request):
        if not self.open:
            raise ValueError("step before reset or after the episode ended")
        action = request.get("action")
        if not isinstance(action, str):
            raise ValueError("step needs a string action")
        self.left -= 1
        self.guesses += 1
        try:
            guess = int(action.strip())
        except ValueError:
            guess = None
        if guess == self.secret:
            self.open = False
            return {"observation": "", "reward": 1.0, "terminated": True, "truncated": False,
                    "info": {"success": 1, "accuracy": 1.0, "guesses": self.guesses}}
        if self.left <= 0:
            self.open = False
            return {"observation": "", "reward": 0.0, "terminated": True, "truncated": False,
                    "info": {"success": 0, "accuracy": 0.0, "guesses": self.guesses}}
        hint = "number?" if guess is None else ("higher" if guess < self.secret else "lower")
        return {"observation": hint, "reward": 0.0, "terminated": False, "truncated": False, "info": {}}


def serve(lines, write):
    """Answers requests until close or EOF."""
    game = Game()
    for line in lines:
        if not line.strip():
            continue
        request_id = None
        try:
            request = json.loads(line)
            request_id = request.get("id")
            method = request.get("method")
            if method == "close":
                write({"id": request_id})
                return
            if method == "reset":
                reply = game.reset(request)
            elif method == "step":
                reply = game.step(request)
            else:
                raise ValueError(f"unknown method {method!r}")
        except Exception as error:  # report, keep serving
            reply = {"error": str(error)}
        reply["id"] = request_id
        write(reply)


def serve_stdio():
    def write(reply):
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    serve(sys.stdin, write)


def serve_connection(connection):
    with connection, connection.makefile("r", encoding="utf-8") as reader, \
            connection.makefile("w", encoding="utf-8") as writer:
        def write(reply):
            writer.write(json.dumps(reply) + "\n")
            writer.flush()
        try:
            serve(reader, write)
        except (BrokenPipeError, ConnectionResetError):
            pass


def serve_tcp(address, once):
    host, _, port = address.rpartition(":")
    server = socket.create_server((host, int(port)))
    print("listening %s:%d" % server.getsockname()[:2], flush=True)
    with server:
        while True:
            connection, _ = server.accept()
            if once:
                serve_connection(connection)
                return
            threading.Thread(target=serve_connection, args=(connection,), daemon=True).start()


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--listen"] and len(args) >= 2:
        serve_tcp(args[1], "--once" in args)
    elif not args:
        serve_stdio()
    else:
        sys.exit(__doc__)
