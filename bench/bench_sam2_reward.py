"""Benchmark: SAM2 consistency reward for the rollouts of one GRPO prompt — shared frame encoding with
keyframe-grouped batched tracking (`propagate_groups`) vs re-encoding per rollout (a fresh SAM2 state per
rollout, as the released Veason-R1 reward does), same predictor, same inputs, in the same run.

A sweep over how many distinct keyframes the rollouts chose (1 = the policy agrees, up to one per shown
frame): the shared path encodes each frame once whatever the sweep, and tracks once per distinct
keyframe. The masks of both paths are ASSERTED equal (np.array_equal per rollout) before any figure is
written, on the CPU; on CUDA the two paths round differently (bf16 autocast as the stage, or `--precision fp32`
without TF32), and they are asserted to agree to mask IoU 0.9 (the figures record the least IoU). Random
weights at the hiera_t shape (`configs/sam2.1/sam2.1_hiera_t.yaml`) at `--image-size`;
`--micro` for the test model. Writes bench/results/sam2_reward.json.

    python bench/bench_sam2_reward.py [--image-size 512] [--frames 6] [--rollouts 8] [--keyframes 1 2 3 6]

GPU (bench/gpu.sh): `--config configs/sam2.1/sam2.1_hiera_l.yaml --image-size 1024 --frame-side 560
--device cuda --out bench/results/gpu-sam2_reward.json` (SAM2.1-large shape, bf16 autocast as the stage).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results_io import write_result  # noqa: E402
from stages.sam2_wrapper import BoxGroup, load_video_predictor, propagate_groups  # noqa: E402


def build(image_size: int, micro: bool, folder: Path, config: str = "", device: str = "cpu", dtype: str = "auto",
          vos_optimized: bool = False):
    """A random-weight SAM2 video predictor: `config` (default hiera_t) at `image_size`, or the micro model; `dtype`
    and `vos_optimized` as `load_video_predictor` takes them (CUDA only but auto)."""
    options = {"device": device, "dtype": dtype, "vos_optimized": vos_optimized}
    from sam2.build_sam import build_sam2

    from stages.tiny_models.tiny_sam2 import BASE_CONFIG, build_tiny_sam2

    if micro:
        checkpoint, config = build_tiny_sam2(folder, image_size, 0)
        return load_video_predictor(str(checkpoint), str(config), **options)
    base = config or BASE_CONFIG
    overrides = [f"++model.image_size={image_size}"]
    torch.manual_seed(0)
    model = build_sam2(base, ckpt_path=None, device="cpu", hydra_overrides_extra=overrides)
    torch.save({"model": model.state_dict()}, folder / "model.pt")
    (folder / "config.yaml").write_text(json.dumps({"base": base, "overrides": overrides}))
    return load_video_predictor(str(folder / "model.pt"), str(folder / "config.yaml"), **options)


def rollouts(n: int, n_frames: int, size: int, n_keys: int, seed: int = 0) -> list[BoxGroup]:
    """GRPO-like rollouts: keyframes cycling over `n_keys` distinct frames spread over the clip, 1–2 boxes."""
    rng = np.random.default_rng(seed)
    n_keys = min(n_keys, n_frames)
    key_frames = np.linspace(0, n_frames - 1, n_keys).round().astype(int)
    groups = []
    for i in range(n):
        boxes = []
        for _ in range(rng.integers(1, 3)):
            x, y = rng.uniform(0.1, 0.5, 2) * size
            w, h = rng.uniform(0.2, 0.4, 2) * size
            boxes.append([x, y, x + w, y + h])
        groups.append(BoxGroup(int(key_frames[i % n_keys]), boxes))
    return groups


def _timed(predictor, frames, groups, share: bool, repeats: int) -> tuple[float, list[np.ndarray]]:
    best, masks = float("inf"), []
    for _ in range(repeats):
        start = time.perf_counter()
        masks = propagate_groups(predictor, frames, groups, share_encoding=share)
        best = min(best, time.perf_counter() - start)
    return best, masks


# On CUDA the two paths batch different objects together, so their kernels round differently and masks whose logits
# sit near 0 (random weights) flip pixels: in bf16 up to 6,055 pixels of a rollout (least IoU 0.988), and even in fp32
# without TF32 one pixel (H100, bench/results/gpu-logs/). Bit-equality is asserted on the CPU; on CUDA the paths must
# agree to this mask IoU.
CUDA_MIN_IOU = 0.9


def compare(masks: list[np.ndarray], reference: list[np.ndarray], exact: bool, n_keys: int) -> dict:
    """Per rollout, the shared path's masks against re-encoding's: asserted equal (`exact`) or close (CUDA)."""
    differing, ious = [], []
    for g, (a, b) in enumerate(zip(masks, reference, strict=True)):
        if a.shape != b.shape:
            raise AssertionError(f"{n_keys} keyframes, rollout {g}: mask shapes differ ({a.shape} vs {b.shape})")
        union = int(np.logical_or(a, b).sum())
        differing.append(int((a != b).sum()))
        ious.append(1.0 if union == 0 else float(np.logical_and(a, b).sum()) / union)
        if exact and differing[-1]:
            raise AssertionError(f"{n_keys} keyframes, rollout {g}: shared masks differ from re-encoding "
                                 f"({differing[-1]} pixels)")
        if not exact and ious[-1] < CUDA_MIN_IOU:
            raise AssertionError(f"{n_keys} keyframes, rollout {g}: shared masks agree with re-encoding only to "
                                 f"IoU {ious[-1]:.4f} (< {CUDA_MIN_IOU} on CUDA)")
    return {"masks_equal": not any(differing), "check": "bit-equal" if exact else f"IoU >= {CUDA_MIN_IOU}",
            "max_differing_pixels": max(differing), "min_iou_between_paths": round(min(ious), 6)}


def fp32_without_tf32() -> None:
    """CUDA in true fp32: no TF32 matrix products (the predictor is loaded with dtype float32: no bf16 autocast)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image-size", type=int, default=512)
    parser.add_argument("--frames", type=int, default=6)
    parser.add_argument("--rollouts", type=int, default=8)
    parser.add_argument("--frame-side", type=int, default=112)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--keyframes", type=int, nargs="+", default=[1, 2, 3, 6],
                        help="the sweep: distinct keyframes among the rollouts")
    parser.add_argument("--micro", action="store_true")
    parser.add_argument("--config", default="", help="sam2 package config (default: sam2.1 hiera_t)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--precision", choices=["bf16", "fp32"], default="bf16",
                        help="CUDA: bf16 autocast as the stage, or fp32 without TF32 (masks compared by IoU)")
    parser.add_argument("--vos-optimized", action="store_true",
                        help="CUDA: SAM2.1's compiled predictor (SAM2VideoPredictorVOS); the warm-up call compiles")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="default: bench/results/sam2_reward.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device here")
    exact = args.device == "cpu"
    if args.device == "cuda" and args.precision == "fp32":
        fp32_without_tf32()
    with tempfile.TemporaryDirectory() as tmp:
        dtype = "float32" if args.device == "cpu" or args.precision == "fp32" else "bfloat16"
        predictor = build(args.image_size, args.micro, Path(tmp), args.config, args.device, dtype, args.vos_optimized)
    rng = np.random.default_rng(1)
    frames = [rng.integers(0, 255, (args.frame_side, args.frame_side, 3), dtype=np.uint8) for _ in range(args.frames)]
    propagate_groups(predictor, frames, rollouts(1, args.frames, args.frame_side, 1))  # warm-up
    sweep = []
    for n_keys in args.keyframes:
        groups = rollouts(args.rollouts, args.frames, args.frame_side, n_keys)
        per_rollout_s, reference = _timed(predictor, frames, groups, False, args.repeats)
        shared_s, masks = _timed(predictor, frames, groups, True, args.repeats)
        agreement = compare(masks, reference, exact, n_keys)
        sweep.append({"distinct_keyframes": len({g.key_idx for g in groups}),
                      "boxes": sum(len(g.boxes) for g in groups), "per_rollout_s": round(per_rollout_s, 3),
                      "shared_s": round(shared_s, 3), "speedup": round(per_rollout_s / shared_s, 2),
                      **agreement, "foreground_pixels": int(sum(m.sum() for m in masks))})
        sys.stderr.write(json.dumps(sweep[-1]) + "\n")
        # written after every sweep point, so a long CPU sweep that is stopped keeps the points it finished
        model = "micro" if args.micro else f"{Path(args.config).stem or 'sam2.1_hiera_t'} (random weights)"
        figures = {"model": model, "image_size": args.image_size, "frames": args.frames,
                   "frame_side": args.frame_side, "rollouts": args.rollouts, "device": str(predictor.device),
                   "threads": args.threads, "precision": "fp32" if args.device == "cpu" else args.precision,
                   "vos_optimized": args.vos_optimized, "encoder_passes_shared": "one per prompt (all frames)",
                   "repeats_best_of": args.repeats, "sweep": sweep,
                   "sweep_asked": args.keyframes, "target_speedup": 4.0}
        name = args.out.stem if args.out else "sam2_reward"  # the record names the file it is in
        write_result(name, figures, "re-encoding per rollout: a fresh SAM2 state per rollout (released "
                     "Veason-R1 reward), propagate_groups(share_encoding=False)",
                     code=("stages/sam2_wrapper", "bench/bench_sam2_reward.py"), out=args.out)


if __name__ == "__main__":
    main()
