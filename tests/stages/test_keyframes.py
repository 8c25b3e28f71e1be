"""Keyframe choice, anchor-based frame sampling, box scaling, KTG points, AKS candidates, quarantine.

The stage tests write a tiny ReVOS root with tests/revos_factory.py (for mask_dict.json) and the index
tables directly (tests/stages/test_sample.write_index), so they do not depend on ingest.
"""

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
from pycocotools import mask as mask_utils
from scipy import ndimage

from schemas.sample import KeyframesSchema
from stages.core import rle
from stages.core.frame_spread import spread_frames
from stages.core.io import read_table
from stages.core.runner import RunnerParams
from stages.keyframes import select_keyframes
from stages.keyframes.frames import (
    choose_keyframe,
    frames_and_keyframe,
    inscribed_circle_centre,
    sample_frames,
    scale_box,
    top_k_frames,
)
from stages.params.keyframes import KeyframesParams
from stages.params.sample import SampleParams
from stages.sample import sample_pools
from tests.revos_factory import VideoSpec, simple_video, write_root
from tests.stages.test_sample import write_index

# --- the sampling rule ------------------------------------------------------------------------------------


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


@settings(max_examples=200, deadline=None)
@given(st.integers(12, 400), st.data())
def test_sampling_rule_spreads_frames(T: int, data: st.DataObject) -> None:
    # evenly spaced; the stride is the widest that fits N frames on the anchor's phase, so never below
    # ⌊(T−1)/N⌋ (any stride k ≤ (T−1)/N fits N points whatever the phase) nor above ⌊(T−1)/(N−1)⌋
    N = 6
    anchor = data.draw(st.integers(0, T - 1))
    frames = sample_frames(T, N, anchor)
    stride = frames[1] - frames[0]
    assert all(b - a == stride for a, b in zip(frames, frames[1:], strict=False))
    assert max(1, (T - 1) // N) <= stride <= (T - 1) // (N - 1)


@pytest.mark.parametrize(("T", "N", "anchor", "expected"), [
    (30, 6, 13, [3, 8, 13, 18, 23, 28]),  # stride ⌊29/5⌋ = 5, phase 13 mod 5 = 3
    (30, 6, 0, [0, 5, 10, 15, 20, 25]),
    (30, 6, 29, [4, 9, 14, 19, 24, 29]),
    (4, 6, 2, [0, 1, 2, 3]),  # short video: every frame once, no duplicates
    (6, 6, 5, [0, 1, 2, 3, 4, 5]),
    (10, 6, 9, [4, 5, 6, 7, 8, 9]),
    (12, 6, 11, [1, 3, 5, 7, 9, 11]),  # stride 2, phase 1
    (50, 1, 17, [17]),
])
def test_sampling_rule_literals(T: int, N: int, anchor: int, expected: list[int]) -> None:
    assert sample_frames(T, N, anchor) == expected


def test_sampling_rule_stride_reduction_literal() -> None:
    # T = 11: widest stride 2, but phase 1 leaves only 5 grid points (1, 3, 5, 7, 9) → stride 1
    assert sample_frames(11, 6, 1) == [0, 1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="anchor 7 outside"):
        sample_frames(5, 3, 7)
    with pytest.raises(ValueError, match="positive frame counts"):
        sample_frames(0, 6, 0)


# --- the keyframe draw ------------------------------------------------------------------------------------


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


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 10_000), min_size=2, max_size=60), st.integers(0, 2**32))
def test_different_seeds_draw_different_keyframes(areas: list[int], seed: int) -> None:
    # with ≥ 2 candidates, 64 seeds drawing the same frame has probability ≤ 2⁻⁶³
    draws = {choose_keyframe(areas, 5, "topk_random", np.random.default_rng(seed + s))[0] for s in range(64)}
    assert len(draws) > 1 and draws <= set(top_k_frames(areas, 5))


