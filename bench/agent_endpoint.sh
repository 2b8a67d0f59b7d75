#!/usr/bin/env bash
# The agent endpoint's requests/s and tokens/s at 1, 8 and 32 concurrent
# sessions, each beside the rollout's own decoding at the same batch (the
# overhead ratio is measured in the same run). Usage:
#   bench/agent_endpoint.sh [BUILD_DIR] [EPISODES]
set -euo pipefail
build="${1:-build}"
episodes="${2:-200}"
for sessions in 1 8 32; do
  "$build/bench/bench_agent_endpoint" --sessions "$sessions" --episodes "$episodes" --max-new-tokens 16
done
