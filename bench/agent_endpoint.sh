#!/usr/bin/env bash
# The agent endpoint's requests/s and tokens/s at 1, 8 and 32 concurrent
# sessions, each beside the rollout's own decoding at the same batch (the
# overhead ratio is measured in the same run; 4 alternating rounds, as one
# round's ratio varies by +-15% on a 2-core machine). Usage:
#   bench/agent_endpoint.sh [BUILD_DIR] [EPISODES] [keep-alive|close]
# (clients keep their connection between calls unless `close`)
set -euo pipefail
build="${1:-build}"
episodes="${2:-300}"
connection="${3:-keep-alive}"
for sessions in 1 8 32; do
  "$build/bench/bench_agent_endpoint" --sessions "$sessions" --episodes "$episodes" --max-new-tokens 16 --connection "$connection" --rounds 4
done