def test_top_k_draw_is_uniform_and_seeds_differ() -> None:
    areas = [5, 50, 40, 0, 30, 20, 10, 45]
    top = top_k_frames(areas, 5)
    assert top == [1, 7, 2, 4, 5]
    draws = Counter(choose_keyframe(areas, 5, "topk_random", np.random.default_rng(s))[0] for s in range(5000))
    assert set(draws) == set(top)
    expected = 5000 / 5
    chi2 = sum((draws[i] - expected) ** 2 / expected for i in top)
    assert chi2 < 18.47  # χ² critical value at p = 0.001, 4 degrees of freedom
    assert all(choose_keyframe(areas, 5, "max_area", np.random.default_rng(s))[0] == 1 for s in range(20))


@pytest.mark.parametrize(("areas", "k", "expected"), [
    ([3, 3, 3], 2, [0, 1]),  # ties: earlier frame first
    ([0, 0, 7], 5, [2]),  # fewer positive frames than k
    ([1, 2, 3, 4, 5, 6], 5, [5, 4, 3, 2, 1]),
])
def test_top_k_literals(areas: list[int], k: int, expected: list[int]) -> None:
    assert top_k_frames(areas, k) == expected


# --- geometry -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("box", "size", "expected"), [
    ([10, 20, 30, 40], 560, [10 * 560 / 160, 20 * 560 / 120, 30 * 560 / 160, 40 * 560 / 120]),
    ([0, 0, 160, 120], 112, [0, 0, 112, 112]),
    ([80, 60, 81, 61], 560, [280, 280, 283.5, 284.6666667]),
    (None, 560, None),
    ([np.nan] * 4, 560, None),
])
def test_box_scaling(box, size, expected) -> None:
    got = scale_box(box, 160, 120, size)
    assert got == (None if expected is None else pytest.approx(expected))


@settings(max_examples=150, deadline=None)
@given(arrays(np.bool_, st.tuples(st.integers(1, 30), st.integers(1, 30)), elements=st.booleans()))
def test_inscribed_circle_centre_lies_inside_mask_and_is_farthest(mask: np.ndarray) -> None:
    centre = inscribed_circle_centre(mask)
    if not mask.any():
        assert centre is None
        return
    x, y = centre
    assert mask[int(y), int(x)]
    # small masks are searched exactly: the point is as far from the background (and border) as any
    distance = ndimage.distance_transform_edt(np.pad(mask, 1))[1:-1, 1:-1]
    assert distance[int(y), int(x)] == pytest.approx(distance.max())


@settings(max_examples=30, deadline=None)
@given(st.integers(100, 400), st.integers(100, 400), st.integers(0, 2**16))
def test_inscribed_circle_centre_of_large_masks_stays_inside(h: int, w: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:h, :w]
    cy, cx, r = rng.uniform(0.3, 0.7) * h, rng.uniform(0.3, 0.7) * w, rng.uniform(10, min(h, w) / 3)
    mask = (yy - cy) ** 2 + (xx - cx) ** 2 <= r**2
    x, y = inscribed_circle_centre(mask)
    assert mask[int(y), int(x)]
    assert np.hypot(x - cx, y - cy) <= max(h, w) / 96 + 2  # the subsampled search stays near the true centre


def test_inscribed_circle_centre_of_rectangle() -> None:
    mask = np.zeros((20, 30), dtype=bool)
    mask[5:15, 4:26] = True  # 10 rows: the centre row band is rows 9-10
    x, y = inscribed_circle_centre(mask)
    assert 9 <= y <= 11 and 8 <= x <= 22


