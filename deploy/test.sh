#!/usr/bin/env bash
# README command 2: install, build and run every test. `.ci/run` calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install-deps.sh --tests
deploy/build.sh
./build/sao doctor
ctest --test-dir build --output-on-failure -j "${SAO_TEST_JOBS:-2}" "$@"
