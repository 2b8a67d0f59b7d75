#!/usr/bin/env bash
# What watching a run costs: the same RL run (same warm start, same number of
# learner steps) with the console endpoint off, and on with a client polling
# it like the dashboard does (/api/metrics every second, /api/actors every 2 s)
# plus a Prometheus scrape of /metrics every second. Runs alternate off/on so
# a change in machine load hits both. Prints steps/s and trained tokens/s of
# each run and the on/off ratio.
#
#   bench/console_overhead.sh SFT_CHECKPOINT [STEPS=150] [PAIRS=2]
set -euo pipefail
cd "$(dirname "$0")/.."
sft=${1:?usage: bench/console_overhead.sh SFT_CHECKPOINT [STEPS] [PAIRS]}
steps=${2:-150}
pairs=${3:-2}
out=$(mktemp -d /tmp/sao_console_overhead.XXXX)

poll() {  # poll RUN_DIR until the run's endpoint file disappears
  local dir=$1
  while [ ! -f "$dir/console.json" ]; do sleep 0.2; done
  local url
  url=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$dir/console.json")
  local tick=0
  while [ -f "$dir/console.json" ]; do
    curl -s -o /dev/null "${url}api/metrics?since=$((tick * 1000000))" || true
    curl -s -o /dev/null "${url}metrics" || true
    if [ $((tick % 2)) -eq 0 ]; then curl -s -o /dev/null "${url}api/actors" || true; fi
    tick=$((tick + 1))
    sleep 1
  done
}

run() {  # run NAME CONSOLE(true|false)
  local dir=$out/$1
  if [ "$2" = true ]; then poll "$dir" & fi
  ./build/sao train --run-dir "$dir" --steps "$steps" --set train.init_checkpoint="$sft" \
    --set console.enabled="$2" --set console.port=0 --set train.eval_every=0 > "$dir.log" 2>&1
  wait
}

for pair in $(seq 1 "$pairs"); do
  run "off_$pair" false
  run "on_$pair" true
done

python3 - "$out" "$pairs" <<'PY'
import json, sys, os
out, pairs = sys.argv[1], int(sys.argv[2])
def rate(name):
    steps = [json.loads(l) for l in open(os.path.join(out, name, "metrics.jsonl")) if '"eval"' not in l and '"event"' not in l]
    wall = steps[-1]["wall_time_s"] - steps[0]["wall_time_s"]
    tokens = sum(s["tokens"] for s in steps[1:])
    return (len(steps) - 1) / wall, tokens / wall
print(f"{'run':<8} {'steps/s':>9} {'tokens/s':>10}")
totals = {"off": [0, 0], "on": [0, 0]}
for p in range(1, pairs + 1):
    for mode in ("off", "on"):
        s, t = rate(f"{mode}_{p}")
        totals[mode][0] += s; totals[mode][1] += t
        print(f"{mode}_{p:<5} {s:9.3f} {t:10.0f}")
off, on = totals["off"], totals["on"]
print(f"console on / off: steps/s {on[0] / off[0]:.3f}, tokens/s {on[1] / off[1]:.3f}  (mean of {pairs} pairs; runs in {out})")
PY