# --- the stage ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("keyframes")
    videos = [simple_video(f"S/train/v{i}", n_frames=8 + i % 5) for i in range(12)]
    empty = VideoSpec("S/train/empty", n_frames=5, objects={999: [None] * 5},
                      expressions=[{"exp": "the ghost", "obj_id": [0], "anno_id": [999], "type_id": 0}])
    # a target absent in every other frame: samples with zero-area frames for AKS option B
    boxes = [(4, 4, 12, 12) if t % 2 else None for t in range(10)]
    gappy = VideoSpec("S/train/gappy", n_frames=10, objects={77: boxes},
                      expressions=[{"exp": f"the box {i}", "obj_id": [0], "anno_id": [77], "type_id": i % 2}
                                   for i in range(12)])
    videos += [empty, gappy, simple_video("S/valid/c", split="valid", n_frames=3),
               simple_video("S/valid/d", split="valid", n_frames=20)]
    write_root(base / "root", videos)
    write_index(base / "index", videos)
    sample_pools(SampleParams(sft_first_k=1, grpo_size=12), 0, base / "index", base / "sample")
    select_keyframes(KeyframesParams(n_frames=6, train_size=112), 0, base / "root", base / "index",
                     base / "sample", base / "kf", RunnerParams(kind="threads"))
    return base


def test_stage_writes_valid_tables(pipeline: Path) -> None:
    out = pipeline / "kf"
    for pool in ("sft", "grpo", "eval"):
        table = pd.read_parquet(out / f"{pool}.parquet")
        KeyframesSchema.validate(table)
        samples = pd.read_parquet(pipeline / "sample" / f"{pool}.parquet")
        quarantined = set(pd.read_parquet(out / "quarantine.parquet")["item"])
        assert set(table["sample_id"]) == set(samples["sample_id"]) - quarantined
        for row in table.itertuples():
            frames = list(row.frame_indices)
            assert len(frames) == min(6, row.n_video_frames)
            assert list(row.timestamps) == frames  # 1 FPS: a frame's position is its second
            assert frames[row.keyframe_pos] == row.keyframe_idx == row.keyframe_timestamp
            assert len(row.boxes) == len(row.areas) == len(row.union_areas) == len(frames)
    lineage = json.loads((out / "lineage.json").read_text())
    assert lineage["stage"] == "keyframes" and lineage["params"]["n_frames"] == 6


def test_geometry_is_per_object_at_train_size(pipeline: Path) -> None:
    grpo = pd.read_parquet(pipeline / "kf" / "grpo.parquet")
    multi = grpo[grpo["n_instances"] == 2]
    assert len(multi)
    for row in multi.itertuples():
        H, W, S = row.height, row.width, row.train_size
        for t, frame_boxes, frame_areas, union_area in zip(row.frame_indices, row.boxes, row.areas,
                                                         row.union_areas, strict=True):
            # object a: (2+t, 2, 10+t, 8) in a 32×24 frame; object b: (20, 10+t%3, 28, 18), absent at t=1
            np.testing.assert_allclose(frame_boxes[0], [(2 + t) * S / W, 2 * S / H, (10 + t) * S / W, 8 * S / H])
            assert frame_areas[0] == pytest.approx(48 * S * S / (H * W))
            if t == 1:
                assert frame_boxes[1] is None and frame_areas[1] == 0
            else:
                b = 10 + t % 3
                np.testing.assert_allclose(frame_boxes[1], [20 * S / W, b * S / H, 28 * S / W, 18 * S / H])
                assert frame_areas[1] == pytest.approx(8 * (18 - b) * S * S / (H * W))
            # union area (rectangles do not overlap) = sum; never a union box
            assert union_area == pytest.approx(sum(frame_areas))
        key = list(row.frame_indices).index(row.keyframe_idx)
        masks = json.loads(row.union_masks[key])
        assert mask_utils.area(rle.to_coco(masks)) * S * S / (H * W) == pytest.approx(row.union_areas[key])


