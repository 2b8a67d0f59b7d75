#!/usr/bin/env bash
# Data-parallel learner ranks on this machine: 1 rank vs 2 ranks (c10d Gloo
# over loopback), one LibTorch thread each, the default model's SAO step on
# the same batches. Prints tokens/s of both, their ratio and the all-reduce
# share. Run it on an otherwise idle machine: two ranks need both cores.
#
#   bench/learner_ranks.sh [BUILD_DIR] [--steps N] [--batch B]
set -euo pipefail
build="${1:-build}"
if [[ $# -gt 0 ]]; then shift; fi
ninja -C "$build" bench_learner_ranks >/dev/null
for run in 1 2 3; do
  echo "run $run:"
  "$build/bench/bench_learner_ranks" "$@"
done
