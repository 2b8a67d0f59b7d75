#!/usr/bin/env python3
"""A deterministic one-turn external environment for tests (stdlib only).

Episode n shows "n+1=" and scores the action against n+1 (reward 1, info
success). Held-out episode i is n = i; a training episode is n = seed mod 1000.

  plus_one.py [--pids FILE] [--refuse I,J,...]

--pids appends this process's pid to FILE when it starts, so a test counts
process starts as lines. --refuse answers the resets of those held-out
episodes with an error reply (the environment's fault, not the policy's).
"""
import json
import os
import sys


def main(args):
    refused = set()
    if "--pids" in args:
        with open(args[args.index("--pids") + 1], "a") as log:
            log.write(f"{os.getpid()}\n")
    if "--refuse" in args:
        refused = {int(i) for i in args[args.index("--refuse") + 1].split(",")}
    target = ""
    for line in sys.stdin:
        request = json.loads(line)
        i, method = request["id"], request["method"]
        if method == "close":
            break
        if method == "reset":
            n = request["heldout"] if "heldout" in request else request.get("seed", 0) % 1000
            if "heldout" in request and n in refused:
                print(json.dumps({"id": i, "error": f"level {n} is missing"}), flush=True)
                continue
            target = str(n + 1)
            print(json.dumps({"id": i, "observation": f"{n}+1=", "reward": 0.0, "terminated": False,
                              "truncated": False, "info": {"episode_key": str(n)}}), flush=True)
        elif method == "step":
            ok = request["action"].strip() == target
            print(json.dumps({"id": i, "observation": "", "reward": 1.0 if ok else 0.0, "terminated": True,
                              "truncated": False, "info": {"success": ok}}), flush=True)
        else:
            print(json.dumps({"id": i, "error": f"unknown method {method}"}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
