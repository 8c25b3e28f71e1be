#!/usr/bin/env bash
# Pre-train the tiny SAM2 and the tiny Qwen2.5-VL on one CUDA machine, in one bounded, resumable command:
#
#   bench/gpu_pretrain.sh [--python PATH] [--only NAME[,NAME…]] [--budget SECONDS] [--set KEY=VALUE]… [--dry-run]
#                         [--smoke] [--fit]
#
# NAME, run in this order: probe (throughput, each stage's seeds sharing the GPU as the stage runs them:
# bench/smoke_pretrain.py's 40 steps of pretrain as params.yaml has it in the last and in the first phase's scenes,
# 10 steps of pretrain_sam2, then pretrain with loader_workers 4 and at batch 64 while the probe's 90 s last; with
# each stage's estimated run time → bench/results/gpu-pretrain-throughput.json),
# pretrain_sam2, pretrain (the stages themselves: params.yaml as it is plus model.path=models/pretrain,
# sam2.checkpoint=models/pretrain_sam2/model.pt, sam2.config=models/pretrain_sam2/config.yaml — the params the
# committed frozen stages record — through each stage's own function as its flow calls it, in this repository;
# bench/gpu_pretrain.py). A stage whose out_dir holds seeds.json and a lineage.json with these params is up to date
# and not run again (pretrain_sam2 once its CPU-trained output is committed). A missing models/tiny (tiny_models'
# output) is built first by the tiny_models stage's own function, and so is one its lineage says was built with
# other tiny_models params (e.g. --set tiny_models.sam2_encoder_width=32: the wider SAM2, docs/architecture.md).
# --set KEY=VALUE adds an override for both stages (not the probe), e.g. pretrain.loader_workers=4 if the probe
# shows the scenes' rendering holds the GPU back: outside the seeds' fingerprint, so the weights do not change, but
# the lineage records it, so params.yaml should then say the same before the outputs are committed.
#
# Not dvc/prefect: the GPU machine has neither (no network; their wheels do not fit what a call carries), so the
# stages run without DVC's bookkeeping; their lineage.json records the params, the base's hash and the device, and
# `dvc commit pretrain_sam2 pretrain` on the machine that commits records them in dvc.lock. A sibling of gpu.sh
# rather than two of its names: its outputs are models, not figures, and it needs a deadline, resume and packing
# that gpu.sh's figures do not (the same conventions: --python, --dry-run, --smoke, --only).
#
# --fit sizes pretrain_sam2 to the call: the probe measures pretrain_sam2 alone (its seeds side by side, a few
# steps), then pretrain_sam2.steps becomes the largest multiple of save_every_steps that its deadline leaves room
# for (bench/gpu_pretrain.py fit); the lineage records the steps, so params.yaml must say the same before the
# output is committed. A stage after it (pretrain) gets what is left.
#
# Bounded: the whole command ends within --budget seconds (default 510: one 9-minute device call, timeout_s 560).
# The probe takes at most 90 s (150 s with --fit); each stage then runs under `timeout --signal=TERM` until 50 s before the budget
# ends. A stage cut off keeps its per-seed state in its checkpoint_dir (models/checkpoints/pretrain*/seed-<k>:
# finished seeds and the training state saved every save_every_steps); run the command again to resume there.
#
# Where things go: with $OUT set (the device call), the log ($OUT/gpu-pretrain.log), the throughput file, a tar per
# stage trained (pretrain_sam2.tar, pretrain.tar: out_dir + metrics/NAME.json + metrics/NAME_curve.tsv) and, while
# a stage is unfinished, checkpoints.tar (split as checkpoints.tar.00, .01, … when over 15 MiB; finished seeds
# first, then training states, as many as the call's 8 files / 64 MiB bring back). Unpack them in the project root:
#   for t in pretrain_sam2 pretrain; do [ -f "$F/$t.tar" ] && tar -xf "$F/$t.tar"; done
#   ls "$F"/checkpoints.tar* >/dev/null 2>&1 && cat "$F"/checkpoints.tar* | tar -x
# and name models/checkpoints in the next call's carry (a call on the still-warm machine finds them in place).
# Without $OUT everything stays in place (models/, metrics/, bench/results/).
#
# --dry-run prints the commands and exits; --smoke runs the same flow on the CPU at tiny size (seeds 0 and 1, two at
# a time, 3-4 steps each) in the scratch project bench/out/gpu-pretrain/, packing into bench/out/gpu-pretrain-out/ as
# into $OUT. Exit status: 0 when every selected piece finished (or was up to date), 5 when a stage was cut off
# (run again to resume), 1 when something failed, 2 for a usage error, 3 when the machine cannot run it.
set -uo pipefail
set -f  # no globbing: override values hold [ ] { }