def test_keyframe_topk_aks_and_ktg(pipeline: Path) -> None:
    root_masks = json.loads((pipeline / "root" / "mask_dict.json").read_text())
    rows = pd.concat([pd.read_parquet(pipeline / "kf" / f"{p}.parquet") for p in ("sft", "grpo", "eval")])
    for _, pool in rows.groupby("pool"):  # exactly 1:1 (± 1) over the samples that have both kinds
        eligible = pool[(pool["n_instances"] > 0) & (pool["aks_invalid"].map(len) > 0)]
        assert (eligible["aks_option"] == "B").sum() == len(eligible) // 2
    assert (rows["n_instances"] > 0).any() and (rows["aks_invalid"].map(len) > 0).sum() >= 4
    options = Counter()
    for row in rows[rows["n_instances"] > 0].itertuples():
        annos = [str(a) for a in row.anno_ids]
        union = [mask_utils.area(rle.union([root_masks[a][t] for a in annos], row.height, row.width))
                 for t in range(row.n_video_frames)]
        top = list(row.topk_indices)
        assert top == top_k_frames(union, 5) and row.keyframe_idx in top
        assert list(row.aks_valid) == top
        assert list(row.aks_invalid) == [t for t in range(row.n_video_frames) if union[t] == 0]
        assert row.aks_frame_idx in (top if row.aks_option == "A" else list(row.aks_invalid))
        # regression: option A is THE largest-area frame (RCoT-Seg), not a random top-k one
        assert row.aks_option == "B" or row.aks_frame_idx == top[0] == int(np.argmax(union))
        # regression: the candidate's file comes from ingest's frame list (ReVOS has gaps in frame numbers)
        frames = pd.read_parquet(pipeline / "index" / "videos.parquet").set_index("video").loc[row.video, "frames"]
        assert row.aks_frame_name == frames[row.aks_frame_idx]
        S = row.train_size
        assert mask_utils.area(rle.to_coco(json.loads(row.aks_union_mask))) * S * S / (row.height * row.width) \
            == pytest.approx(sum(row.aks_areas))
        assert (sum(row.aks_areas) > 0) == (row.aks_option == "A") and row.keyframe_size == S
        options[row.aks_option] += 1
        for anno, point in zip(annos, row.ktg_points, strict=True):
            mask = rle.decode(root_masks[anno][row.keyframe_idx], row.height, row.width)
            if point is None:
                assert not mask.any()
                continue
            x, y = point[0] * row.width / row.train_size, point[1] * row.height / row.train_size
            assert mask[int(y), int(x)]  # the KTG point lies on its own object at the keyframe
    assert options["A"] and options["B"]  # both AKS options occur (1:1 in expectation)


def test_quarantine_short_videos_and_no_target(pipeline: Path) -> None:
    quarantine = pd.read_parquet(pipeline / "kf" / "quarantine.parquet")
    ghost = quarantine[quarantine["item"].str.startswith("S_train_empty")]
    assert len(ghost) == 1 and "S/train/empty#0: target is empty in every frame" in ghost["reason"].iloc[0]
    assert ghost["file"].iloc[0].endswith("mask_dict.json")
    ev = pd.read_parquet(pipeline / "kf" / "eval.parquet")
    short = ev[ev["n_video_frames"] == 3]
    assert len(short) and all(list(f) == [0, 1, 2] for f in short["frame_indices"])
    no_target = ev[ev["type"] == "no_target"]
    assert len(no_target) == 2 and all(len(p) == 0 for p in no_target["ktg_points"])
    assert all(u == 0 for areas in no_target["union_areas"] for u in areas)


def test_stage_is_seeded_and_deterministic_across_runners(pipeline: Path) -> None:
    args = (KeyframesParams(), 3, pipeline / "root", pipeline / "index", pipeline / "sample")
    select_keyframes(*args, pipeline / "a", RunnerParams(kind="serial"))
    select_keyframes(*args, pipeline / "b", RunnerParams(kind="threads", workers=2))
    for pool in ("sft", "grpo", "eval"):
        assert (pipeline / "a" / f"{pool}.parquet").read_bytes() == (pipeline / "b" / f"{pool}.parquet").read_bytes()
    draws = pd.read_parquet(pipeline / "a" / "grpo.parquet").set_index("sample_id")
    other = pd.read_parquet(pipeline / "kf" / "grpo.parquet").set_index("sample_id")  # seed 0
    assert (draws["keyframe_idx"] != other.loc[draws.index, "keyframe_idx"]).any()  # other seed, other draws
    assert (draws["seed"] != other.loc[draws.index, "seed"]).all()


