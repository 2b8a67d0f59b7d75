#!/usr/bin/env bash
# The asynchronous speed-up where it exists: environments that spend wall
# time waiting (tool calls, sandboxes, remote services) rather than the
# trainer's CPU. Each run trains the same warm start for STEPS learner steps
# of 64 trajectories (sync GRPO: N x 8 when N > 8) with a simulated env
# latency (env.latency, long-tailed lognormal, mean L ms, on every reset and
# step) and N rollout actors (64 / N episodes each, GRPO at least 8), in
# three modes:
#   sao_async  SAO as shipped: rollouts and learner overlap
#   sao_sync   the same SAO behind the synchronous barrier (train.mode=sync):
#              every rollout's round, then one learner step, then new rounds
#   grpo_sync  synchronous GRPO, G = 8 (config/grpo_arith.json)
# and prints, per run, trajectories/s and learner steps/s (from the end of
# the first step to the end of the last), the wall time of the whole run,
# held-out accuracy at the end, and the speed-up of sao_async over each
# synchronous mode measured in the same sweep. bench/scaling_model.py
# latency OUT predicts every run from the latency-0 runs' measured costs.
#
#   bench/async_latency.sh SFT_CHECKPOINT [--steps S] [--actors "1 4 16"]
#                          [--latency "0 100 500"] [--modes "sao_async sao_sync grpo_sync"] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
sft=${1:?usage: bench/async_latency.sh SFT_CHECKPOINT [--steps S] [--actors LIST] [--latency LIST] [--modes LIST] [--out DIR]}
shift
steps=20
actors="1 4 16"
latencies="0 100 500"
modes="sao_async sao_sync grpo_sync"
out=$(mktemp -d /tmp/sao_async_latency.XXXX)
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --actors) actors=$2; shift 2 ;;
    --latency) latencies=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "async_latency: unknown option $1" >&2; exit 2 ;;
  esac
done
sao=${SAO_BIN:-./build/sao}
[ -x "$sao" ] || { echo "async_latency: build first (deploy/build.sh), or set SAO_BIN" >&2; exit 2; }
[ -f "$sft/model.safetensors" ] || { echo "async_latency: no warm start at $sft (run sao sft first)" >&2; exit 2; }
mkdir -p "$out"

run() {  # run MODE ACTORS LATENCY_MS
  local mode=$1 n=$2 latency=$3 dir=$out/$1_n$2_l$3
  [ -f "$dir/summary.json" ] && return
  local flags=(--set train.init_checkpoint="$sft" --set console.enabled=false --set train.eval_every=0
               --set train.checkpoint_every=0 --set train.steps="$steps" --set rollout.num_actors="$n"
               --set rollout.slots=$((64 / n > 1 ? 64 / n : 1)))
  if [ "$latency" != 0 ]; then
    # The timeout above the latency cap (20 x mean), so no episode is lost to it.
    flags+=(--set env.latency=lognormal --set env.latency_ms="$latency" --set rollout.env_timeout_ms=$((40 * latency + 5000)))
  fi
  case "$mode" in
    sao_async) flags+=(--set replay.min_batch=64 --set replay.max_batch=64) ;;
    sao_sync) flags+=(--set train.mode=sync) ;;
    grpo_sync) flags=(--config config/grpo_arith.json "${flags[@]}") ;;
    *) echo "async_latency: unknown mode $mode" >&2; exit 2 ;;
  esac
  # GRPO needs whole groups of 8 per rollout batch.
  [ "$mode" = grpo_sync ] && flags+=(--set rollout.slots=$((64 / n > 8 ? 64 / n : 8)))
  echo "async_latency: $mode, $n rollout actors, latency $latency ms" >&2
  "$sao" train --run-dir "$dir" "${flags[@]}" > "$dir.log" 2>&1 ||
    { echo "async_latency: $mode n=$n latency=$latency failed, see $dir.log" >&2; return; }
}

for latency in $latencies; do
  for n in $actors; do
    for mode in $modes; do run "$mode" "$n" "$latency"; done
  done
done

python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
rows = {}
for name in sorted(os.listdir(out)):
    path = os.path.join(out, name, "metrics.jsonl")
    if not os.path.isfile(path):
        continue
    lines = [json.loads(line) for line in open(path)]
    steps = [s for s in lines if "trajectories" in s and "wall_time_s" in s]
    evals = [s for s in lines if s.get("eval")]
    if len(steps) < 2:
        continue
    # From the end of the first step to the end of the last: start-up and the
    # first batch's fill are not throughput.
    wall = steps[-1]["wall_time_s"] - steps[0]["wall_time_s"]
    trajectories = sum(s["trajectories"] for s in steps[1:])
    mode, n, latency = name.rsplit("_n", 1)[0], *name.rsplit("_n", 1)[1].split("_l")
    accuracy = evals[-1]["heldout_accuracy"] if len(evals) >= 2 else None
    rows[(int(latency), int(n), mode)] = (trajectories / wall, (len(steps) - 1) / wall, steps[-1]["wall_time_s"], accuracy)
print(f"{'latency ms':>10} {'actors':>6} {'mode':>10} {'traj/s':>8} {'steps/s':>8} {'run wall s':>10} "
      f"{'held-out':>8} {'async speed-up':>15}")
for (latency, n, mode), (tps, sps, wall, accuracy) in sorted(rows.items()):
    base = rows.get((latency, n, "sao_async"))
    ratio = f"{base[0] / tps:.2f}x" if base and mode != "sao_async" else ""
    held_out = f"{accuracy:.4f}" if accuracy is not None else "-"
    print(f"{latency:>10} {n:>6} {mode:>10} {tps:>8.1f} {sps:>8.2f} {wall:>10.1f} {held_out:>8} {ratio:>15}")
print("async speed-up: sao_async trajectories/s over this mode's, same latency and actors, same sweep;")
print("run wall s: the last learner step's wall time (start-up and warm start excluded); held-out: the final eval")
PY
echo "runs kept in $out" >&2