cd "$(dirname "$0")/.." || exit 2
PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
ALL="probe,pretrain_sam2,pretrain"
ONLY="$ALL"
BUDGET=""
DRY_RUN=0
SMOKE=0
FIT=0
EXTRA_SETS=()

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --python) [[ $# -ge 2 ]] || { echo "gpu_pretrain.sh: --python needs a path" >&2; exit 2; }; PYTHON="$2"; shift 2 ;;
    --only) [[ $# -ge 2 ]] || { echo "gpu_pretrain.sh: --only needs names from: $ALL" >&2; exit 2; }; ONLY="$2"; shift 2 ;;
    --budget) [[ $# -ge 2 && "$2" =~ ^[0-9]+$ ]] || { echo "gpu_pretrain.sh: --budget needs whole seconds" >&2; exit 2; }
              BUDGET="$2"; shift 2 ;;
    --set) [[ $# -ge 2 && "$2" == *=* ]] || { echo "gpu_pretrain.sh: --set needs KEY=VALUE" >&2; exit 2; }
           EXTRA_SETS+=(--set "$2"); shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    --smoke) SMOKE=1; shift ;;
    --fit) FIT=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_pretrain.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

declare -A SELECTED=()
IFS=',' read -r -a NAMES <<< "$ONLY"
for name in "${NAMES[@]}"; do
  case "$name" in
    probe|pretrain_sam2|pretrain) SELECTED[$name]=1 ;;
    *) echo "gpu_pretrain.sh: --only: unknown name '$name' (probe, pretrain_sam2, pretrain)" >&2; exit 2 ;;
  esac
done

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # the seed processes (python -m stages.…) import the project

if [[ $SMOKE -eq 1 ]]; then
  ROOT=bench/out/gpu-pretrain  # a scratch project root: the stages' relative paths land under it
  DEST=bench/out/gpu-pretrain-out  # stands for $OUT
  RESULTS=bench/out
  BUDGET="${BUDGET:-1500}"; PROBE_S=420; MARGIN_S=20; KILL_S=15; MIN_STAGE_S=30
  PROBE_ARGS=(--smoke)
  FIT_ARGS=(--at-most 3)  # the smoke's few steps, whatever the probe measured
  SETS=(--set "pretrain.seeds=[0,1]" --set pretrain.parallel=2 --set pretrain.steps=4
        --set "pretrain.curriculum=[{steps:2,frames:1,grow_every:1},{steps:2,frames:6,synth_share:0.5,move:2}]"
        --set pretrain.batch_size=2 --set pretrain.warmup_steps=1 --set pretrain.check_samples=2
        --set pretrain.max_new_tokens=8 --set pretrain.save_every_steps=2
        --set "pretrain_sam2.seeds=[0,1]" --set pretrain_sam2.parallel=2 --set pretrain_sam2.steps=3
        --set pretrain_sam2.warmup_steps=1 --set pretrain_sam2.check_videos=1 --set pretrain_sam2.clip_frames=2
        --set pretrain_sam2.save_every_steps=2)
else
  ROOT=.
  DEST="${OUT:-}"
  RESULTS=bench/results
  BUDGET="${BUDGET:-510}"; PROBE_S=90; MARGIN_S=30; KILL_S=20; MIN_STAGE_S=60
  # --fit's probe is one stage run of 10 steps with its seeds side by side: on the H200 a three-seed run of 30 steps
  # did not end within 77 s (start-up and checks took about 60 s of a two-seed run's 82 s)
  [[ $FIT -eq 1 ]] && PROBE_S=150
  PROBE_ARGS=()
  FIT_ARGS=()
  SETS=()
fi
SETS+=("${EXTRA_SETS[@]}")  # after the smoke's own: the last of a repeated key wins
THROUGHPUT="$RESULTS/gpu-pretrain-throughput.json"
[[ $FIT -eq 1 ]] && PROBE_ARGS+=(--sam2-only "${EXTRA_SETS[@]}")  # measured with the run's seeds side by side
PROBE_CMD="$PYTHON bench/gpu_pretrain.py probe --out $THROUGHPUT --budget $((PROBE_S - 10)) ${PROBE_ARGS[*]}"
stage_cmd() { echo "$PYTHON bench/gpu_pretrain.py stage $1 --root $ROOT ${SETS[*]}"; }
PACK_CMD="$PYTHON bench/gpu_pretrain.py pack --root $ROOT --dest $DEST"

if [[ $DRY_RUN -eq 1 ]]; then
  [[ -n "${SELECTED[probe]:-}" ]] && echo "timeout --signal=TERM --kill-after=$KILL_S $PROBE_S $PROBE_CMD"
  for name in pretrain_sam2 pretrain; do
    [[ $FIT -eq 1 && $name == pretrain_sam2 && -n "${SELECTED[$name]:-}" ]] &&
      echo "$PYTHON bench/gpu_pretrain.py fit --throughput $THROUGHPUT --seconds <seconds left> ${SETS[*]}"
    [[ -n "${SELECTED[$name]:-}" ]] && echo "timeout --signal=TERM --kill-after=$KILL_S <seconds left> $(stage_cmd $name)"
  done
  [[ -n "$DEST" ]] && echo "$PACK_CMD --trained <stages finished> --file $THROUGHPUT"
  exit 0
fi

START=$(date +%s)
if [[ $SMOKE -eq 1 ]]; then rm -rf "$DEST"; fi
if [[ -n "$DEST" ]]; then
  mkdir -p "$DEST"
  exec > >(tee -a "$DEST/gpu-pretrain.log") 2>&1  # comes back even when the call is cut off
fi
if ! "$PYTHON" -c 'import stages.pretrain, stages.pretrain_sam2, sam2, transformers' 2>/tmp/gpu-pretrain-import.err; then
  echo "gpu_pretrain.sh: $PYTHON cannot import what the stages need: $(tail -n 1 /tmp/gpu-pretrain-import.err)" >&2
  exit 3
fi
if [[ $SMOKE -eq 0 ]]; then
  if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu_pretrain.sh: no CUDA device visible to $PYTHON (torch.cuda.is_available() is False); nothing run." >&2
    echo "gpu_pretrain.sh: use --smoke to check the flow on the CPU, --dry-run to see the commands." >&2
    exit 3
  fi
  "$PYTHON" -c 'import os, torch; print("gpu_pretrain.sh:", torch.cuda.get_device_name(), "torch", torch.__version__,
                                         os.cpu_count(), "CPUs")'