def test_max_area_mode(pipeline: Path) -> None:
    out = pipeline / "max"
    select_keyframes(KeyframesParams(mode="max_area"), 0, pipeline / "root", pipeline / "index",
                     pipeline / "sample", out, RunnerParams(kind="serial"))
    grpo = pd.read_parquet(out / "grpo.parquet")
    assert (grpo["keyframe_idx"] == grpo["topk_indices"].map(lambda t: t[0])).all()
    assert set(grpo["keyframe_mode"]) == {"max_area"}


# --- keyframes.frames: uniform (the evaluation's spread; the keyframe among the shown frames) ----------------------


@pytest.mark.parametrize(("T", "N", "expected"), [
    # round(i·(T−1)/(N−1)), i = 0..N−1: first and last frame, evenly spaced between
    (30, 6, [0, 6, 12, 17, 23, 29]),  # 29/5 = 5.8: 0, 5.8, 11.6, 17.4, 23.2, 29
    (10, 4, [0, 3, 6, 9]),
    (10, 6, [0, 2, 4, 5, 7, 9]),  # 1.8: 0, 1.8, 3.6, 5.4, 7.2, 9
    (8, 6, [0, 1, 3, 4, 6, 7]),  # 1.4: 0, 1.4, 2.8, 4.2, 5.6, 7
    (12, 8, [0, 2, 3, 5, 6, 8, 9, 11]),  # 11/7 ≈ 1.571
    (4, 6, [0, 1, 2, 3]),  # short video: every frame once
    (6, 6, [0, 1, 2, 3, 4, 5]),
    (50, 1, [0]),
])
def test_uniform_spread_is_the_evaluations_rule(T: int, N: int, expected: list[int]) -> None:
    import stages.evaluate as evaluate_stage
    from stages.pretrain import scenes

    assert spread_frames(T, N) == expected
    # one implementation: the evaluation's and the pre-training's names are the same function
    assert evaluate_stage.spread_frames is spread_frames and scenes.spread_frames is spread_frames
    key_rng = np.random.default_rng(0)
    shown, key, top = frames_and_keyframe(np.arange(1, T + 1, dtype=float), N, 3, "topk_random", "uniform", key_rng)
    assert shown == expected and key in top and top == expected[::-1][:3]  # areas grow: the last shown frames


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 60), st.integers(1, 12), st.sampled_from(["topk_random", "max_area"]), st.integers(1, 5),
       st.integers(0, 2**32), st.data())
def test_uniform_keyframe_is_a_shown_frame_or_quarantined(T: int, N: int, mode: str, k: int, seed: int,
                                                          data: st.DataObject) -> None:
    # areas with many zeros, so that "present in the video but in no shown frame" occurs
    areas = data.draw(arrays(np.float64, T, elements=st.sampled_from([0.0, 0.0, 0.0, 1.0, 7.5, 40.0])))
    expected = spread_frames(T, N)
    shown_areas = areas[expected]
    if not shown_areas.any():
        with pytest.raises(ValueError, match="empty in every shown frame" if areas.any() else "empty in every frame"):
            frames_and_keyframe(areas, N, k, mode, "uniform", np.random.default_rng(seed))
        return
    shown, key, top = frames_and_keyframe(areas, N, k, mode, "uniform", np.random.default_rng(seed))
    assert shown == expected and len(shown) == min(T, N)
    assert all(0 <= f < T for f in shown) and all(a < b for a, b in zip(shown, shown[1:], strict=False))
    assert key in shown and key in top and set(top) <= set(shown) and areas[key] > 0
    # the top-k of the shown frames: largest first, ties to the earlier frame
    assert top == sorted((t for t in shown if areas[t] > 0), key=lambda t: (-areas[t], t))[:k]
    if mode == "max_area":
        assert key == shown[int(np.argmax(shown_areas))]  # the first of equal largest shown areas
    # the same per-sample draw as anchor mode makes over the shown frames' areas
    assert key == shown[choose_keyframe(shown_areas, k, mode, np.random.default_rng(seed))[0]]


