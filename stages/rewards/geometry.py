"""Box and mask geometry for the rewards (boxes: [x1, y1, x2, y2], exclusive right/bottom edges)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment


def clip_boxes(boxes: Sequence[Sequence[float]], height: int, width: int) -> np.ndarray:
    """(M, 4) boxes clipped to the image; a swapped or empty box keeps zero area (no reordering)."""
    arr = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    arr[:, [0, 2]] = arr[:, [0, 2]].clip(0, width)
    arr[:, [1, 3]] = arr[:, [1, 3]].clip(0, height)
    return arr


def box_areas(boxes: np.ndarray) -> np.ndarray:
    """Areas of (M, 4) boxes; 0 for swapped corners."""
    return np.clip(boxes[:, 2] - boxes[:, 0], 0, None) * np.clip(boxes[:, 3] - boxes[:, 1], 0, None)


def iou_matrix(pred: np.ndarray, gt: np.ndarray) -> np.ndarray:
    """(M, N) IoU of two box sets; 0 where the union is empty."""
    if len(pred) == 0 or len(gt) == 0:
        return np.zeros((len(pred), len(gt)))
    x1 = np.maximum(pred[:, None, 0], gt[None, :, 0])
    y1 = np.maximum(pred[:, None, 1], gt[None, :, 1])
    x2 = np.minimum(pred[:, None, 2], gt[None, :, 2])
    y2 = np.minimum(pred[:, None, 3], gt[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    union = box_areas(pred)[:, None] + box_areas(gt)[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def hungarian(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Minimum-cost one-to-one matching (scipy `linear_sum_assignment`); empty for an empty matrix."""
    if cost.size == 0:
        return np.zeros(0, dtype=int), np.zeros(0, dtype=int)
    return linear_sum_assignment(cost)


def box_centres(boxes: np.ndarray) -> np.ndarray:
    """(M, 2) centres of (M, 4) boxes."""
    return np.stack([(boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2], axis=1)


def mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two boolean masks; both empty → 1 (DAVIS J convention)."""
    union = np.logical_or(a, b).sum()
    return 1.0 if union == 0 else float(np.logical_and(a, b).sum() / union)
