#!/usr/bin/env python3
"""Fails when an include points up the layers or across siblings.

The layers, lowest first (CONTRIBUTING.md explains them). A file may include
its own folder and any folder of a lower layer; folders on the same layer do
not see each other. Generated headers (sao/...) count as the lowest layer.

Usage: tools/check_layers.py [REPO_ROOT]   (exit 1 and one line per violation)
       tools/check_layers.py --self-test   (checks that the checker catches each kind of violation)
"""
import pathlib
import re
import sys

LAYERS = [
    ["sao", "base"],                    # error, json reading, stats; generated build facts
    ["tokenizer", "model", "env", "report", "net"],  # net: the bulk weight channel (sockets, OpenSSL)
    ["algo", "gpu"],                    # the learner's maths; GPU weight transports (CUDA IPC, NCCL)
    ["replay", "weights"],              # weights: packets, checksums, deltas, transports
    ["rollout", "agent"],               # the one episode state machine; the chat wire format of agents
    ["config"],                         # run config and live knobs: sees every module below
    ["train"],                          # SFT and held-out evaluation
    ["plot"],                           # Cairo, for `sao plot` only
    ["actors"],                         # CAF: typed protocol and thin actors
    ["app"],                            # the sao binary
]
RANK = {folder: rank for rank, folders in enumerate(LAYERS) for folder in folders}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SYSTEM_INCLUDE = re.compile(r'^\s*#\s*include\s+<([^>]+)>')
# Third-party headers that only some layers may see: CAF only above the core,
# Cairo only in the plot library, cpp-httplib only in the actors (console) and
# the environments (the OpenEnv client, env/remote/openenv_env.cpp), websocketpp and
# asio only in the environments (env/remote/websocket_client.cpp).
RESTRICTED = {
    "caf/": {"actors", "app"},
    "cairo": {"plot"},
    "httplib": {"actors", "app", "env"},
    "websocketpp/": {"env"},
    "asio": {"env"},
    "cuda_runtime": {"gpu"},
    "nccl.h": {"gpu"},
}


def folder_of(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = path.relative_to(root).parts
    if parts[0] == "src":
        return parts[1] if len(parts) > 2 else "base"  # src/pch.hpp: the shared precompiled header
    return parts[0]


def check(root: pathlib.Path) -> list:
    sources = [p for d in ("src", "actors", "app") for p in (root / d).rglob("*") if p.suffix in (".hpp", ".cpp", ".h")]
    violations = []
    for path in sorted(sources):
        here = folder_of(path, root)
        if here not in RANK:
            violations.append(f"{path.relative_to(root)}: folder '{here}' has no layer in tools/check_layers.py")
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            system = SYSTEM_INCLUDE.match(line)
            if system:
                for prefix, allowed in RESTRICTED.items():
                    if system.group(1).startswith(prefix) and here not in allowed:
                        violations.append(f"{path.relative_to(root)}:{number}: '{here}' includes <{system.group(1)}>, "
                                          f"allowed only in {', '.join(sorted(allowed))}")
                continue
            match = INCLUDE.match(line)
            if not match:
                continue
            target = match.group(1).split("/")[0]
            if target == here or "/" not in match.group(1):
                continue
            if target not in RANK:
                violations.append(f"{path.relative_to(root)}:{number}: includes '{match.group(1)}' from unknown folder '{target}'")
            elif RANK[target] >= RANK[here]:
                kind = "a sibling" if RANK[target] == RANK[here] else "a higher layer"
                violations.append(f"{path.relative_to(root)}:{number}: '{here}' includes '{match.group(1)}', {kind}")
    return violations, len(sources)


def self_test() -> int:
    import tempfile
    cases = {
        "src/base/a.hpp": ('#include "model/x.hpp"', "a higher layer"),
        "src/model/a.hpp": ('#include "env/x.hpp"', "a sibling"),
        "src/algo/a.cpp": ("#include <caf/all.hpp>", "allowed only in"),
        "actors/a.cpp": ('#include "app/x.hpp"', "a higher layer"),
        "src/newdir/a.cpp": ('#include "base/error.hpp"', "has no layer"),
        "src/env/a.cpp": ("#include <cairo.h>", "allowed only in plot"),
    }
    failures = 0
    for path, (line, expected) in cases.items():
        with tempfile.TemporaryDirectory() as directory:
            root = pathlib.Path(directory)
            for folder in ("src", "actors", "app"):
                (root / folder).mkdir()
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(line + "\n", encoding="utf-8")
            (root / "src/base").mkdir(parents=True, exist_ok=True)
            (root / "src/base/ok.hpp").write_text('#include "base/error.hpp"\n#include <vector>\n', encoding="utf-8")
            violations, _ = check(root)
            if len(violations) != 1 or expected not in violations[0]:
                print(f"self-test: {path} with {line!r}: expected one violation containing {expected!r}, got {violations}")
                failures += 1
    print(f"check_layers self-test: {len(cases) - failures}/{len(cases)} cases caught")
    return 1 if failures else 0


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        return self_test()
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    violations, count = check(root)
    for violation in violations:
        print(violation)
    if violations:
        print(f"check_layers: {len(violations)} include(s) break the layering", file=sys.stderr)
        return 1
    print(f"check_layers: {count} files, every include points down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
