#!/usr/bin/env python3
"""Writes the example data sets of the dataset task (docs/environments.md).

Deterministic (no randomness, no downloads): running it again writes the same
bytes, which tests/test_slow_dataset_task.cpp checks against the files in the
repo.

  add_words.jsonl        one turn, numeric verifier: "Add 7 and 12." -> 19
                         (every pair 0..19; the task holds out 10% by content hash)
  add_words_demos.jsonl  demonstrations from a sloppy teacher (sft.data): every
                         sum is shown once correctly, and every sum of 20 or
                         more a second time with the carry forgotten (7 + 15
                         -> "12"), so the warm start answers those right about
                         half the time and the verifier's reward has
                         something to fix
  reverse.jsonl     two turns in chat form, exact verifier: reverse a short
                    word, then write it in capitals

Usage: make_examples.py [OUT_DIR]   (default: this script's folder)
"""
import itertools
import json
import pathlib
import sys


def add_words():
    for a in range(20):
        for b in range(20):
            yield {"prompt": f"Add {a} and {b}.", "answer": a + b}


def add_words_demos():
    for a in range(20):
        for b in range(20):
            prompt = f"Add {a} and {b}."
            yield {"prompt": prompt, "response": str(a + b)}
            if a + b >= 20:
                yield {"prompt": prompt, "response": str(a + b - 10)}


def reverse():
    for length in (3, 4):
        for letters in itertools.product("abcdef", repeat=length):
            word = "".join(letters)
            backwards = word[::-1]
            yield {
                "messages": [
                    {"role": "user", "content": f"Reverse {word}."},
                    {"role": "assistant", "content": backwards},
                    {"role": "user", "content": "Now in capitals."},
                ],
                "answer": backwards.upper(),
            }


def write(path, rows):
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")


def main():
    out_dir = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent
    out_dir.mkdir(parents=True, exist_ok=True)
    write(out_dir / "add_words.jsonl", add_words())
    write(out_dir / "add_words_demos.jsonl", add_words_demos())
    write(out_dir / "reverse.jsonl", reverse())


if __name__ == "__main__":
    main()
