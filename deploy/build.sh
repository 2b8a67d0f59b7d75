#!/usr/bin/env bash
# Configures and builds sao in ./build (Release, Ninja, ccache when present).
# Re-running only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${SAO_BUILD_DIR:-build}"
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
fi
# SAO_BUILD_TARGETS (space-separated) builds only those, e.g. "sao" for the
# main job, which needs one binary of the ~120 targets.
targets=()
for target in ${SAO_BUILD_TARGETS:-}; do targets+=(--target "$target"); done
cmake --build "$build_dir" -j "${SAO_BUILD_JOBS:-2}" "${targets[@]}"