def test_select_keyframes_uniform(tmp_path: Path) -> None:
    square = [(2, 2, 10, 10)]
    videos = [
        # present only in frame 1, which the 6-frame spread of 10 (0, 2, 4, 5, 7, 9) does not show
        VideoSpec("U/train/late", n_frames=10, objects={61: [None] + square + [None] * 8},
                  expressions=[{"exp": "the blink", "obj_id": [0], "anno_id": [61], "type_id": 0}]),
        # area grows with t; present at odd frames only: shown zero-area frames 0, 2, 4 (AKS option B)
        VideoSpec("U/train/odd", n_frames=10, objects={62: [(2, 2, 4 + t, 4 + t) if t % 2 else None
                                                            for t in range(10)]},
                  expressions=[{"exp": "the odd square", "obj_id": [0], "anno_id": [62], "type_id": 0}]),
        VideoSpec("U/valid/nt", split="valid", n_frames=7, objects={63: square * 7},
                  expressions=[{"exp": "the square", "obj_id": [0], "anno_id": [63], "type_id": 0},
                               {"exp": "the purple cat", "obj_id": [], "anno_id": [], "type_id": 2}]),
    ]
    write_root(tmp_path / "root", videos)
    write_index(tmp_path / "index", videos)
    sample_pools(SampleParams(sft_first_k=1, grpo_size=0), 0, tmp_path / "index", tmp_path / "sample")

    def run(name: str, **kw) -> tuple[pd.DataFrame, pd.DataFrame]:
        select_keyframes(KeyframesParams(n_frames=6, top_k=3, train_size=56, **kw), 0, tmp_path / "root",
                         tmp_path / "index", tmp_path / "sample", tmp_path / name)
        rows = pd.concat([read_table(tmp_path / name / f"{p}.parquet", KeyframesSchema) for p in ("sft", "eval")])
        return rows.set_index(["video", "type"]), pd.read_parquet(tmp_path / name / "quarantine.parquet")

    rows, quarantine = run("uniform", frames="uniform", mode="max_area")
    assert set(rows["frame_spread"]) == {"uniform"}
    assert quarantine["reason"].tolist() == ["U/train/late#0: target is empty in every shown frame (uniform spread "
                                             "of 6) of U/train/late (10 frames, anno_ids [61])"]
    odd = rows.loc[("U/train/odd", "referring")]
    assert list(odd["frame_indices"]) == [0, 2, 4, 5, 7, 9] and list(odd["timestamps"]) == [0, 2, 4, 5, 7, 9]
    assert odd["keyframe_idx"] == 9 and odd["keyframe_pos"] == 5 and list(odd["topk_indices"]) == [9, 7, 5]
    assert list(odd["aks_valid"]) == [9, 7, 5] and list(odd["aks_invalid"]) == [0, 2, 4]  # shown frames only
    assert odd["aks_frame_idx"] in (9, 0, 2, 4) and list(odd["union_areas"]) == pytest.approx(
        [a * (56 * 56) / (24 * 32) for a in (0, 0, 0, 49, 81, 121)])
    assert odd["ktg_points"][0][0] == pytest.approx(7.5 * 56 / 32)  # the inscribed centre at frame 9's square
    assert list(odd["video_union_areas"]) == [float((2 + t) ** 2) if t % 2 else 0.0 for t in range(10)]
    nt = rows.loc[("U/valid/nt", "no_target")]
    assert list(nt["frame_indices"]) == [0, 1, 2, 4, 5, 6] and nt["keyframe_idx"] == 4  # the middle shown frame
    assert list(nt["aks_invalid"]) == [0, 1, 2, 4, 5, 6] and nt["aks_frame_idx"] == 4
    # anchor (the default) on the same samples: the late target is kept, its keyframe the frame it is in
    rows, quarantine = run("anchor")
    assert quarantine.empty and set(rows["frame_spread"]) == {"anchor"}
    assert rows.loc[("U/train/late", "referring"), "keyframe_idx"] == 1
