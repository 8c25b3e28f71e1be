"""J, F, R and the ReVOS aggregation on literal masks; J, F and R against the published per-frame path.

The oracle (bench/davis_reference.py) is DAVIS's own per-frame code written out with OpenCV
(`_seg2bmap`, `cv2.dilate` by a disk); it shares no code with stages/evaluate/metrics.py.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import davis_reference as ref
from stages.evaluate import metrics as M


def rect(h: int, w: int, y1: int, y2: int, x1: int, x2: int) -> np.ndarray:
    mask = np.zeros((h, w), dtype=bool)
    mask[y1:y2, x1:x2] = True
    return mask




# --- J and F on literal masks -----------------------------------------------------------------------------

EMPTY = np.zeros((100, 100), dtype=bool)
FULL = np.ones((100, 100), dtype=bool)
SQUARE = rect(100, 100, 20, 40, 20, 40)


@pytest.mark.parametrize(("gt", "pred", "j", "f"), [
    (EMPTY, EMPTY, 1.0, 1.0),  # both empty
    (EMPTY, SQUARE, 0.0, 0.0),  # one empty
    (SQUARE, EMPTY, 0.0, 0.0),
    (SQUARE, SQUARE, 1.0, 1.0),
    # DAVIS decides F on boundaries and the image border is no boundary: a full mask has none, so
    # empty vs full is "both without boundary" → F = 1 in the published evaluator (J = 0).
    (EMPTY, FULL, 0.0, 1.0),
    # 20×20 squares 5 px apart on a 100×100 frame (tolerance ⌈0.008·141.4⌉ = 2 px): IoU 300/500; the
    # 80-pixel boundary rings match on 2 × 18 edge pixels + 4 near the corners on each side: P = R = 0.5
    (SQUARE, rect(100, 100, 20, 40, 25, 45), 0.6, 0.5),
    # 1-px shift: IoU 380/420; every boundary pixel is within 2 px of the other ring
    (SQUARE, rect(100, 100, 20, 40, 21, 41), 380 / 420, 1.0),
])
def test_j_and_f_literals(gt: np.ndarray, pred: np.ndarray, j: float, f: float) -> None:
    assert M.j_measure(gt, pred)[0] == pytest.approx(j, abs=1e-12)
    assert M.f_measure(gt, pred)[0] == pytest.approx(f, abs=1e-12)


def test_tolerance_and_oracle_disk() -> None:
    assert M.tolerance_px(100, 100) == 2.0  # ⌈0.008 × 141.42⌉
    assert M.tolerance_px(480, 854) == 8.0  # ⌈0.008 × 979.6⌉
    assert M.tolerance_px(720, 1280) == 12.0  # ⌈0.008 × 1468.6⌉
    assert M.tolerance_px(10, 10, bound_th=3) == 3.0  # ≥ 1: pixels
    with pytest.raises(ValueError, match="whole number of pixels"):
        M.f_measure(SQUARE, SQUARE, bound_th=2.5)
    # the oracle's disk is skimage's: 5 pixels at radius 1, 13 at 2, 441 at 12 (Gauss circle problem)
    assert ref.disk(1).tolist() == [[0, 1, 0], [1, 1, 1], [0, 1, 0]]
    assert [int(ref.disk(r).sum()) for r in (2, 12)] == [13, 441]


def test_boundary_map_literal() -> None:
    seg = rect(5, 6, 1, 3, 1, 4)  # rows 1–2, cols 1–3
    expected = np.array([
        [1, 1, 1, 1, 0, 0],  # above the square: its south / south-east neighbour is inside
        [1, 0, 0, 1, 0, 0],  # left of the square; the square's last column differs from its east
        [1, 1, 1, 1, 0, 0],  # the square's last row differs from its south neighbour
        [0, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0],
    ], dtype=bool)
    assert (M.boundary_map(seg)[0] == expected).all()
    assert (ref.seg2bmap(seg) == expected).all()
    # a mask touching the border: the border itself is no boundary
    assert not M.boundary_map(np.ones((4, 4), bool)).any()


def test_stack_of_frames_is_per_frame() -> None:
    gt = np.stack([EMPTY, SQUARE, SQUARE])
    pred = np.stack([EMPTY, EMPTY, rect(100, 100, 20, 40, 25, 45)])
    assert M.j_measure(gt, pred).tolist() == pytest.approx([1.0, 0.0, 0.6])
    assert M.f_measure(gt, pred, chunk=2).tolist() == pytest.approx([1.0, 0.0, 0.5])


def test_shape_mismatch_raises() -> None:
    with pytest.raises(ValueError, match="differ in shape"):
        M.j_measure(np.zeros((2, 3)), np.zeros((3, 2)))


masks_2d = st.integers(2, 40).flatmap(lambda h: st.integers(2, 40).flatmap(
    lambda w: st.lists(st.tuples(st.integers(0, h), st.integers(0, h), st.integers(0, w), st.integers(0, w)),
                       max_size=3).map(lambda rects: (h, w, rects))))


def _paint(h: int, w: int, rects: list) -> np.ndarray:
    mask = np.zeros((h, w), dtype=bool)
    for y1, y2, x1, x2 in rects:
        mask[min(y1, y2):max(y1, y2), min(x1, x2):max(x1, x2)] = True
    return mask


@settings(max_examples=150, deadline=None)
@given(masks_2d, st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40), st.integers(0, 40),
                                    st.integers(0, 40)), max_size=3), st.integers(0, 2**31 - 1),
       st.sampled_from([0.008, 0.05, 0.2, 1, 2, 5]))
def test_j_and_f_equal_the_published_per_frame_code(spec, rects_b, seed, bound_th) -> None:
    h, w, rects_a = spec
    gt = _paint(h, w, rects_a)
    pred = _paint(h, w, [(y1 % (h + 1), y2 % (h + 1), x1 % (w + 1), x2 % (w + 1)) for y1, y2, x1, x2 in rects_b])
    noise = np.random.default_rng(seed).random((h, w)) < 0.1
    for p in (pred, pred ^ noise):
        assert M.f_measure(gt, p, bound_th)[0] == ref.f_measure(p, gt, bound_th)  # identical, not approx
        assert M.j_measure(gt, p)[0] == ref.db_eval_iou(gt[None], p[None])[0]
        assert (M.boundary_map(p)[0] == ref.seg2bmap(p)).all()


@pytest.mark.parametrize(("height", "width"), [(720, 1280), (67, 130), (64, 128), (5, 200)])
def test_stacks_equal_the_published_code(height: int, width: int) -> None:
    """Whole stacks (word-aligned and unaligned widths, a radius larger than the frame): J, F and R
    are bit-identical to DAVIS / VISA frame by frame, whatever the chunking."""
    rng = np.random.default_rng(height * width)
    frames = 3 if height > 100 else 7
    yy, xx = np.mgrid[:height, :width]
    gt = np.zeros((frames, height, width), np.uint8)
    for t in range(frames):
        for cy, cx in rng.uniform(0.2, 0.8, (2, 2)):
            gt[t] += (((yy - cy * height) / (0.2 * height)) ** 2 + ((xx - cx * width) / (0.15 * width)) ** 2 <= 1)
    pred = np.roll(gt > 0, int(rng.integers(1, 4)), axis=2) | (rng.random(gt.shape) < 0.002)
    pred = pred.astype(np.uint8) * np.uint8(255)
    pred[0] = 0  # an empty prediction
    fg = (gt > 0).astype(np.uint8)
    f_ref = ref.db_eval_boundary(gt, pred)
    assert f_ref[0] == 0.0 and 0.3 < f_ref[1:].mean() < 1.0  # a case that is neither trivial nor perfect
    for chunk in (1, 2, 32):
        assert M.f_measure(gt, pred, chunk=chunk).tolist() == f_ref.tolist()
    assert M.j_measure(gt, pred).tolist() == ref.db_eval_iou(gt, pred).tolist()
    assert M.r_visa(gt, pred, fg).tolist() == ref.r_visa(gt, pred, fg).tolist()
    got = M.measures(gt, pred, fg)
    assert got["F"].tolist() == f_ref.tolist() and got["J"].tolist() == ref.db_eval_iou(gt, pred).tolist()
    neg = ((pred > 0) & (gt == 0)).sum(axis=(1, 2))
    assert got["R_binary"].tolist() == np.maximum(1 - neg / (fg.sum(axis=(1, 2)) + 1e-6), 0.0).tolist()


# --- R: VISA's replica vs binary ---------------------------------------------------------------------------


def test_r_visa_weighs_a_255_false_positive_and_r_binary_does_not() -> None:
    gt = np.zeros((1, 40, 50), np.uint8)
    gt[0, :10, :10] = 1
    fg = np.zeros_like(gt)
    fg[0, :20, :50] = 1  # 1000 foreground pixels
    pred = gt * 255  # a 0/255 PNG: perfect, plus one false-positive pixel
    pred[0, 30, 30] = 255
    assert M.r_visa(gt, pred, fg)[0] == pytest.approx(1 - 255 / (1000 + 1e-6))
    assert M.r_binary(gt, pred, fg)[0] == pytest.approx(1 - 1 / (1000 + 1e-6))
    pred01 = (pred > 0).astype(np.uint8)  # the same prediction stored as 0/1: both agree
    assert M.r_visa(gt, pred01, fg)[0] == pytest.approx(M.r_binary(gt, pred01, fg)[0])
    pred[0, 30:40, 30:40] = 255  # 100 false positives × 255 > 1000: clamped at 0
    assert M.r_visa(gt, pred, fg)[0] == 0.0
    assert M.r_binary(gt, pred, fg)[0] == pytest.approx(1 - 100 / (1000 + 1e-6))


def test_r_visa_uint8_wraparound_on_overlapping_instances() -> None:
    gt = np.zeros((1, 4, 4), np.uint8)
    gt[0, 0, 0] = 2  # two instances overlap here
    gt[0, 0, 1] = 3
    fg = np.ones_like(gt)  # 16 pixels
    pred = np.zeros_like(gt)
    pred[0, 0, :2] = 255
    # (1 − 2) wraps to 255, 255 × 255 wraps to 1; (1 − 3) = 254, 254 × 255 wraps to 2: neg = 3
    assert M.r_visa(gt, pred, fg)[0] == pytest.approx(1 - 3 / (16 + 1e-6))
    assert M.r_binary(gt, pred, fg)[0] == pytest.approx(1.0)  # both pixels are inside the target
    pred01 = (pred > 0).astype(np.uint8)  # (1 − 2) × 1 = 255, (1 − 3) × 1 = 254: neg = 509, clamped
    assert M.r_visa(gt, pred01, fg)[0] == 0.0


def test_r_visa_wants_uint8() -> None:
    with pytest.raises(ValueError, match="uint8"):
        M.r_visa(np.zeros((1, 2, 2), bool), np.zeros((1, 2, 2), np.uint8), np.zeros((1, 2, 2), np.uint8))


# --- aggregation -------------------------------------------------------------------------------------------


def table(rows: list[tuple[int, float, float, float]]) -> pd.DataFrame:
    return pd.DataFrame([{"type_id": t, "J": j, "F": f, "R_visa": r, "R_binary": r} for t, j, f, r in rows])


def test_aggregate_excludes_no_target_and_averages_subsets() -> None:
    out = M.aggregate(table([
        (0, 1.0, 0.8, 1.0), (0, 0.5, 0.6, 0.5),  # referring: J 75, F 70
        (1, 0.2, 0.4, 0.3),  # reasoning: J 20, F 40
        (2, 0.0, 0.0, 0.0), (2, 0.0, 0.0, 0.0),  # no target: ignored
    ]))
    assert out["J_referring"] == pytest.approx(75.0)
    assert out["F_referring"] == pytest.approx(70.0)
    assert out["JF_referring"] == pytest.approx(72.5)
    assert out["JF_reasoning"] == pytest.approx(30.0)
    assert out["J_overall"] == pytest.approx(47.5)
    assert out["JF_overall"] == pytest.approx(51.25)
    assert out["R_visa_overall"] == pytest.approx((75.0 + 30.0) / 2)


def test_aggregate_rounds_per_expression_like_visa() -> None:
    out = M.aggregate(table([(0, 0.123456, 0.0, 0.0), (1, 0.5, 0.5, 0.5)]))
    assert out["J_referring"] == pytest.approx(12.35)  # round(100 · j, 2)


def test_aggregate_missing_prediction_zero_counts_and_empty_subset_is_nan() -> None:
    out = M.aggregate(table([(0, 1.0, 1.0, 1.0), (0, 0.0, 0.0, 0.0)]))  # a missing prediction scores 0
    assert out["J_referring"] == pytest.approx(50.0)
    assert math.isnan(out["J_reasoning"]) and math.isnan(out["J_overall"])
