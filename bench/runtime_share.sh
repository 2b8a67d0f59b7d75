#!/usr/bin/env bash
# Where the CPU of a training process goes: model maths (learner steps,
# decode, evaluation), environment calls, weight (de)serialisation, and the
# rest (the actor runtime: scheduler workers, messaging; metrics; bookkeeping),
# from the time accounting every run writes to summary.json. Runs the same
# RL run (same warm start, same number of learner steps) under each CAF
# scheduler policy, alternating so a change in machine load hits both, and
# prints per run: steps/s, process CPU per learner step, the share of each
# kind of work, the CPU of the scheduler workers, and the ratios between the
# policies.
#
#   bench/runtime_share.sh SFT_CHECKPOINT [STEPS=150] [PAIRS=2] [-- extra sao train flags]
set -euo pipefail
cd "$(dirname "$0")/.."
sft=${1:?usage: bench/runtime_share.sh SFT_CHECKPOINT [STEPS] [PAIRS] [-- flags]}
steps=${2:-150}
pairs=${3:-2}
shift $(($# < 3 ? $# : 3))
[ "${1:-}" = "--" ] && shift
extra=("$@")
out=$(mktemp -d /tmp/sao_runtime_share.XXXX)

run() {  # run NAME POLICY
  ./build/sao train --run-dir "$out/$1" --steps "$steps" --set train.init_checkpoint="$sft" \
    --set console.enabled=false --set train.eval_every=0 --set train.checkpoint_every=0 \
    --set train.scheduler_policy="$2" "${extra[@]}" > "$out/$1.log" 2>&1
}

for pair in $(seq 1 "$pairs"); do
  run "stealing_$pair" stealing
  run "sharing_$pair" sharing
done

python3 - "$out" "$pairs" <<'PY'
import json, os, statistics, sys
out, pairs = sys.argv[1], int(sys.argv[2])

def load(name):
    steps = [json.loads(l) for l in open(os.path.join(out, name, "metrics.jsonl"))
             if '"eval"' not in l and '"event"' not in l]
    summary = json.load(open(os.path.join(out, name, "summary.json")))
    accounting = summary["time_accounting"]
    node = next(iter(accounting["nodes"].values()))
    threads = accounting["threads_cpu_s"]
    wall = steps[-1]["wall_time_s"] - steps[0]["wall_time_s"]
    busy = {a["kind"]: a["busy_frac"] for a in accounting["actors"] if a["kind"] in ("learner", "rollout")}
    return {
        "steps_per_s": (len(steps) - 1) / wall,
        "cpu_per_step_ms": 1e3 * node["process_cpu_s"] / len(steps),
        "model": node.get("model_cpu_s", 0) / node["process_cpu_s"],
        "env": node.get("env_cpu_s", 0) / node["process_cpu_s"],
        "weights": node.get("weights_cpu_s", 0) / node["process_cpu_s"],
        "other": node["other_cpu_share"],
        "workers_cpu_s": threads.get("caf.multiplexer", 0.0),
        "workers_share": threads.get("caf.multiplexer", 0.0) / node["process_cpu_s"],
        "learner_busy": busy.get("learner", float("nan")),
        "rollout_busy": busy.get("rollout", float("nan")),
    }

columns = ["steps_per_s", "cpu_per_step_ms", "model", "env", "weights", "other", "workers_cpu_s", "workers_share",
           "learner_busy", "rollout_busy"]
print("run            " + " ".join(f"{c:>15}" for c in columns))
results = {"stealing": [], "sharing": []}
for pair in range(1, pairs + 1):
    for policy in ("stealing", "sharing"):
        row = load(f"{policy}_{pair}")
        results[policy].append(row)
        print(f"{policy + '_' + str(pair):<15}" + " ".join(f"{row[c]:>15.3f}" for c in columns))
print()
for policy, rows in results.items():
    print(f"{policy:<15}" + " ".join(f"{statistics.fmean(r[c] for r in rows):>15.3f}" for c in columns))
mean = {p: {c: statistics.fmean(r[c] for r in rows) for c in columns} for p, rows in results.items()}
print()
print(f"sharing/stealing steps/s {mean['sharing']['steps_per_s'] / mean['stealing']['steps_per_s']:.3f}, "
      f"CPU per step {mean['sharing']['cpu_per_step_ms'] / mean['stealing']['cpu_per_step_ms']:.3f}")
print("(model/env/weights/other: shares of the process CPU while the actors ran; workers: CAF scheduler threads,")
print(" which CAF 0.17 names caf.multiplexer; busy: work wall time / actor lifetime)")
print(f"runs kept in {out}")
PY
