#!/usr/bin/env bash
# README "GPU": builds sao against the machine's LibTorch with CUDA
# (python3's torch) and proves the GPU path in one go, in under 8 minutes on
# one H200:
#   1. sao doctor (CUDA devices, transports built)
#   2. the GPU tests (CPU vs CUDA forward, decode, sampler log-probs, a SAO
#      learner step, bf16 autocast, device packs, CUDA IPC across processes,
#      an NCCL bucketed broadcast) and the host-side GPU tests
#   3. a short SAO run on the GPU (sft, then `sao train` with learner and
#      rollouts on cuda): held-out accuracy before and after
#   4. a local cluster on the GPU: learner process + rollout process, the
#      rollout taking its weights by CUDA IPC
#   5. bench_gpu: decode and learner tokens/s (default model, 0.5B shape),
#      weight-sync time per transport
# Packages the machine lacks come from .gpu-deps/ (deploy/gpu-deps.sh,
# run beforehand where Debian's archive is reachable), unpacked into a
# private prefix. Logs and numbers go to $OUT (else /tmp/sao-gpu-check).
# Knobs: SAO_GPU_STEPS (the short run, default 150), SAO_GPU_CLUSTER_STEPS
# (60), SAO_GPU_BENCH_ARGS (--quick: default model only), SAO_GPU_SKIP_BENCH=1.
# Exit status: 0 when every stage passed.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/sao-gpu-check}"
mkdir -p "$out"
exec > >(tee "$out/gpu-check.log") 2>&1
start=$(date +%s)
stamp() { echo "[gpu-check +$(( $(date +%s) - start ))s] $*"; }
failed=()

deps=/tmp/sao-gpu-deps
if ls .gpu-deps/*.deb >/dev/null 2>&1; then
  mkdir -p "$deps"
  for deb in .gpu-deps/*.deb; do dpkg -x "$deb" "$deps"; done
  export PATH="$deps/usr/bin:$PATH" LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PKG_CONFIG_PATH="$deps/usr/lib/x86_64-linux-gnu/pkgconfig:$deps/usr/share/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$deps"
  pkg_config=(-DPKG_CONFIG_EXECUTABLE="$deps/usr/bin/pkgconf" -DOPENSSL_ROOT_DIR="$deps/usr")
  prefix="$deps/usr"
else
  pkg_config=()
  prefix=""
fi
torch_cmake=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)') || { echo "python3 has no torch"; exit 2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
stamp "configure (LibTorch $(python3 -c 'import torch; print(torch.__version__)'))"
build=build-gpu
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSAO_WITH_CUDA=ON -DSAO_WITH_PLOT=OFF \
  -DCMAKE_PREFIX_PATH="$torch_cmake${prefix:+;$prefix}" "${pkg_config[@]}" -DTORCH_CUDA_ARCH_LIST=9.0 \
  > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 2; }
grep "sao: GPU weight transports" "$out/configure.log"
stamp "build"
if ! cmake --build "$build" -j "$(nproc)" --target sao test_gpu_device_model test_gpu_device_transport test_gpu_host \
  test_model bench_gpu sao_gpu_ipc_child > "$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -40
  exit 2
fi

stamp "1. sao doctor"
"./$build/sao" doctor | grep -E "libtorch|cuda|nccl|gpu weight|plots"

stamp "2. GPU tests"
for test in test_gpu_device_model test_gpu_device_transport test_gpu_host test_model; do
  if timeout 120 "./$build/tests/$test" > "$out/$test.log" 2>&1; then
    echo "PASS $test: $(grep -E '^\[doctest\] (test cases|assertions)' "$out/$test.log" | tr '\n' ' ')"
    grep -E "MESSAGE|max \|" "$out/$test.log" | sed 's/^/    /' | head -12
  else
    echo "FAIL $test"; tail -40 "$out/$test.log"; failed+=("$test")
  fi
done

stamp "3. SAO on the GPU: sft, then sao train (learner and rollouts on cuda:0)"
run=/tmp/sao-gpu-run
rm -rf "$run"
if timeout 150 "./$build/sao" train --run-dir "$run" --steps "${SAO_GPU_STEPS:-150}" \
    --set sft.device=cuda --set learner.device=cuda --set rollout.device=cuda --set console.enabled=false \
    > "$out/sao_train.log" 2>&1; then
  grep -E "held-out|sft .*(pass|accuracy)|step +[0-9]+/" "$out/sao_train.log" | tail -8
  cp "$run/summary.json" "$out/summary.json" 2>/dev/null
  python3 -c "import json; s=json.load(open('$run/summary.json')); print({k: s[k] for k in s if k in ('steps','heldout_accuracy_first','heldout_accuracy_last','wall_time_s','tokens_per_s','episodes_lost','policy_version')})" || true
else
  echo "FAIL sao train"; tail -30 "$out/sao_train.log"; failed+=("sao_train")
fi

stamp "4. a cluster on one GPU: learner process + rollout process, weights by CUDA IPC"
cluster=/tmp/sao-gpu-cluster
rm -rf "$cluster"
if [ -d "$run/sft" ] && timeout 150 deploy/local-cluster start --run-dir "$cluster" --rollouts 1 --sao "$PWD/$build/sao" -- \
    --steps "${SAO_GPU_CLUSTER_STEPS:-60}" --set learner.device=cuda --set rollout.device=cuda \
    --set train.init_checkpoint="$run/sft" --set console.enabled=false > "$out/cluster.log" 2>&1; then
  cp "$cluster/cluster/learner.log" "$out/cluster_learner.log" 2>/dev/null
  grep -h "receives weights by\|held-out accuracy" "$cluster"/cluster/*.log | head -8
  if grep -q "receives weights by cuda_ipc" "$cluster/cluster/learner.log"; then
    echo "PASS cluster: the rollout process took its weights by CUDA IPC"
  else
    echo "FAIL cluster: no CUDA IPC push"; failed+=("cluster_ipc")
  fi
else
  echo "FAIL cluster run (or no SFT checkpoint from stage 3)"; tail -20 "$out/cluster.log"
  tail -20 "$cluster"/cluster/*.log 2>/dev/null; failed+=("cluster")
fi

stamp "5. bench_gpu"
if [ "${SAO_GPU_SKIP_BENCH:-0}" = 1 ]; then
  echo "skipped (SAO_GPU_SKIP_BENCH=1)"
elif ! timeout "${SAO_GPU_BENCH_S:-170}" "./$build/bench/bench_gpu" ${SAO_GPU_BENCH_ARGS:-} 2>&1 | tee "$out/bench_gpu.log"; then
  echo "FAIL bench_gpu (or it ran past its time)"; failed+=("bench_gpu")
fi

stamp "done"
if [ ${#failed[@]} -gt 0 ]; then echo "gpu-check: FAILED: ${failed[*]}"; exit 1; fi
echo "gpu-check: every stage passed"