fi
mkdir -p "$RESULTS"
left() { echo $(( BUDGET - ($(date +%s) - START) - MARGIN_S - KILL_S )); }

failed=(); cut=(); trained=(); probed=()
if [[ -n "${SELECTED[probe]:-}" ]]; then
  echo "gpu_pretrain.sh: [probe] $PROBE_CMD"
  rm -f "$THROUGHPUT"  # this call's figures only
  # shellcheck disable=SC2086  # the command line is split into words on purpose
  if timeout --signal=TERM --kill-after="$KILL_S" "$PROBE_S" $PROBE_CMD; then
    echo "gpu_pretrain.sh: [probe] done at $(( $(date +%s) - START )) s"
  else
    echo "gpu_pretrain.sh: [probe] incomplete (see above); the stages still run" >&2
    failed+=(probe)
  fi
  [[ -f "$THROUGHPUT" ]] && probed=("$THROUGHPUT")
fi
for name in pretrain_sam2 pretrain; do
  [[ -n "${SELECTED[$name]:-}" ]] || continue
  seconds=$(left)
  if (( seconds < MIN_STAGE_S )); then
    echo "gpu_pretrain.sh: [$name] not started: ${seconds} s of the budget left (run again to go on)" >&2
    cut+=("$name"); continue
  fi
  command=$(stage_cmd "$name")
  if [[ $FIT -eq 1 && $name == pretrain_sam2 ]]; then
    if ! steps=$("$PYTHON" bench/gpu_pretrain.py fit --throughput "$THROUGHPUT" --seconds "$seconds" \
                    "${FIT_ARGS[@]}" "${SETS[@]}"); then
      echo "gpu_pretrain.sh: [$name] not started: --fit found no throughput to size it" >&2
      failed+=("$name"); continue
    fi
    command="$command --set pretrain_sam2.steps=$steps"
  fi
  echo "gpu_pretrain.sh: [$name] (deadline ${seconds} s) $command"
  # shellcheck disable=SC2086
  timeout --signal=TERM --kill-after="$KILL_S" "$seconds" $command
  rc=$?
  case $rc in
    0) echo "gpu_pretrain.sh: [$name] trained, at $(( $(date +%s) - START )) s"; trained+=("$name") ;;
    3) echo "gpu_pretrain.sh: [$name] up to date" ;;
    124|137) echo "gpu_pretrain.sh: [$name] cut off at the deadline; its state is in its checkpoint_dir (run again" \
                  "to resume)" >&2; cut+=("$name") ;;
    *) echo "gpu_pretrain.sh: [$name] FAILED (exit $rc)" >&2; failed+=("$name") ;;
  esac
done

if [[ -n "$DEST" ]]; then
  # shellcheck disable=SC2086
  $PACK_CMD --trained "${trained[@]}" --file "${probed[@]}" || failed+=(pack)
fi
echo "gpu_pretrain.sh: ended at $(( $(date +%s) - START )) s of $BUDGET; trained: ${trained[*]:-none};" \
     "cut off: ${cut[*]:-none}; failed: ${failed[*]:-none}"
if [[ ${#failed[@]} -gt 0 ]]; then exit 1; fi
if [[ ${#cut[@]} -gt 0 ]]; then exit 5; fi
exit 0
