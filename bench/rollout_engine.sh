#!/usr/bin/env bash
# The rollout engine's four numbers, each an A/B measured in this one
# invocation with the same warm start and seed:
#   continuous/lockstep trajectories/s, maze       bench_rollout_engine: the same engine,
#   continuous/lockstep trajectories/s, countdown  refilling each slot at once vs. waiting
#                                                  for the whole batch (median over rounds),
#                                                  env replies after a lognormal LATENCY ms
#                                                  (default 50: a tool call); the same at
#                                                  0 ms is printed above them: the engine alone
#   async/sync-grpo trajectories/s at 500 ms lognormal env latency, 4 actors
#                                                  bench/async_latency.sh: SAO async vs
#                                                  synchronous GRPO, same latency and actors
#   kv memory, paged/dense at equal trajectories   the paged pool's peak storage over rows x
#                                                  the longest row's context of the lockstep
#                                                  sessions (the larger of the two tasks)
# Warm starts are trained first (sao sft) into OUT and reused by a rerun.
#
#   bench/rollout_engine.sh [--out DIR] [--rounds N] [--episodes N] [--slots N] [--steps S] [--seed N]
#                           [--latency MS]
set -euo pipefail
cd "$(dirname "$0")/.."
out=/tmp/sao_rollout_engine
rounds=3
episodes=256
slots=32
steps=20
seed=1
latency=50
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --episodes) episodes=$2; shift 2 ;;
    --slots) slots=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --latency) latency=$2; shift 2 ;;
    *) echo "rollout_engine: unknown option $1" >&2; exit 2 ;;
  esac
done
sao=${SAO_BIN:-./build/sao}
bench=${SAO_BENCH:-./build/bench/bench_rollout_engine}
[ -x "$sao" ] && [ -x "$bench" ] || { echo "rollout_engine: build first (deploy/build.sh)" >&2; exit 2; }
mkdir -p "$out"

warm_start() {  # warm_start NAME CONFIG: trains OUT/NAME/sft once
  local name=$1 config=$2
  if [ ! -f "$out/$name/sft/model.safetensors" ]; then
    echo "rollout_engine: warm start for $name" >&2
    "$sao" sft --config "$config" --run-dir "$out/$name" --set run.seed="$seed" > "$out/$name.sft.log" 2>&1 ||
      { echo "rollout_engine: sao sft for $name failed, see $out/$name.sft.log" >&2; exit 1; }
  fi
}

warm_start maze config/sao_agentic.json
warm_start countdown config/sao_countdown.json
warm_start arithmetic config/default.json

for task in maze countdown; do
  config=config/sao_agentic.json
  [ "$task" = countdown ] && config=config/sao_countdown.json
  for ms in "$latency" 0; do
    "$bench" --config "$config" --checkpoint "$out/$task/sft" --label "$task" --episodes "$episodes" --slots "$slots" \
      --rounds "$rounds" --seed "$seed" --latency-ms "$ms" | tee "$out/$task.l$ms.bench.txt" >&2
  done
done

bench/async_latency.sh "$out/arithmetic/sft" --steps "$steps" --actors 4 --latency 500 \
  --modes "sao_async grpo_sync" --out "$out/async" > "$out/async.txt"
cat "$out/async.txt" >&2

ratio_of() {  # ratio_of FILE PREFIX: the X.XXx at the end of the line starting with PREFIX
  grep -h "^$2" "$1" | sed 's/.* //'
}
echo
echo "at 0 ms env latency (the engine alone): continuous/lockstep trajectories/s" \
  "maze $(ratio_of "$out/maze.l0.bench.txt" "continuous/lockstep"), countdown $(ratio_of "$out/countdown.l0.bench.txt" "continuous/lockstep")"
echo "at ${latency} ms lognormal env latency:"
grep -h "^continuous/lockstep trajectories/s" "$out/maze.l$latency.bench.txt" "$out/countdown.l$latency.bench.txt"
python3 - "$out/async.txt" <<'PY'
import sys
for line in open(sys.argv[1]):
    fields = line.split()
    if len(fields) >= 8 and fields[0] == "500" and fields[1] == "4" and fields[2] == "grpo_sync":
        print(f"async/sync-grpo trajectories/s at 500 ms lognormal env latency, 4 actors: {fields[-1]}")
        break
else:
    sys.exit("rollout_engine: no 500 ms, 4-actor grpo_sync row in " + sys.argv[1])
PY
python3 - "$out/maze.l$latency.bench.txt" "$out/countdown.l$latency.bench.txt" <<'PY'
import sys
ratios = []
for path in sys.argv[1:]:
    for line in open(path):
        if line.startswith("kv memory, paged/dense at equal trajectories"):
            ratios.append(float(line.rsplit(" ", 1)[1].rstrip("x\n")))
print(f"kv memory, paged/dense at equal trajectories: {max(ratios):.2f}x")
PY
