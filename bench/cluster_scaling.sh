#!/usr/bin/env bash
# Learner steps/s and trajectories/s of a local cluster (deploy/local-cluster)
# with 1, 2, 4, ... rollout processes, each measured over the same window after
# a warm-up, from the learner's RUN_DIR/cluster_status.json. On one machine the
# processes share its cores, so this measures the runtime's overhead and
# contention, not the scaling of a real cluster.
#
#   bench/cluster_scaling.sh [--sao BIN] [--warmup S] [--window S] [N...] [-- LEARNER ARGS...]
#
# Default: N = 1 2 4, warm-up 10 s, window 20 s, the default model with a
# short SFT warm start (its quality does not change the throughput much).
# Afterwards bench/scaling_model.py fits its throughput model to the first
# run's time accounting (summary.json) and prints predicted vs measured for
# every N, and where the learner saturates. Runs are kept under /tmp.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
sao="$root/build/sao"
warmup=10
window=20
counts=()
learner_args=(--set sft.steps=100 --set train.steps=1000000 --set train.eval_every=0 --set train.checkpoint_every=0)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --sao) sao="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --window) window="$2"; shift 2 ;;
    --) shift; learner_args+=("$@"); break ;;
    *) counts+=("$1"); shift ;;
  esac
done
[[ ${#counts[@]} -gt 0 ]] || counts=(1 2 4)

base="$(mktemp -d /tmp/sao_scaling.XXXXXX)"
# One SFT warm start shared by every run, so each measures RL only.
"$sao" sft --run-dir "$base/warm" "${learner_args[@]}" >/dev/null 2>&1
snapshot() { jq -r '"\(.coordinator.steps) \(.replay.received)"' "$1/cluster_status.json"; }

printf '%-10s %10s %16s %14s\n' "processes" "steps/s" "trajectories/s" "episodes_lost"
measured=()
index=0
for n in "${counts[@]}"; do
  index=$((index + 1))
  run_dir="$base/run${index}_n$n"  # one directory per measurement, even when N repeats
  "$root/deploy/local-cluster" start --detach --run-dir "$run_dir" --rollouts "$n" --sao "$sao" -- \
    "${learner_args[@]}" --set "train.init_checkpoint=\"$base/warm/sft\"" >/dev/null
  sleep "$warmup"
  read -r steps0 received0 < <(snapshot "$run_dir")
  sleep "$window"
  read -r steps1 received1 < <(snapshot "$run_dir")
  lost="$(jq -r '.coordinator.episodes_lost' "$run_dir/cluster_status.json")"
  "$root/deploy/local-cluster" stop --run-dir "$run_dir" >/dev/null
  awk -v n="$n" -v s0="$steps0" -v s1="$steps1" -v r0="$received0" -v r1="$received1" -v w="$window" -v l="$lost" \
    'BEGIN { printf "%-10s %10.2f %16.1f %14d\n", n, (s1 - s0) / w, (r1 - r0) / w, l }'
  measured+=("$n:$run_dir:$(awk -v r0="$received0" -v r1="$received1" -v w="$window" 'BEGIN { print (r1 - r0) / w }')")
done
echo
python3 "$root/bench/scaling_model.py" "$(nproc)" "$base/run1_n${counts[0]}" "${measured[@]}"
echo "runs kept in $base"
