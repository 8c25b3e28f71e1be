"""Benchmark: SAM2 consistency reward for the 8 rollouts of one prompt — shared frame encoding with
keyframe-grouped batched tracking (`propagate_groups`) vs re-encoding per rollout (a fresh SAM2 state
per rollout, as the released Veason-R1 reward does), in the same run, same predictor, same inputs.

    python bench/bench_sam2_reward.py [--image-size 512] [--frames 6] [--rollouts 8] [--repeats 2]

Random weights (hiera_t shape by default; --micro for the test model). Masks of both paths are checked
equal. Writes bench/out/sam2_reward.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from stages.segment import BoxGroup, load_video_predictor, propagate_groups


def build(image_size: int, micro: bool, folder: Path):
    from sam2.build_sam import build_sam2

    from stages.models.tiny_sam2 import BASE_CONFIG, MICRO_OVERRIDES, build_tiny_sam2

    if micro:
        checkpoint, config = build_tiny_sam2(folder, image_size, 0)
        return load_video_predictor(str(checkpoint), str(config))
    overrides = [f"++model.image_size={image_size}"]
    torch.manual_seed(0)
    model = build_sam2(BASE_CONFIG, ckpt_path=None, device="cpu", hydra_overrides_extra=overrides)
    torch.save({"model": model.state_dict()}, folder / "model.pt")
    (folder / "config.yaml").write_text(json.dumps({"base": BASE_CONFIG, "overrides": overrides}))
    del MICRO_OVERRIDES
    return load_video_predictor(str(folder / "model.pt"), str(folder / "config.yaml"))


def rollouts(n: int, n_frames: int, size: int, n_keys: int, seed: int = 0) -> list[BoxGroup]:
    """GRPO-like rollouts: keyframes cycling over `n_keys` frames (a trained policy agrees often), 1–2 boxes."""
    rng = np.random.default_rng(seed)
    keys = [i % min(n_keys, n_frames) for i in range(n)]
    groups = []
    for k in keys:
        boxes = []
        for _ in range(rng.integers(1, 3)):
            x, y = rng.uniform(0.1, 0.5, 2) * size
            w, h = rng.uniform(0.2, 0.4, 2) * size
            boxes.append([x, y, x + w, y + h])
        groups.append(BoxGroup(int(k), boxes))
    return groups


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--image-size", type=int, default=512)
    parser.add_argument("--frames", type=int, default=6)
    parser.add_argument("--rollouts", type=int, default=8)
    parser.add_argument("--frame-side", type=int, default=112)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--keyframes", type=int, default=3, help="distinct keyframes among the rollouts")
    parser.add_argument("--micro", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="bench/out/sam2_reward.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        predictor = build(args.image_size, args.micro, Path(tmp))
    rng = np.random.default_rng(1)
    frames = [rng.integers(0, 255, (args.frame_side, args.frame_side, 3), dtype=np.uint8) for _ in range(args.frames)]
    groups = rollouts(args.rollouts, args.frames, args.frame_side, args.keyframes)
    propagate_groups(predictor, frames, groups[:1])  # warm-up
    times: dict[str, list[float]] = {"shared": [], "per_rollout": []}
    for _ in range(args.repeats):
        for name, share in (("per_rollout", False), ("shared", True)):
            start = time.perf_counter()
            masks = propagate_groups(predictor, frames, groups, share_encoding=share)
            times[name].append(time.perf_counter() - start)
            if name == "per_rollout":
                reference = masks
            else:  # batched tracking encodes the keyframe memory from the SAM head's mask: near, not bit-equal
                inter = sum(int((a & b).sum()) for a, b in zip(masks, reference, strict=True))
                union = sum(int((a | b).sum()) for a, b in zip(masks, reference, strict=True))
                agreement = inter / union if union else 1.0
    best = {k: min(v) for k, v in times.items()}
    result = {"image_size": args.image_size, "frames": args.frames, "rollouts": args.rollouts,
              "distinct_keyframes": len({g.key_idx for g in groups}), "micro": args.micro,
              "device": str(predictor.device), "threads": args.threads, "machine": platform.machine(),
              "per_rollout_s": round(best["per_rollout"], 3), "shared_s": round(best["shared"], 3),
              "speedup": round(best["per_rollout"] / best["shared"], 2), "mask_iou_vs_baseline": round(agreement, 4),
              "all_s": times}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "all_s"}))  # noqa: T201 - a benchmark script


if __name__ == "__main__":
    main()
