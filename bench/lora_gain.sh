#!/usr/bin/env bash
# LoRA against full fine-tuning on the default task: for each seed, one SFT
# warm start, then the default RL run twice from it (same learner steps):
# the whole policy trained, and LoRA adapters (model.lora) on the frozen warm
# start. Prints each run's held-out accuracy before and after RL, and LoRA's
# share of full fine-tuning's gain, per seed and summed over seeds.
#
#   bench/lora_gain.sh [BUILD_DIR] [--seeds "1 2 3"] [--rank R] [--alpha A] [--lora-lr LR] [--steps N] [-- EXTRA --set ...]
# --lora-lr: learner.actor_lr of the LoRA runs (default: the config's, as the
# full runs use); adapters usually want about 10x full fine-tuning's rate.
set -euo pipefail
build="${1:-build}"
if [[ $# -gt 0 ]]; then shift; fi
seeds="1 2 3"
rank=16
alpha=32
lora_lr=""
steps=""
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seeds) seeds="$2"; shift 2 ;;
    --rank) rank="$2"; shift 2 ;;
    --alpha) alpha="$2"; shift 2 ;;
    --lora-lr) lora_lr="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "lora_gain: unknown option '$1'" >&2; exit 2 ;;
  esac
done
if [[ -f "$build/build.ninja" ]]; then ninja -C "$build" sao >/dev/null; fi
out="${LORA_GAIN_DIR:-runs/lora_gain}"
mkdir -p "$out"
step_args=()
[[ -n "$steps" ]] && step_args=(--steps "$steps")
heldout() { # RUN_DIR -> "BEFORE AFTER"
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1]+"/summary.json")); print(s["heldout_accuracy_first"], s["heldout_accuracy_last"])' "$1"
}
full_gain_total=0
lora_gain_total=0
printf '%-5s %-6s %8s %8s %8s\n' seed run before after gain
for seed in $seeds; do
  sft="$out/sft-$seed"
  [[ -f "$sft/sft/model.safetensors" ]] || "$build/sao" sft --run-dir "$sft" --set run.seed="$seed" "${extra[@]}" >"$out/sft-$seed.log" 2>&1
  for kind in full lora; do
    run="$out/$kind-r$rank-a$alpha${lora_lr:+-lr$lora_lr}-$seed"
    [[ "$kind" == full ]] && run="$out/full-$seed"
    lora_args=()
    [[ "$kind" == lora ]] && lora_args=(--set model.lora.rank="$rank" --set model.lora.alpha="$alpha")
    [[ "$kind" == lora && -n "$lora_lr" ]] && lora_args+=(--set learner.actor_lr="$lora_lr")
    if [[ ! -f "$run/summary.json" ]]; then
      rm -rf "$run"
      "$build/sao" train --run-dir "$run" --set run.seed="$seed" --set train.init_checkpoint="$sft/sft" \
        "${lora_args[@]}" "${step_args[@]}" "${extra[@]}" >"$run.log" 2>&1
    fi
    read -r before after < <(heldout "$run")
    gain=$(python3 -c "print(round($after - $before, 4))")
    printf '%-5s %-6s %8.4f %8.4f %8.4f\n' "$seed" "$kind" "$before" "$after" "$gain"
    if [[ "$kind" == full ]]; then full_gain_total=$(python3 -c "print($full_gain_total + $gain)"); fi
    if [[ "$kind" == lora ]]; then lora_gain_total=$(python3 -c "print($lora_gain_total + $gain)"); fi
  done
done
python3 -c "
full, lora = $full_gain_total, $lora_gain_total
share = lora / full if full > 0 else float('nan')
print(f'held-out gain, lora r=$rank alpha=$alpha${lora_lr:+ actor_lr=$lora_lr} / full fine-tuning: {share:.2f}x (summed over seeds $seeds; target >= 0.90)')"
