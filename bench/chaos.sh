#!/usr/bin/env bash
# Chaos soak of a local cluster (deploy/local-cluster): one learner, N rollout
# nodes and M env nodes, trained for STEPS learner steps while the script
# kill -9s a random rollout or env node every ~KILL_EVERY steps (and starts it
# again under its old name) and kill -9s the learner LEARNER_KILLS times,
# evenly spaced, restarting it with --resume. Then the same cluster runs
# without faults from the same warm start and seed, and the script prints
#
#   steps completed, faults injected, episodes lost (the learner's count),
#   duplicated and missing step numbers in metrics.jsonl (both must be 0),
#   final held-out accuracy with faults vs without.
#
#   bench/chaos.sh [--sao BIN] [--steps N] [--kill-every K] [--learner-kills L]
#                  [--rollouts R] [--env-nodes M] [--seed S] [-- LEARNER ARGS...]
#
# Defaults: 1000 steps, a kill every 50, 2 learner kills, 2 rollout nodes,
# 1 env node, seed 1, the default model and its default SFT warm start.
# Exit status 1 when a step is duplicated or missing or a run fails.
# Runs are kept under /tmp (the path is printed last).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
sao="$root/build/sao"
steps=1000
kill_every=50
learner_kills=2
rollouts=2
env_nodes=1
seed=1
extra_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --sao) sao="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --kill-every) kill_every="$2"; shift 2 ;;
    --learner-kills) learner_kills="$2"; shift 2 ;;
    --rollouts) rollouts="$2"; shift 2 ;;
    --env-nodes) env_nodes="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --) shift; extra_args=("$@"); break ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "chaos: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[[ -x "$sao" ]] || { echo "chaos: no sao binary at $sao (build first or pass --sao)" >&2; exit 1; }
cluster="$root/deploy/local-cluster"
base="$(mktemp -d /tmp/sao_chaos.XXXXXX)"
RANDOM="$seed"

# Every step line of a metrics file, one number a line (a line torn by a
# kill is skipped).
step_numbers() {
  python3 - "$1" <<'EOF'
import json, sys
try:
    lines = open(sys.argv[1]).read().splitlines()
except FileNotFoundError:
    lines = []
for text in lines:
    try:
        line = json.loads(text)
    except ValueError:
        continue
    if isinstance(line, dict) and "eval" not in line and "event" not in line and "step" in line:
        print(line["step"])
EOF
}
last_step() { step_numbers "$1" | tail -n 1; }

alive() {
  local stat
  stat="$(cat "/proc/$(cat "$1")/stat" 2>/dev/null)" || return 1
  stat="${stat##*) }"
  [[ "${stat:0:1}" != Z ]]
}

echo "chaos: SFT warm start ($base/warm)"
"$sao" sft --run-dir "$base/warm" --set "run.seed=$seed" >/dev/null 2>&1
learner_args=(--set "train.steps=$steps" --set "run.seed=$seed" --set "train.init_checkpoint=\"$base/warm/sft\""
  --set train.eval_every=100 --set train.checkpoint_every=100 --set console.enabled=false "${extra_args[@]}")

