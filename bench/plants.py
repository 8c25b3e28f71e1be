"""Planted bugs for the learning check (`bench_learning_runs.py --plant NAME`): a bug a broken pipeline could have,
applied to a run's stage outputs so that the figures must show it. A check that a planted bug cannot move is no
check.

- `mirror-boxes`: every SFT and GRPO target mirrored left-right — the boxes, the KTG points, the AKS candidate's boxes
  (train-size pixels) and the target masks the rewards read (original pixels) — in the keyframes stage's tables, so
  the teacher's traces, the shards and the GRPO reward all see mirrored targets; the evaluation pool is untouched.
  A model that learns where the targets are learns the wrong side.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from pycocotools import mask as mask_utils

PLANTS = ("mirror-boxes",)
MIRRORED_TABLES = ("sft.parquet", "grpo.parquet")  # the training pools' keyframes tables; eval.parquet is left


def mirror_box(box, width: float):
    """[x1, y1, x2, y2] mirrored left-right in a frame `width` wide (None stays None)."""
    if box is None:
        return None
    x1, y1, x2, y2 = (float(v) for v in box)
    return [width - x2, y1, width - x1, y2]


def mirror_point(point, width: float):
    """[x, y] mirrored left-right (None stays None)."""
    return None if point is None else [width - float(point[0]), float(point[1])]


def mirror_rle(text: str) -> str:
    """A COCO RLE (JSON text, as the keyframes table stores it) of the mask mirrored left-right."""
    rle = json.loads(text)
    mask = mask_utils.decode({"size": rle["size"], "counts": rle["counts"].encode()})
    flipped = mask_utils.encode(np.asfortranarray(mask[:, ::-1]))
    return json.dumps({"counts": flipped["counts"].decode(), "size": rle["size"]})


def mirror_row(row: dict) -> dict:
    """One keyframes-table row with every target mirrored (boxes per shown frame and object, KTG points, the AKS
    candidate's boxes at the train size; the union masks at the original size)."""
    size = float(row["train_size"])
    return {**row,
            "boxes": [[mirror_box(b, size) for b in frame] for frame in row["boxes"]],
            "ktg_points": [mirror_point(p, size) for p in row["ktg_points"]],
            "aks_boxes": [mirror_box(b, size) for b in row["aks_boxes"]],
            "union_masks": [mirror_rle(m) for m in row["union_masks"]],
            "aks_union_mask": mirror_rle(row["aks_union_mask"])}


def plant_mirror_boxes(keyframes_dir: Path) -> dict[str, int]:
    """Mirror the training pools' tables in `keyframes_dir` in place; returns the rows mirrored per table."""
    counts = {}
    for name in MIRRORED_TABLES:
        path = Path(keyframes_dir) / name
        table = pd.read_parquet(path)
        pd.DataFrame([mirror_row(row) for row in table.to_dict("records")], columns=table.columns).to_parquet(path)
        counts[name] = len(table)
    return counts
