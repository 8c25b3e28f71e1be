"""Tiny GRPO inputs for tests: a ground truth with a moving square, frames, and GRPO shards."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import webdataset as wds
from PIL import Image

from stages.core import rle

SIZE = 56  # frames at train size (square)
TIMESTAMPS = [0, 2, 4, 6]


def square_masks(n: int = len(TIMESTAMPS), size: int = SIZE) -> list[np.ndarray]:
    """A square growing then shrinking while it moves right: largest at frame 1."""
    masks = []
    for i, side in enumerate([12, 20, 16, 0][:n]):
        m = np.zeros((size, size), dtype=bool)
        m[10:10 + side, 4 + 8 * i:4 + 8 * i + side] = True
        masks.append(m)
    return masks


def ground_truth(**overrides) -> dict:
    """GroundTruth JSON dict (docs/contracts.md) of `square_masks`, keyframe at t=2."""
    masks = square_masks()
    boxes, areas = [], []
    for m in masks:
        ys, xs = np.nonzero(m)
        box = [float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)] if len(xs) else None
        boxes.append([box])
        areas.append([float(m.sum())])
    gt = {"timestamps": TIMESTAMPS, "image_size": [SIZE, SIZE], "boxes": boxes, "areas": areas,
          "union_areas": [a[0] for a in areas], "masks": [rle.encode(m) for m in masks], "keyframe_timestamp": 2,
          "points": [[20.0, 20.0]], "aks_option": "A", "difficulty": 4.0, "token_budget": 20}
    gt.update(overrides)
    return gt


def frames(seed: int = 0) -> list[np.ndarray]:
    """RGB frames: noise background with the bright square of `square_masks`."""
    rng = np.random.default_rng(seed)
    out = []
    for m in square_masks():
        f = rng.integers(0, 60, (SIZE, SIZE, 3), dtype=np.uint8)
        f[m] = (230, 40, 40)
        out.append(f)
    return out


def answer(t: int = 2, boxes: list | None = None, think: str = "The square is largest at 2s.", **extra) -> str:
    """A well-formed completion."""
    payload = {"keyframe_timestamp": t, "bbox_2d_list": boxes if boxes is not None else [[12, 10, 32, 30]], **extra}
    return f"<think>{think}</think><answer>{json.dumps(payload)}</answer>"


def write_grpo_shards(folder: Path, n: int = 2) -> Path:
    """`folder/shard-000000.tar` with n samples in the shard stage's layout."""
    folder.mkdir(parents=True, exist_ok=True)
    with wds.ShardWriter(str(folder / "shard-%06d.tar"), maxcount=100, verbose=0) as sink:
        for i in range(n):
            record = {"__key__": f"s{i:03d}"}
            for j, f in enumerate(frames(i)):
                buf = io.BytesIO()
                Image.fromarray(f).save(buf, format="JPEG", quality=95)
                record[f"frame_{j}.jpg"] = buf.getvalue()
            meta = {"sample_id": f"s{i:03d}", "pool": "grpo", "expression": "the red square", "type": "referring",
                    "timestamps": TIMESTAMPS, "ground_truth": ground_truth()}
            record["json"] = json.dumps(meta).encode()
            sink.write(record)
    return folder
