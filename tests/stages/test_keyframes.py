"""Keyframe choice, anchor-based frame sampling, box scaling and KTG points."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from stages.core import rle
from stages.core.params import IngestParams, KeyframesParams, SampleParams
from stages.core.runner import RunnerParams
from stages.ingest import ingest
from stages.keyframes import select_keyframes
from stages.keyframes.frames import choose_keyframe, inscribed_circle_centre, sample_frames, scale_box, top_k_frames
from stages.sample import sample_pools
from tests.revos_factory import VideoSpec, simple_video, write_root


@settings(max_examples=500, deadline=None)
@given(st.integers(1, 400), st.integers(1, 12), st.data())
def test_sampling_rule_properties(T: int, N: int, data: st.DataObject) -> None:
    anchor = data.draw(st.integers(0, T - 1))
    frames = sample_frames(T, N, anchor)
    assert anchor in frames
    assert all(0 <= f < T for f in frames)
    assert all(a < b for a, b in zip(frames, frames[1:], strict=False))
    assert len(frames) == (N if T >= N else T)
    assert sample_frames(T, N, anchor) == frames  # a pure function of (T, N, anchor)


def test_sampling_rule_literals() -> None:
    assert sample_frames(30, 6, 13) == [3, 8, 13, 18, 23, 28]  # stride 5, phase 13 mod 5 = 3
    assert sample_frames(4, 6, 2) == [0, 1, 2, 3]  # short video: every frame once
    assert sample_frames(10, 6, 9) == [4, 5, 6, 7, 8, 9]
    with pytest.raises(ValueError, match="anchor 7 outside"):
        sample_frames(5, 3, 7)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0, 1000), min_size=1, max_size=40), st.integers(0, 2**32))
def test_keyframe_is_among_top_k_and_seeded(areas: list[float], seed: int) -> None:
    if max(areas) <= 0:
        with pytest.raises(ValueError, match="empty in every frame"):
            choose_keyframe(areas, 5, "topk_random", np.random.default_rng(seed))
        return
    key, top = choose_keyframe(areas, 5, "topk_random", np.random.default_rng(seed))
    assert key in top and len(top) == min(5, sum(a > 0 for a in areas))
    assert min(areas[i] for i in top) >= max([a for i, a in enumerate(areas) if i not in top] + [0])
    assert choose_keyframe(areas, 5, "topk_random", np.random.default_rng(seed))[0] == key
    assert choose_keyframe(areas, 5, "max_area", np.random.default_rng(seed))[0] == top[0]


def test_top_k_draw_is_uniform() -> None:
    areas = [5, 50, 40, 0, 30, 20, 10, 45]
    top = top_k_frames(areas, 5)
    assert top == [1, 7, 2, 4, 5]
    draws = Counter(choose_keyframe(areas, 5, "topk_random", np.random.default_rng(s))[0] for s in range(5000))
    assert set(draws) == set(top)
    expected = 5000 / 5
    chi2 = sum((draws[i] - expected) ** 2 / expected for i in top)
    assert chi2 < 18.5  # p ≈ 0.001 for 4 degrees of freedom


@pytest.mark.parametrize(("box", "size", "expected"), [
    ([10, 20, 30, 40], 560, [10 * 560 / 160, 20 * 560 / 120, 30 * 560 / 160, 40 * 560 / 120]),
    ([0, 0, 160, 120], 112, [0, 0, 112, 112]),
    (None, 560, None),
    ([np.nan] * 4, 560, None),
])
def test_box_scaling(box, size, expected) -> None:
    got = scale_box(box, 160, 120, size)
    assert got == (None if expected is None else pytest.approx(expected))


@settings(max_examples=150, deadline=None)
@given(arrays(np.bool_, st.tuples(st.integers(1, 30), st.integers(1, 30)), elements=st.booleans()))
def test_inscribed_circle_centre_lies_inside_mask(mask: np.ndarray) -> None:
    centre = inscribed_circle_centre(mask)
    if not mask.any():
        assert centre is None
        return
    x, y = centre
    assert mask[int(y), int(x)]


def test_inscribed_circle_centre_of_rectangle() -> None:
    mask = np.zeros((20, 30), dtype=bool)
    mask[5:15, 4:26] = True  # 10 rows: the centre row band is rows 9-10
    x, y = inscribed_circle_centre(mask)
    assert 9 <= y <= 11 and 8 <= x <= 22


@pytest.fixture()
def pipeline(tmp_path: Path) -> Path:
    videos = [simple_video(f"S/train/v{i}", n_frames=8) for i in range(4)]
    empty = VideoSpec("S/train/empty", n_frames=5, objects={999: [None] * 5},
                      expressions=[{"exp": "the ghost", "obj_id": [0], "anno_id": [999], "type_id": 0}])
    videos += [empty, simple_video("S/valid/c", split="valid", n_frames=3)]
    write_root(tmp_path / "root", videos)
    ingest(IngestParams(), tmp_path / "root", tmp_path / "index", RunnerParams(kind="serial"))
    sample_pools(SampleParams(sft_first_k=1, grpo_size=6), 0, tmp_path / "index", tmp_path / "sample")
    return tmp_path


def test_stage_writes_valid_tables(pipeline: Path) -> None:
    out = pipeline / "kf"
    report = select_keyframes(KeyframesParams(n_frames=6, train_size=112), 0, pipeline / "root", pipeline / "index",
                              pipeline / "sample", out, RunnerParams(kind="threads"))
    grpo = pd.read_parquet(out / "grpo.parquet")
    quarantine = pd.read_parquet(out / "quarantine.parquet")
    assert report.metrics["quarantined"] == len(quarantine) >= 1
    assert any("empty in every frame" in r for r in quarantine["reason"])
    row = grpo[grpo["n_instances"] == 2].iloc[0]
    assert len(row["frame_indices"]) == 6 and row["keyframe_idx"] in list(row["topk_indices"])
    # per-object boxes, never unions: the two objects' boxes differ in a frame where both are present
    both = [f for f in row["boxes"] if all(b is not None for b in f)]
    assert both and not np.allclose(both[0][0], both[0][1])
    # box of object a at train size: (2+i, 2, 10+i, 8) in a 32x24 frame → × (112/32, 112/24)
    t = int(row["frame_indices"][0])
    np.testing.assert_allclose(row["boxes"][0][0], [(2 + t) * 3.5, 2 * 112 / 24, (10 + t) * 3.5, 8 * 112 / 24])
    union = rle.decode(json.loads(row["union_masks"][0]), 24, 32)
    assert union.sum() == pytest.approx(row["union_areas"][0] * 24 * 32 / 112**2)
    valid = pd.read_parquet(out / "eval.parquet")
    short = valid[valid["n_video_frames"] == 3]
    assert all(list(f) == [0, 1, 2] for f in short["frame_indices"])  # T < N: all frames, no duplicates
    key_boxes = row["boxes"][list(row["frame_indices"]).index(row["keyframe_idx"])]
    for point, frame_boxes in zip(row["ktg_points"], key_boxes, strict=True):
        if point is not None:
            x1, y1, x2, y2 = frame_boxes
            assert x1 <= point[0] <= x2 and y1 <= point[1] <= y2


def test_stage_is_deterministic_across_runners(pipeline: Path) -> None:
    args = (KeyframesParams(), 3, pipeline / "root", pipeline / "index", pipeline / "sample")
    select_keyframes(*args, pipeline / "a", RunnerParams(kind="serial"))
    select_keyframes(*args, pipeline / "b", RunnerParams(kind="threads", workers=2))
    for pool in ("sft", "grpo", "eval"):
        assert (pipeline / "a" / f"{pool}.parquet").read_bytes() == (pipeline / "b" / f"{pool}.parquet").read_bytes()
