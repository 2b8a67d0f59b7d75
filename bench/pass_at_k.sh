#!/usr/bin/env bash
# Headroom for RL, task by task (issue #18): trains each task's SFT warm
# start, then prints greedy pass@1 next to pass@k of K sampled attempts per
# held-out problem (temperature 1). RL with a verifier can lift greedy pass@1
# toward what sampling already finds; a task where pass@K is not well above
# pass@1 leaves RL little to do.
#
#   bench/pass_at_k.sh [--k K] [--seed S] [--out DIR] [--only name,name]
#
# Tasks: arithmetic (the default run's: a teacher who shows its work on half
# the problems, after a curriculum phase where it always does), arithmetic_plain
# (plain answers only, the default before 2026-12-06), arithmetic_reversed,
# arithmetic_3digit,
# add_words (the dataset example with its sloppy teacher), maze (agentic),
# calculator (tool use), countdown (reach a target with three numbers) and
# countdown_3turns (the same with the verifier's feedback and two retries;
# 600 SFT steps, ~11 min of the run). Warm starts are kept under DIR (default
# runs/pass_at_k) and reused when DIR/TASK/sft exists. Ends with a markdown
# table (the one in docs/decisions.md).
set -euo pipefail
cd "$(dirname "$0")/.."
sao=./build/sao
k=8
seed=1
out=runs/pass_at_k
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --k) k=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "pass_at_k: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[ -x "$sao" ] || { echo "pass_at_k: build sao first (deploy/build.sh)" >&2; exit 1; }
mkdir -p "$out"

# name|sft arguments (the same arguments are given to eval)
tasks=(
  "arithmetic|"
  "arithmetic_plain|--config config/arith_plain.json"
  "arithmetic_reversed|--config config/arith_plain.json --set task.answer_format=reversed"
  "arithmetic_3digit|--config config/arith_plain.json --set task.max_digits=3"
  "add_words|--config examples/datasets/add_words.json"
  "maze|--config config/sao_agentic.json"
  "calculator|--config examples/tools/calculator.json"
  "countdown|--config config/sao_countdown.json"
  "countdown_3turns|--config config/sao_countdown.json --set task.max_turns=3 --set task.retry_demonstration_rate=0.5 --set rollout.max_turns=3 --set sft.steps=600"
)
sft_data_of() {
  case "$1" in
    add_words) echo "--data examples/datasets/add_words_demos.jsonl" ;;
    *) echo "" ;;
  esac
}

results="$out/results.jsonl"
: > "$results"
for entry in "${tasks[@]}"; do
  name=${entry%%|*}
  args=${entry#*|}
  if [ -n "$only" ] && [[ ",$only," != *",$name,"* ]]; then continue; fi
  dir="$out/$name"
  if [ ! -f "$dir/sft/model.safetensors" ]; then
    start=$(date +%s)
    # shellcheck disable=SC2086  # args are words by design
    "$sao" sft --run-dir "$dir" $args $(sft_data_of "$name") --set "run.seed=$seed" --set console.enabled=false \
      > "$dir.sft.log" 2>&1 || { echo "pass_at_k: sft of $name failed, see $dir.sft.log" >&2; exit 1; }
    echo "pass_at_k: $name warm start in $(( $(date +%s) - start )) s" >&2
  fi
  # shellcheck disable=SC2086
  "$sao" eval --checkpoint "$dir/sft" $args --set "run.seed=$seed" --pass-k "$k" > "$dir.eval.log" 2>&1 ||
    { echo "pass_at_k: eval of $name failed, see $dir.eval.log" >&2; exit 1; }
  python3 - "$name" "$dir.eval.log" >> "$results" <<'PY'
import json, sys
name, log = sys.argv[1], sys.argv[2]
line = [l for l in open(log) if l.startswith("{")][-1]
row = json.loads(line)
row["task"] = name
print(json.dumps(row))
PY
done

python3 - "$results" "$k" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
k = sys.argv[2]
ks = sorted({int(x) for r in rows for x in r["pass_at"]})
print("| task | held-out problems | greedy pass@1 | " + " | ".join(f"pass@{x}" for x in ks) +
      f" | pass@{k} - greedy |")
print("|---|---|---|" + "---|" * len(ks) + "---|")
for r in rows:
    cells = [f"{r['pass_at'][str(x)]:.3f}" for x in ks]
    print(f"| {r['task']} | {r['problems']} | {r['greedy_accuracy']:.3f} | " + " | ".join(cells) +
          f" | {r['pass_at'][k] - r['greedy_accuracy']:+.3f} |")
PY