# run NAME FAULTS: one cluster run to the budget; with FAULTS=1 it injects
# them. Prints "faults node_kills learner_kills" when done.
run() {
  local run_dir="$base/$1" faults="$2"
  local state="$run_dir/cluster"
  "$cluster" start --detach --run-dir "$run_dir" --rollouts "$rollouts" --env-nodes "$env_nodes" --sao "$sao" \
    -- "${learner_args[@]}" >"$base/$1.cluster.log"
  local nodes=()
  for ((n = 1; n <= rollouts; n++)); do nodes+=("node-$n:rollout"); done
  for ((n = 1; n <= env_nodes; n++)); do nodes+=("env-$n:env"); done
  local next_kill=$kill_every node_kills=0 learner_killed=0
  local learner_every=$((steps / (learner_kills + 1)))
  local next_learner_kill=$learner_every
  while true; do
    local step
    step="$(last_step "$run_dir/metrics.jsonl")"
    step="${step:-0}"
    if ! alive "$state/learner.pid"; then
      if [[ -f "$run_dir/summary.json" ]] && [[ "$step" -ge "$steps" ]]; then break; fi
      echo "chaos: the learner of $1 exited before its budget (step $step); see $state/learner.log" >&2
      tail -n 20 "$state/learner.log" >&2
      return 1
    fi
    if [[ "$faults" == 1 && "$learner_killed" -lt "$learner_kills" && "$step" -ge "$next_learner_kill" ]]; then
      kill -KILL "$(cat "$state/learner.pid")"
      while alive "$state/learner.pid"; do sleep 0.1; done
      learner_killed=$((learner_killed + 1))
      next_learner_kill=$((next_learner_kill + learner_every))
      echo "chaos: $1: killed the learner at step $step; restarting it with --resume" >&2
      "$cluster" restart-learner --run-dir "$run_dir" >>"$base/$1.cluster.log"
      continue
    fi
    if [[ "$faults" == 1 && "$step" -ge "$next_kill" ]]; then
      local pick="${nodes[$((RANDOM % ${#nodes[@]}))]}"
      local name="${pick%%:*}" role="${pick##*:}"
      if alive "$state/$name.pid"; then
        kill -KILL "$(cat "$state/$name.pid")"
        while alive "$state/$name.pid"; do sleep 0.1; done
        node_kills=$((node_kills + 1))
        echo "chaos: $1: killed $name at step $step" >&2
        "$cluster" add-node --run-dir "$run_dir" --name "$name" --role "$role" >>"$base/$1.cluster.log"
      fi
      next_kill=$((next_kill + kill_every))
    fi
    sleep 0.2
  done
  "$cluster" stop --run-dir "$run_dir" >>"$base/$1.cluster.log" 2>&1 || true
  echo "$((node_kills + learner_killed)) $node_kills $learner_killed" >"$base/$1.faults"
}

run faults 1
run clean 0

status=0
python3 - "$base" "$steps" <<'EOF' || status=$?
import collections, json, sys
base, budget = sys.argv[1], int(sys.argv[2])

def report(name):
    steps = []
    for text in open(f"{base}/{name}/metrics.jsonl").read().splitlines():
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if "eval" not in line and "event" not in line:
            steps.append(line["step"])
    summary = json.load(open(f"{base}/{name}/summary.json"))
    counts = collections.Counter(steps)
    duplicated = sum(c - 1 for c in counts.values() if c > 1)
    missing = sum(1 for s in range(1, budget + 1) if s not in counts)
    faults, node_kills, learner_kills = open(f"{base}/{name}.faults").read().split()
    return dict(steps=summary["steps"], faults=int(faults), node_kills=int(node_kills),
                learner_kills=int(learner_kills), lost=summary["episodes_lost"],
                duplicated=duplicated, missing=missing,
                first=summary.get("heldout_accuracy_first"), last=summary.get("heldout_accuracy_last"))

rows = {name: report(name) for name in ("faults", "clean")}
print(f"{'run':8} {'steps':>6} {'faults':>7} {'node kills':>11} {'learner kills':>14} "
      f"{'episodes lost':>14} {'duplicated':>11} {'missing':>8} {'accuracy first':>15} {'accuracy last':>14}")
for name, r in rows.items():
    print(f"{name:8} {r['steps']:>6} {r['faults']:>7} {r['node_kills']:>11} {r['learner_kills']:>14} "
          f"{r['lost']:>14} {r['duplicated']:>11} {r['missing']:>8} {r['first']:>15.4f} {r['last']:>14.4f}")
bad = any(r["duplicated"] or r["missing"] or r["steps"] != budget for r in rows.values())
print("step numbers: " + ("DUPLICATED OR MISSING" if bad else "each of 1..%d exactly once in both runs" % budget))
sys.exit(1 if bad else 0)
EOF
echo "runs kept in $base"
exit "$status"
