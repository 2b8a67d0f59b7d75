#!/usr/bin/env bash
# README command 1: install, build, and run the main job on the embedded
# default config. Safe to re-run: installs and builds are incremental and the
# run directory is replaced.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install-deps.sh
# The job needs only the sao binary; README command 2 builds the rest.
SAO_BUILD_TARGETS=sao deploy/build.sh
./build/sao doctor
rm -rf runs/default
# SFT warm start (RUN_DIR/sft), then SAO reinforcement learning; ends with the
# held-out accuracy before and after RL.
./build/sao train --run-dir runs/default
