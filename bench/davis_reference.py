"""The published per-frame DAVIS / VISA metrics, written out from their definition with OpenCV.

This is the reference that tests/stages/test_metrics.py checks `stages.evaluate.metrics` against and
the baseline that bench/bench_metrics.py times. It shares no code with `stages.evaluate.metrics` on
purpose: it follows davis2017-evaluation's `davis2017/metrics.py` step by step — `db_eval_iou` on the
whole (T, H, W) stack, `f_measure` one frame at a time (`_seg2bmap` boundary maps, each dilated with
`cv2.dilate` by `skimage.morphology.disk(bound_pix)`, here the same disk built from its formula),
and VISA's robustness `max(1 − Σ((1 − gt) · pred) / (Σfg + 1e-6), 0)` in uint8 on the stack.
"""

from __future__ import annotations

import cv2
import numpy as np


def seg2bmap(seg: np.ndarray) -> np.ndarray:
    """DAVIS `_seg2bmap` for one (H, W) mask (same output size)."""
    seg = seg.astype(bool)
    e = np.zeros_like(seg)
    s = np.zeros_like(seg)
    se = np.zeros_like(seg)
    e[:, :-1] = seg[:, 1:]
    s[:-1, :] = seg[1:, :]
    se[:-1, :-1] = seg[1:, 1:]
    b = seg ^ e | seg ^ s | seg ^ se
    b[-1, :] = seg[-1, :] ^ e[-1, :]
    b[:, -1] = seg[:, -1] ^ s[:, -1]
    b[-1, -1] = 0
    return b


def disk(radius: float) -> np.ndarray:
    """`skimage.morphology.disk(radius)` (strict radius): X² + Y² ≤ r² on arange(-r, r + 1)², uint8."""
    grid = np.arange(-radius, radius + 1)
    x, y = np.meshgrid(grid, grid)
    return (x**2 + y**2 <= radius**2).astype(np.uint8)


def f_measure(foreground_mask: np.ndarray, gt_mask: np.ndarray, bound_th: float = 0.008) -> float:
    """DAVIS `f_measure` of one frame (no void pixels)."""
    bound_pix = bound_th if bound_th >= 1 else np.ceil(bound_th * np.linalg.norm(foreground_mask.shape))
    fg_boundary = seg2bmap(foreground_mask)
    gt_boundary = seg2bmap(gt_mask)
    fg_dil = cv2.dilate(fg_boundary.astype(np.uint8), disk(bound_pix))
    gt_dil = cv2.dilate(gt_boundary.astype(np.uint8), disk(bound_pix))
    gt_match = gt_boundary * fg_dil
    fg_match = fg_boundary * gt_dil
    n_fg = np.sum(fg_boundary)
    n_gt = np.sum(gt_boundary)
    if n_fg == 0 and n_gt > 0:
        precision, recall = 1, 0
    elif n_fg > 0 and n_gt == 0:
        precision, recall = 0, 1
    elif n_fg == 0 and n_gt == 0:
        precision, recall = 1, 1
    else:
        precision = np.sum(fg_match) / float(n_fg)
        recall = np.sum(gt_match) / float(n_gt)
    if precision + recall == 0:
        return 0
    return 2 * precision * recall / (precision + recall)


def db_eval_iou(annotation: np.ndarray, segmentation: np.ndarray) -> np.ndarray:
    """DAVIS `db_eval_iou` on a (T, H, W) stack (no void pixels): per-frame IoU, 1 where the union is empty."""
    annotation = annotation.astype(bool)
    segmentation = segmentation.astype(bool)
    inters = np.sum(segmentation & annotation, axis=(-2, -1))
    union = np.sum(segmentation | annotation, axis=(-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        j = inters / union
    j[np.isclose(union, 0)] = 1
    return j


def db_eval_boundary(annotation: np.ndarray, segmentation: np.ndarray, bound_th: float = 0.008) -> np.ndarray:
    """DAVIS `db_eval_boundary` on a (T, H, W) stack: `f_measure` frame by frame."""
    return np.array([f_measure(segmentation[t], annotation[t], bound_th) for t in range(len(annotation))],
                    dtype=np.float64)


def r_visa(gt_sum: np.ndarray, pred: np.ndarray, foreground: np.ndarray) -> np.ndarray:
    """VISA's per-frame robustness on uint8 (T, H, W) stacks (products wrap as uint8)."""
    neg = ((1 - gt_sum) * pred).sum(axis=(1, 2))
    return np.maximum(1 - neg / (foreground.sum(axis=(1, 2)) + 1e-6), 0.0)
