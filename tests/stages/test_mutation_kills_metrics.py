"""Metric rules that the mutation run (scripts/mutation.sh metrics, docs/testing.md) found unpinned.

Values come from DAVIS's own per-frame code written out with OpenCV (bench/davis_reference.py, no code shared
with stages/evaluate/metrics.py) or are worked out by hand in the comments.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from bench import davis_reference as ref
from stages.evaluate import metrics as M


def pixels(h: int, w: int, *points: tuple[int, int]) -> np.ndarray:
    mask = np.zeros((h, w), dtype=bool)
    for y, x in points:
        mask[y, x] = True
    return mask


@pytest.mark.parametrize(("gt", "pred", "j"), [
    (pixels(9, 9), pixels(9, 9, (4, 4)), 0.0),  # union of one pixel, no overlap
    (pixels(9, 9, (4, 4)), pixels(9, 9, (4, 4)), 1.0),
    (pixels(9, 9, (4, 4)), pixels(9, 9, (4, 4), (4, 5)), 0.5),
    (pixels(9, 9), pixels(9, 9), 1.0),
])
def test_j_on_single_pixels(gt, pred, j):
    assert M.j_measure(gt, pred).tolist() == [j]
    assert M.j_and_f(gt, pred)[0].tolist() == [j]


def test_f_with_a_zero_pixel_tolerance_equals_the_published_code():
    bound_th = 0  # a tolerance of 0 pixels: only coinciding boundary pixels match
    gt = np.zeros((12, 12), dtype=bool)
    gt[3:8, 3:8] = True
    pred = np.zeros_like(gt)
    pred[3:8, 4:9] = True
    assert M.tolerance_px(12, 12, bound_th) == 0.0
    assert M.f_measure(gt, pred, bound_th)[0] == ref.f_measure(pred, gt, bound_th)
    assert 0.0 < M.f_measure(gt, pred, bound_th)[0] < M.f_measure(gt, pred, 1)[0] == 1.0


def test_bad_inputs_name_the_problem_in_one_line():
    with pytest.raises(ValueError, match=re.escape("masks must be (H, W) or (T, H, W), got shape (1, 2, 3, 4)")):
        M.j_measure(np.zeros((1, 2, 3, 4)), np.zeros((1, 2, 3, 4)))
    with pytest.raises(ValueError, match="^" + re.escape("ground truth (1, 2, 3) and prediction (1, 3, 2) differ in "
                                                         "shape") + "$"):
        M.j_measure(np.zeros((2, 3)), np.zeros((3, 2)))
    with pytest.raises(ValueError, match="^" + re.escape("bound_th 2.5: a tolerance of ≥ 1 must be a whole number of "
                                                         "pixels") + "$"):
        M.f_measure(np.zeros((4, 4)), np.zeros((4, 4)), bound_th=2.5)
    with pytest.raises(ValueError, match="whole number of pixels"):  # a negative fraction: a negative radius
        M.f_measure(np.zeros((4, 4)), np.zeros((4, 4)), bound_th=-0.5)
    u8 = np.zeros((1, 2, 2), np.uint8)
    with pytest.raises(ValueError, match="^" + re.escape("r_visa wants uint8 arrays (VISA's dtype), got bool, uint8, "
                                                         "uint8") + "$"):
        M.r_visa(u8.astype(bool), u8, u8)
    for bad in ((u8, u8.astype(bool), u8), (u8, u8, u8.astype(bool))):
        with pytest.raises(ValueError, match="wants uint8"):
            M.r_visa(*bad)
    with pytest.raises(ValueError, match="differ in shape"):
        M.r_visa(u8, u8, np.zeros((1, 2, 3), np.uint8))
    with pytest.raises(ValueError, match="differ in shape"):
        M.r_binary(u8, u8, np.zeros((1, 2, 3), np.uint8))
    with pytest.raises(ValueError, match="differ in shape"):
        M.r_binary(u8, np.zeros((1, 2, 3), np.uint8), np.zeros((1, 2, 3), np.uint8))


def test_score_expression_is_the_mean_over_frames():
    gt = np.zeros((2, 10, 10), np.uint8)
    gt[:, 2:6, 2:6] = 1
    pred = gt * np.uint8(255)
    pred[1] = 0  # frame 1 missed: J 0, F 0
    fg = np.ones_like(gt)
    out = M.score_expression(gt, pred, fg)
    assert out == {"J": 0.5, "F": 0.5, "R_visa": 1.0, "R_binary": 1.0}


def test_aggregate_with_a_subset_of_metrics():
    table = pd.DataFrame([{"type_id": 0, "J": 0.5, "F": 0.25}, {"type_id": 1, "J": 1.0, "F": 0.75}])
    out = M.aggregate(table, metrics=("J", "F"))  # J and F alone still give JF
    assert out == {"J_referring": 50.0, "F_referring": 25.0, "JF_referring": 37.5, "J_reasoning": 100.0,
                   "F_reasoning": 75.0, "JF_reasoning": 87.5, "J_overall": 75.0, "F_overall": 50.0,
                   "JF_overall": 62.5}
    only_j = M.aggregate(table, metrics=("J",))  # no F: no JF
    assert only_j == {"J_referring": 50.0, "J_reasoning": 100.0, "J_overall": 75.0}
    empty = M.aggregate(table[table["type_id"] == 0], metrics=("J",))
    assert empty["J_referring"] == 50.0 and math.isnan(empty["J_reasoning"]) and math.isnan(empty["J_overall"])
