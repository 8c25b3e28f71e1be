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


# --- second run (scripts/mutation.sh metrics): chunking, input dtypes, the tolerance passed through ------------


def test_frames_are_packed_in_chunks_once_each(monkeypatch):
    """The documented memory bound: J and F pack `chunk` frames at a time, each frame once (gt, then prediction)."""
    sizes = []
    pack = M._pack
    monkeypatch.setattr(M, "_pack", lambda masks: sizes.append(len(masks)) or pack(masks))
    rng = np.random.default_rng(3)
    gt, pred = rng.random((10, 6, 7)) > 0.5, rng.random((10, 6, 7)) > 0.5
    expected_f = M.f_measure(gt, pred)
    sizes.clear()
    assert M.f_measure(gt, pred, chunk=4).tolist() == expected_f.tolist()
    assert sizes == [4, 4, 4, 4, 2, 2]
    monkeypatch.setattr(M, "F_CHUNK", 4)
    sizes.clear()
    M.j_measure(gt, pred)
    assert sizes == [4, 4, 4, 4, 2, 2]
    sizes.clear()
    M.r_binary(gt, pred, np.ones_like(gt))
    assert sizes == [4, 4, 4, 4, 4, 4, 2, 2, 2]  # prediction, ground truth, foreground per chunk


def test_long_videos_are_scored_to_the_last_frame():
    frames = 70  # more than two chunks of F_CHUNK
    gt = np.zeros((frames, 2, 2), dtype=bool)
    gt[:, 0, 0] = True
    pred = gt.copy()
    pred[-1, 1, 1] = True  # the last frame: one false positive
    j = M.j_measure(gt, pred)
    assert j[:-1].tolist() == [1.0] * (frames - 1) and j[-1] == 0.5
    r = M.r_binary(gt, pred, gt)
    assert r[:-1].tolist() == [1.0] * (frames - 1) and r[-1] == pytest.approx(1 - 1 / (1 + 1e-6), abs=1e-15)


def test_any_non_zero_value_is_foreground_whatever_the_dtype():
    rng = np.random.default_rng(5)
    gt, pred = rng.random((2, 9, 70)) > 0.4, rng.random((2, 9, 70)) > 0.6
    j, f = M.j_and_f(gt, pred)
    for dtype, scale in ((np.float64, 0.5), (np.float32, 3.0), (np.uint8, 255), (np.int32, -7)):
        as_values = (gt * scale).astype(dtype), (pred * scale).astype(dtype)
        j2, f2 = M.j_and_f(*as_values)
        assert j2.tolist() == j.tolist() and f2.tolist() == f.tolist()
        assert M.j_measure(*as_values).tolist() == j.tolist()
    bmap = M.boundary_map(pred)
    assert bmap.dtype == bool and bmap.shape == pred.shape
    assert bmap.tolist() == [ref.seg2bmap(p).astype(bool).tolist() for p in pred]


def test_f_with_a_tolerance_as_tall_as_the_frame_equals_the_published_code():
    """A disk radius of height − 1 or more: a boundary pixel in the first row matches one in the last."""
    rng = np.random.default_rng(11)
    for case in range(300):
        height, width = int(rng.integers(2, 6)), int(rng.integers(2, 40))
        bound_th = int(rng.integers(1, 6))
        gt, pred = rng.random((height, width)) > rng.random(), rng.random((height, width)) > rng.random()
        assert M.f_measure(gt, pred, bound_th)[0] == pytest.approx(ref.f_measure(pred, gt, bound_th)), case
    gt = np.zeros((3, 8), dtype=bool)
    gt[0, :4] = True  # its boundary lies in row 0
    pred = np.zeros((3, 8), dtype=bool)
    pred[2, 6:] = True  # its boundary lies in rows 1 and 2: row 2 is two rows (the radius) below row 0
    assert M.f_measure(gt, pred, 2)[0] == pytest.approx(ref.f_measure(pred, gt, 2))


def test_measures_and_score_expression_use_the_tolerance_given():
    gt = np.zeros((1, 12, 12), np.uint8)
    gt[0, 3:8, 3:8] = 1
    pred = np.zeros_like(gt)
    pred[0, 3:8, 4:9] = 255
    fg = np.ones_like(gt)
    tight = M.f_measure(gt, pred, 0)[0]
    assert 0.0 < tight < 1.0 == M.f_measure(gt, pred)[0]  # the default tolerance (1 px here) matches everything
    assert M.measures(gt, pred, fg, bound_th=0)["F"].tolist() == [tight]
    assert M.score_expression(gt, pred, fg, bound_th=0)["F"] == tight


def test_r_visa_of_a_frame_without_foreground():
    """No foreground pixel: a false positive drives R to 0 (1 − Σneg / 1e-6, clipped), none leaves it 1."""
    gt = np.zeros((2, 3, 3), np.uint8)
    pred = np.zeros_like(gt)
    pred[0, 1, 1] = 255
    fg = np.zeros_like(gt)
    assert M.r_visa(gt, pred, fg).tolist() == [0.0, 1.0]
    assert M.r_binary(gt, pred, fg).tolist() == [0.0, 1.0]


def test_aggregate_reads_object_columns_as_floats_and_warns_about_nothing():
    import warnings

    table = pd.DataFrame({"type_id": [0, 1, 1], "J": pd.Series([0.5, 0.25, 0.125], dtype=object)})
    assert M.aggregate(table, metrics=("J",)) == {"J_referring": 50.0, "J_reasoning": 18.75, "J_overall": 34.375}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an empty subset is NaN without numpy's "mean of empty slice" warning
        out = M.aggregate(table[table["type_id"] == 1], metrics=("J",))
    assert math.isnan(out["J_referring"]) and out["J_reasoning"] == 18.75
