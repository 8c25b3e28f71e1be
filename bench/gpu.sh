#!/usr/bin/env bash
# Every GPU figure of the project in one command, on one CUDA machine without network:
#
#   bench/gpu.sh [--python PATH] [--only NAME[,NAME…]] [--dry-run] [--smoke]
#
# NAME: sam2 (SAM2.1-large-shaped consistency reward: shared encoding vs re-encoding per rollout, 8 rollouts ×
# 6 frames at 560², 1 and 6 distinct keyframes, bf16 as the stage, masks asserted to agree to IoU 0.9), sam2fp32 (the same in fp32 without
# TF32: how far the paths differ without bf16), sam2vos (bf16 with SAM2.1's compiled predictor, vos_optimized),
# sft (a Qwen2.5-VL-3B-shaped LoRA step: time, tokens/s, MFU, memory; variants: micro-batch 2/4, padded vs packed
# rows of samples of 4 lengths, Liger on/off (a row saying why where Liger cannot run); it names the micro-batch
# to train with, then profiles one step of the last variant measured: top operators by device time), sftflex
# (packed rows with flex attention, which reads the packed block mask sparsely),
# evaluate (seconds per 100-frame video: 3B-shaped answer + SAM2.1-large tracking), segment (`vrsflow segment` on
# 10 s / 60 s 480p and 1080p clips: seconds per frame for decode, generate, propagate, peak RSS; the published
# seconds per 100-frame video beside it). Each writes
# bench/results/gpu-<name>.json (figures, baseline, commit, machine). All models are built with random weights
# from the packages' own configs, so nothing is downloaded; the machine needs this repository's Python
# dependencies (torch with CUDA, transformers, sam2, liger-kernel, …) and nothing else. Budget: 9 minutes on one
# H100, the issue's figures first; each file is written as its figure (and each SFT variant) finishes.
#
# --dry-run prints the commands and exits; --smoke runs the same scripts with tiny shapes on the CPU (a check
# that the command lines parse and the code paths run; its files go to bench/out/, never to bench/results/).
# Exit status: 0 when every selected figure was written, 1 otherwise (the others still run).
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
ONLY="sft,sam2,sam2vos,evaluate,sftflex,sam2fp32,segment"  # the issue's figures first
DRY_RUN=0
SMOKE=0

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --python) [[ $# -ge 2 ]] || { echo "gpu.sh: --python needs a path" >&2; exit 2; }; PYTHON="$2"; shift 2 ;;
    --only) [[ $# -ge 2 ]] || { echo "gpu.sh: --only needs names from: $ONLY" >&2; exit 2; }; ONLY="$2"; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    --smoke) SMOKE=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

IFS=',' read -r -a NAMES <<< "$ONLY"
for name in "${NAMES[@]}"; do
  case "$name" in
    sam2|sam2fp32|sam2vos|sft|sftflex|evaluate|segment) ;;
    *) echo "gpu.sh: --only: unknown figure '$name' (sft, sam2, sam2vos, evaluate, sftflex, sam2fp32, segment)" >&2
       exit 2 ;;
  esac
done

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

if [[ $SMOKE -eq 1 ]]; then
  OUT=bench/out
  declare -A COMMANDS=(
    [sam2]="$PYTHON bench/bench_sam2_reward.py --micro --image-size 128 --frame-side 56 --frames 4 --rollouts 4 --keyframes 1 2 --out $OUT/gpu-sam2_reward.json"
    [sam2fp32]="$PYTHON bench/bench_sam2_reward.py --micro --image-size 128 --frame-side 56 --frames 4 --rollouts 4 --keyframes 1 --precision fp32 --out $OUT/gpu-sam2_reward-fp32.json"
    [sam2vos]="$PYTHON bench/bench_sam2_reward.py --micro --image-size 128 --frame-side 56 --frames 4 --rollouts 4 --keyframes 1 --repeats 2 --out $OUT/gpu-sam2_reward-vos.json"
    [sft]="$PYTHON bench/bench_sft.py --smoke --steps 1 --variants 1 2 2p 2c 2pl --lengths 40 20 --profile --out $OUT/gpu-sft.json"
    [sftflex]="$PYTHON bench/bench_sft.py --smoke --steps 1 --variants 2p --lengths 40 20 --out $OUT/gpu-sft-flex.json"
    [evaluate]="$PYTHON bench/bench_metrics.py --gpu --shapes tiny --frames 6 --n-frames 2 --new-tokens 4 --repeats 1 --out $OUT/gpu-evaluate.json"
    [segment]="$PYTHON bench/bench_segment.py --short 1 --long 2 --fps 5 --out $OUT/gpu-segment.json"
  )
else
  OUT=bench/results
  declare -A COMMANDS=(
    [sam2]="$PYTHON bench/bench_sam2_reward.py --config configs/sam2.1/sam2.1_hiera_l.yaml --image-size 1024 --frame-side 560 --frames 6 --rollouts 8 --keyframes 1 6 --repeats 2 --device cuda --out $OUT/gpu-sam2_reward.json"
    [sam2fp32]="$PYTHON bench/bench_sam2_reward.py --config configs/sam2.1/sam2.1_hiera_l.yaml --image-size 1024 --frame-side 560 --frames 6 --rollouts 8 --keyframes 1 3 --device cuda --precision fp32 --out $OUT/gpu-sam2_reward-fp32.json"
    [sam2vos]="$PYTHON bench/bench_sam2_reward.py --config configs/sam2.1/sam2.1_hiera_l.yaml --image-size 1024 --frame-side 560 --frames 6 --rollouts 8 --keyframes 1 6 --repeats 3 --device cuda --vos-optimized --out $OUT/gpu-sam2_reward-vos.json"
    # batch 2 padded (the earlier figure's shape), 4 padded, 4 packed, 4 packed with Liger; checkpointing's cost
    # is on record (2.8 % MFU at 4 on an H100) and a batch that does not fit is recorded as out of memory
    [sft]="$PYTHON bench/bench_sft.py --gpu --steps 4 --variants 2 4 4p 4pl --lengths 400 150 600 300 --profile --out $OUT/gpu-sft.json"
    [sftflex]="$PYTHON bench/bench_sft.py --gpu --steps 4 --variants 2p 4p --lengths 400 150 600 300 --attention flex_attention --out $OUT/gpu-sft-flex.json"
    [evaluate]="$PYTHON bench/bench_metrics.py --gpu --frames 100 --n-frames 8 --new-tokens 128 --repeats 2 --out $OUT/gpu-evaluate.json"
    [segment]="$PYTHON bench/bench_segment.py --gpu --fps 10 --short 10 --long 60 --max-new-tokens 128 --out $OUT/gpu-segment.json"
  )
fi

if [[ $DRY_RUN -eq 1 ]]; then
  for name in "${NAMES[@]}"; do echo "${COMMANDS[$name]}"; done
  exit 0
fi

if [[ $SMOKE -eq 0 ]]; then
  if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu.sh: no CUDA device visible to $PYTHON (torch.cuda.is_available() is False); nothing measured." >&2
    echo "gpu.sh: use --smoke to check the scripts on the CPU, --dry-run to see the commands." >&2
    exit 3
  fi
  "$PYTHON" -c 'import torch; print("gpu.sh:", torch.cuda.get_device_name(), "torch", torch.__version__)'
fi

mkdir -p "$OUT"
failed=()
for name in "${NAMES[@]}"; do
  echo "gpu.sh: [$name] ${COMMANDS[$name]}"
  start=$(date +%s)
  # shellcheck disable=SC2086  # the command line is split into words on purpose
  if ${COMMANDS[$name]} > "$OUT/gpu-$name.log" 2>&1; then
    echo "gpu.sh: [$name] done in $(( $(date +%s) - start )) s"
  else
    echo "gpu.sh: [$name] FAILED after $(( $(date +%s) - start )) s; last lines of $OUT/gpu-$name.log:" >&2
    tail -n 15 "$OUT/gpu-$name.log" >&2
    failed+=("$name")
  fi
done

if [[ $SMOKE -eq 0 ]]; then
  "$PYTHON" bench/summary.py --write && echo "gpu.sh: bench/README.md's table regenerated from bench/results/"
fi
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "gpu.sh: failed: ${failed[*]}" >&2
  exit 1
fi
echo "gpu.sh: all figures written under $OUT/"
