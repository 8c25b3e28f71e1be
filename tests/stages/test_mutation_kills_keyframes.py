"""Keyframe rules that the mutation run (scripts/mutation.sh keyframes, docs/testing.md) found unpinned.

Second round: the stage itself — its report, quarantine rows, lineage, progress series, per-sample seeds, the
union of overlapping targets, the top-k draw, and each input error's whole message.

The sampling rule's docstring promises more than "the anchor is in": the stride is the widest that fits N
frames on the anchor's phase, and of that grid the N consecutive points that keep the anchor as central as
possible are taken. Both are checked here against a brute force over every stride and every window.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from stages.core import mask_table
from stages.core.io import derive_seed
from stages.core.lineage import code_hash
from stages.core.progress import add_listener, remove_listener
from stages.core.runner import RunnerParams
from stages.keyframes import _geometry, select_keyframes
from stages.keyframes.frames import sample_frames
from stages.params.keyframes import KeyframesParams
from stages.params.sample import SampleParams
from stages.sample import sample_pools
from tests.revos_factory import VideoSpec, encode, rect_mask, write_root
from tests.stages.test_sample import write_index


def brute_force(T: int, N: int, anchor: int) -> tuple[int, int]:
    """(stride, the anchor's best index in its window): the widest stride ≤ ⌊(T−1)/(N−1)⌋ whose grid through
    the anchor has N points, and the index closest to the centre (N−1)//2 over every window holding it."""
    for stride in range((T - 1) // (N - 1), 0, -1):
        grid = list(range(anchor % stride, T, stride))
        if len(grid) >= N:
            p = grid.index(anchor)
            indices = [p - s for s in range(len(grid) - N + 1) if s <= p < s + N]
            return stride, min(indices, key=lambda i: abs(i - (N - 1) // 2))
    raise AssertionError("stride 1 always fits")


@settings(max_examples=150, deadline=None)
@given(st.integers(3, 300), st.integers(2, 12), st.data())
@example(30, 6, None)
@example(11, 6, None)
def test_anchor_sits_as_centrally_as_the_widest_grid_allows(T, N, data):
    if N >= T:
        N = T - 1
    anchor = data.draw(st.integers(0, T - 1)) if data is not None else T // 2
    frames = sample_frames(T, N, anchor)
    stride, index = brute_force(T, N, anchor)
    assert frames[1] - frames[0] == stride
    assert frames.index(anchor) == index
    assert frames == [anchor + (i - index) * stride for i in range(N)]


def test_even_n_puts_the_anchor_at_the_lower_middle():
    # N = 6, T = 100: strides 19, 18, 17 leave 5 grid points on the anchor's phase; 16 has 7 (2, 18, …, 98):
    # the anchor is index 2 of 0..5 (two frames before it, three after)
    assert sample_frames(100, 6, 50) == [18, 34, 50, 66, 82, 98]
    assert sample_frames(100, 5, 50) == [2, 26, 50, 74, 98]  # odd N: exactly central, stride ⌊99/4⌋ = 24
    assert sample_frames(100, 6, 2) == [2, 21, 40, 59, 78, 97]  # at the start: as central as the grid allows


# --- the stage: its report, quarantine, lineage, seeds and input errors (second round, 2026-11-26) ----------------

N = 6
GROWING = [(2, 2, 4 + t, 4 + t) for t in range(10)]  # area (2 + t)²: the last frames are the largest
# two overlapping squares (union 100 + 100 − 4·6 = 176) that are both absent in frame 3
LEFT = [(2, 4, 12, 14) if t != 3 else None for t in range(N)]
GAP = [(20, 10, 28, 16) if t not in (0, 5) else None for t in range(N)]
RIGHT = [(8, 8, 18, 18) if t != 3 else None for t in range(N)]


def specs() -> list[VideoSpec]:
    return [
        VideoSpec("K/train/pair", n_frames=N, objects={11: LEFT, 12: RIGHT},
                  expressions=[{"exp": "both squares", "obj_id": [0, 1], "anno_id": [11, 12], "type_id": 1}]),
        VideoSpec("K/train/gap", n_frames=N, objects={51: GAP},
                  expressions=[{"exp": "the late square", "obj_id": [0], "anno_id": [51], "type_id": 0}]),
        VideoSpec("K/train/ghost", n_frames=5, objects={21: [None] * 5},
                  expressions=[{"exp": "the ghost", "obj_id": [0], "anno_id": [21], "type_id": 0}]),
        VideoSpec("K/train/grow", n_frames=10, objects={31: GROWING},
                  expressions=[{"exp": "the growing square", "obj_id": [0], "anno_id": [31], "type_id": 0}]),
        VideoSpec("K/valid/short", split="valid", n_frames=3, objects={41: [(1, 1, 5, 5)] * 3},
                  expressions=[{"exp": "the small square", "obj_id": [0], "anno_id": [41], "type_id": 0},
                               {"exp": "the purple cat", "obj_id": [], "anno_id": [], "type_id": 2}]),
    ]


def stage_inputs_of(base: Path, videos: list[VideoSpec]) -> Path:
    """The keyframes stage's inputs for `videos` under `base`: data root, index and sample pools."""
    write_root(base / "root", videos)
    write_index(base / "index", videos)
    sample_pools(SampleParams(sft_first_k=1, grpo_size=0), 0, base / "index", base / "sample")
    return base


@pytest.fixture(scope="module")
def stage_inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stage_inputs_of(tmp_path_factory.mktemp("kf-stage"), specs())


def run_stage(base: Path, out: Path, params: KeyframesParams | None = None, seed: int = 7, **kw):
    return select_keyframes(params or KeyframesParams(n_frames=N, top_k=3, train_size=112), seed, base / "root",
                            base / "index", base / "sample", out, **kw)


def test_report_quarantine_lineage_and_progress_of_a_run(stage_inputs: Path, tmp_path: Path) -> None:
    seen: list[tuple[str, int, int]] = []

    def listener(desc: str, done: int, total: int) -> None:
        seen.append((desc, done, total))

    add_listener(listener)
    try:
        report = run_stage(stage_inputs, tmp_path / "a" / "b" / "kf")  # parents made; no runner: serial
    finally:
        remove_listener(listener)
    out = tmp_path / "a" / "b" / "kf"
    tables = {p: pd.read_parquet(out / f"{p}.parquet") for p in ("sft", "grpo", "eval")}
    by_video = {r["video"]: r for t in tables.values() for r in t.to_dict("records")}
    assert report.stage == "keyframes"
    # pools: sft = the first expression of each training video (the ghost's is quarantined), eval = valid's two
    assert {p: len(t) for p, t in tables.items()} == {"sft": 3, "grpo": 0, "eval": 2}
    # AKS B: the no-target sample, and one of the two training samples that have a zero-area frame
    assert report.metrics == {"eval": 2, "eval.aks_B": 1, "eval.short_videos": 2, "grpo": 0, "grpo.aks_B": 0,
                              "grpo.short_videos": 0, "quarantined": 1, "sft": 3, "sft.aks_B": 1,
                              "sft.short_videos": 0}  # the 6-frame video is not short (T = N)
    quarantine = pd.read_parquet(out / "quarantine.parquet")
    assert quarantine[["stage", "kind", "file"]].to_dict("records") == [
        {"stage": "keyframes", "kind": "sample", "file": str(stage_inputs / "root" / "mask_dict.json")}]
    assert quarantine["reason"].iloc[0].endswith(
        ": target is empty in every frame of K/train/ghost (5 frames, anno_ids [21])")
    reasons = report.tables["quarantined samples"]
    assert list(reasons.columns) == ["item", "reason"]
    assert reasons.to_dict("records") == quarantine[["item", "reason"]].to_dict("records")
    lineage = json.loads((out / "lineage.json").read_text())
    assert sorted(lineage["inputs"]) == ["index", "sample"]
    assert lineage["inputs"]["index"]["path"] == (stage_inputs / "index").as_posix()
    assert lineage["inputs"]["sample"]["path"] == (stage_inputs / "sample").as_posix()
    assert lineage["seed"] == 7 and lineage["counts"] == report.metrics
    assert lineage["code_version"]["sha256"] == code_hash(
        ["stages.keyframes", "stages.core.mask_table", "schemas.sample"])
    # progress: one series per pool, named after it, ending at the pool's sample count
    finals = {desc: total for desc, done, total in seen if done == total}
    assert finals == {"keyframes sft": 4, "keyframes eval": 2}
    # the union of two overlapping squares, and 0 where both are absent (the frame size is still known)
    pair = by_video["K/train/pair"]
    assert list(pair["video_union_areas"]) == [176.0, 176.0, 176.0, 0.0, 176.0, 176.0]
    # seeds: each sample's draws use derive_seed(seed, "keyframes", sample_id), as the docstring says
    for row in by_video.values():
        assert row["seed"] == derive_seed(7, "keyframes", row["sample_id"])
    # a rerun into the same folder gives the same bytes
    run_stage(stage_inputs, out)
    for pool, table in tables.items():
        assert pd.read_parquet(out / f"{pool}.parquet").equals(table)


def test_the_keyframe_is_drawn_among_the_top_k_frames(stage_inputs: Path, tmp_path: Path) -> None:
    run_stage(stage_inputs, tmp_path / "kf", runner=RunnerParams(kind="serial"))
    rows = pd.read_parquet(tmp_path / "kf" / "sft.parquet").set_index("video")
    grow = rows.loc["K/train/grow"]
    assert list(grow["topk_indices"]) == [9, 8, 7]  # areas (2 + t)², the three largest, largest first
    assert grow["keyframe_idx"] in (7, 8, 9)
    assert list(grow["video_union_areas"]) == [float((2 + t) ** 2) for t in range(10)]


def test_only_no_target_samples_have_no_geometry() -> None:
    empty = pd.DataFrame({c: pd.Series(dtype=float) for c in ("anno_id", "frame_idx", "area", "x1", "y1", "x2",
                                                                 "y2")})
    assert _geometry(empty) == {}


def rewrite(path: Path, frame: pd.DataFrame) -> None:
    frame.to_parquet(path, index=False)


@pytest.fixture
def inputs_copy(stage_inputs: Path, tmp_path: Path) -> Path:
    for name in ("root", "index", "sample"):
        shutil.copytree(stage_inputs / name, tmp_path / name)
    return tmp_path


def test_a_video_missing_from_the_videos_table_is_named(inputs_copy: Path) -> None:
    videos = pd.read_parquet(inputs_copy / "index" / "videos.parquet")
    rewrite(inputs_copy / "index" / "videos.parquet", videos[videos["video"] != "K/train/grow"])
    sample = pd.read_parquet(inputs_copy / "sample" / "sft.parquet")
    sid = sample.loc[sample["video"] == "K/train/grow", "sample_id"].iloc[0]
    with pytest.raises(ValueError, match=re.escape(
            f"sample {sid}: video K/train/grow is not in the videos table (stale index?)")):
        run_stage(inputs_copy, inputs_copy / "kf")


@pytest.mark.parametrize("drop", ["one", "all"])
def test_an_anno_id_with_missing_track_rows_is_named(inputs_copy: Path, drop: str) -> None:
    tracks = pd.read_parquet(inputs_copy / "index" / "tracks.parquet")
    gone = (tracks["anno_id"] == 31) & ((tracks["frame_idx"] == 4) if drop == "one" else True)
    rewrite(inputs_copy / "index" / "tracks.parquet", tracks[~gone])
    sample = pd.read_parquet(inputs_copy / "sample" / "sft.parquet")
    eid = sample.loc[sample["video"] == "K/train/grow", "expression_id"].iloc[0]
    have = 9 if drop == "one" else 0
    with pytest.raises(ValueError, match=re.escape(
            f"{eid}: anno_id 31 has {have} track rows, the video has 10 frames (tracks table out of date?)")):
        run_stage(inputs_copy, inputs_copy / "kf")


def test_an_anno_id_with_too_few_masks_is_named(inputs_copy: Path) -> None:
    index = inputs_copy / "index"
    table = pd.read_parquet(index / mask_table.FILE)
    writer = mask_table.MaskTableWriter(index / mask_table.FILE)
    for spec in specs():
        for anno, boxes in spec.objects.items():
            masks = [encode(rect_mask(b, spec.height, spec.width)) for b in boxes]
            writer.add(anno, masks[:-1] if anno == 31 else masks, spec.height, spec.width)
    writer.close()
    assert len(pd.read_parquet(index / mask_table.FILE)) == len(table) - 1
    sample = pd.read_parquet(inputs_copy / "sample" / "sft.parquet")
    eid = sample.loc[sample["video"] == "K/train/grow", "expression_id"].iloc[0]
    with pytest.raises(ValueError, match=re.escape(
            f"{eid}: anno_id 31 has 9 RLEs in {mask_table.FILE}, the video has 10 frames")):
        run_stage(inputs_copy, inputs_copy / "kf")


def test_anno_ids_missing_from_the_mask_table_are_named_ten_at_most(inputs_copy: Path) -> None:
    # eleven anno ids the mask table lacks: the message lists the ten smallest
    sample = pd.read_parquet(inputs_copy / "sample" / "eval.parquet")
    first = sample.index[sample["expression_id"] == "K/valid/short#0"][0]
    sample.at[first, "anno_ids"] = list(range(900, 911))
    rewrite(inputs_copy / "sample" / "eval.parquet", sample)
    path = inputs_copy / "index" / mask_table.FILE
    with pytest.raises(ValueError, match=re.escape(
            f"{path}: anno_ids {list(range(900, 910))} missing (re-run ingest?)")):
        run_stage(inputs_copy, inputs_copy / "kf")


def farthest_from_background(mask: np.ndarray) -> tuple[float, float]:
    """The docstring's rule by brute force: the mask pixel farthest (Euclidean) from every background pixel,
    the image border counting as background, first in row-major order on ties; pixel centres at +0.5."""
    padded = np.pad(mask, 1)
    background = np.argwhere(~padded)
    best, where = -1.0, None
    for y, x in np.argwhere(padded):  # row-major
        d = np.sqrt(((background - (y, x)) ** 2).sum(axis=1)).min()
        if d > best:
            best, where = d, (x - 1 + 0.5, y - 1 + 0.5)
    return where


def test_geometry_at_train_size_points_and_aks_frames(stage_inputs: Path, tmp_path: Path) -> None:
    run_stage(stage_inputs, tmp_path / "kf", runner=RunnerParams(kind="serial"))
    rows = pd.read_parquet(tmp_path / "kf" / "sft.parquet").set_index("video")
    H, W, S = 24, 32, 112  # VideoSpec's frame size, the train size
    pair = rows.loc["K/train/pair"]
    frames = list(pair["frame_indices"])
    assert frames == list(range(N))
    sx, sy = S / W, S / H
    scaled = {11: [2 * sx, 4 * sy, 12 * sx, 14 * sy], 12: [8 * sx, 8 * sy, 18 * sx, 18 * sy]}
    assert [list(map(list, b)) if t != 3 else list(b) for t, b in zip(frames, pair["boxes"], strict=True)] == [
        [scaled[11], scaled[12]] if t != 3 else [None, None] for t in frames]
    scale = S * S / (H * W)
    assert [list(a) for a in pair["areas"]] == [[100 * scale] * 2 if t != 3 else [0.0, 0.0] for t in frames]
    assert list(pair["union_areas"]) == [176 * scale if t != 3 else 0.0 for t in frames]
    key = int(pair["keyframe_idx"])
    assert key != 3 and list(pair["aks_invalid"]) == [3]
    expected = []
    for box in (LEFT[key], RIGHT[key]):
        mask = np.zeros((H, W), dtype=bool)
        mask[box[1]:box[3], box[0]:box[2]] = True
        cx, cy = farthest_from_background(mask)
        expected.append([cx * S / W, cy * S / H])
    assert [list(p) for p in pair["ktg_points"]] == expected
    # AKS: option A is the largest-area frame (the first of the top k); option B a zero-area frame
    grow = rows.loc["K/train/grow"]
    assert grow["aks_option"] == "A" and grow["aks_frame_idx"] == 9 and grow["aks_frame_name"] == "00018"
    assert list(grow["aks_areas"]) == [float(11 ** 2) * scale]
    options = {v: (rows.loc[v, "aks_option"], int(rows.loc[v, "aks_frame_idx"])) for v in ("K/train/pair",
                                                                                          "K/train/gap")}
    b_video = next(v for v, (option, _) in options.items() if option == "B")
    a_video = next(v for v, (option, _) in options.items() if option == "A")
    zero_frames = {"K/train/pair": [3], "K/train/gap": [0, 5]}
    assert options[b_video][1] in zero_frames[b_video]
    assert list(rows.loc[b_video, "aks_areas"]) == [0.0] * (2 if b_video == "K/train/pair" else 1)
    assert options[a_video][1] == list(rows.loc[a_video, "topk_indices"])[0]


# --- third part: the masks' exact JSON, a target absent from the keyframe, which samples AKS asks for B --------
# (survivors of the run on the simplified source: docs/testing.md)

from pycocotools import mask as coco_mask  # noqa: E402


def rle_json(mask: np.ndarray) -> str:
    """Oracle: the mask's COCO RLE (pycocotools itself) as the table stores it, keys sorted."""
    coded = coco_mask.encode(np.asfortranarray(mask.astype(np.uint8)))
    return json.dumps({"counts": coded["counts"].decode("ascii"), "size": [int(s) for s in coded["size"]]})


def test_union_masks_and_the_aks_mask_are_the_exact_rle_json(stage_inputs: Path, tmp_path: Path) -> None:
    run_stage(stage_inputs, tmp_path / "kf", runner=RunnerParams(kind="serial"))
    rows = pd.read_parquet(tmp_path / "kf" / "sft.parquet").set_index("video")
    H, W = 24, 32
    pair = rows.loc["K/train/pair"]
    assert list(pair["union_masks"]) == [rle_json(rect_mask(LEFT[t], H, W) | rect_mask(RIGHT[t], H, W))
                                         for t in pair["frame_indices"]]
    for video, boxes in (("K/train/pair", (LEFT, RIGHT)), ("K/train/gap", (GAP,))):
        t = int(rows.loc[video, "aks_frame_idx"])  # option A: the union there; option B: the empty mask
        union = np.zeros((H, W), bool)
        for track in boxes:
            union |= rect_mask(track[t], H, W)
        assert rows.loc[video, "aks_union_mask"] == rle_json(union)
        assert (rows.loc[video, "aks_option"] == "B") == (not union.any())


HALF = [(2, 2, 6 + 2 * t, 6 + 2 * t) for t in range(N)]  # grows: the keyframe is one of the last three
ONCE = [(20, 14, 30, 22) if t == 0 else None for t in range(N)]  # only in frame 0, far from HALF


def aks_specs() -> list[VideoSpec]:
    """One sample whose second target is absent from its keyframe, six whose target leaves one frame, and a
    no-target evaluation sample."""
    out = [VideoSpec("A/train/half", n_frames=N, objects={61: HALF, 62: ONCE}, expressions=[
        {"exp": "both", "obj_id": [0, 1], "anno_id": [61, 62], "type_id": 1}])]
    for i in range(6):
        track = [(2 + i, 2, 10 + i, 10) if t != i % N else None for t in range(N)]
        out.append(VideoSpec(f"A/train/z{i}", n_frames=N, objects={70 + i: track}, expressions=[
            {"exp": f"square {i}", "obj_id": [0], "anno_id": [70 + i], "type_id": 0}]))
    out.append(VideoSpec("A/valid/none", split="valid", n_frames=N, objects={}, expressions=[
        {"exp": "the purple cat", "obj_id": [], "anno_id": [], "type_id": 2}]))
    return out


@pytest.fixture(scope="module")
def aks_inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stage_inputs_of(tmp_path_factory.mktemp("kf-aks"), aks_specs())


@pytest.mark.parametrize("seed", [7, 8])
def test_a_target_absent_from_the_keyframe_has_no_point_and_b_goes_to_the_lower_hashes(
        aks_inputs: Path, tmp_path: Path, seed: int) -> None:
    run_stage(aks_inputs, tmp_path / "kf", seed=seed, runner=RunnerParams(kind="serial"))
    rows = pd.read_parquet(tmp_path / "kf" / "sft.parquet").set_index("video")
    quarantine = pd.read_parquet(tmp_path / "kf" / "quarantine.parquet")  # nothing set aside: still its columns
    assert quarantine.empty and quarantine.columns.tolist() == ["stage", "kind", "item", "file", "reason"]
    half = rows.loc["A/train/half"]
    key = int(half["keyframe_idx"])
    assert key >= N - 3  # drawn among the top 3 (the largest frames), where ONCE is absent
    S, H, W = 112, 24, 32
    cx, cy = farthest_from_background(rect_mask(HALF[key], H, W))
    assert half["ktg_points"][0].tolist() == [cx * S / W, cy * S / H] and half["ktg_points"][1] is None
    # no zero-area frame: option A, the largest frame, its boxes at train size (the absent target: None)
    x1, y1, x2, y2 = HALF[N - 1]
    assert (half["aks_option"], int(half["aks_frame_idx"])) == ("A", N - 1)
    assert half["aks_boxes"][0].tolist() == [x1 * S / W, y1 * S / H, x2 * S / W, y2 * S / H]
    assert half["aks_boxes"][1] is None
    # the six samples with both kinds of frame: the three lowest seeded hashes of their ids get option B
    both = rows.loc[[f"A/train/z{i}" for i in range(6)]]
    ranked = sorted(both.index, key=lambda v: derive_seed(seed, "keyframes", "aks", both.loc[v, "sample_id"]))
    assert sorted(both.index[both["aks_option"] == "B"]) == sorted(ranked[:3])
    assert [int(both.loc[v, "aks_frame_idx"]) for v in ranked[:3]] == [int(v[-1]) for v in ranked[:3]]


def test_a_no_target_sample_is_centred_on_the_middle_frame_with_empty_masks(aks_inputs: Path, tmp_path: Path) -> None:
    run_stage(aks_inputs, tmp_path / "kf", runner=RunnerParams(kind="serial"))
    row = pd.read_parquet(tmp_path / "kf" / "eval.parquet").set_index("video").loc["A/valid/none"]
    empty = rle_json(np.zeros((24, 32), bool))
    assert (int(row["keyframe_idx"]), row["aks_frame_name"]) == (N // 2, f"{2 * (N // 2):05d}")  # T // 2 = 3
    assert list(row["union_masks"]) == [empty] * N and row["aks_union_mask"] == empty
    assert list(row["union_areas"]) == [0.0] * N and list(row["video_union_areas"]) == [0.0] * N


def test_a_large_mask_is_searched_on_a_coarser_grid() -> None:
    from stages.keyframes.frames import inscribed_circle_centre

    # up to 96 px a side every pixel is searched: the exact centre (ties: the first in row-major order) …
    assert inscribed_circle_centre(np.ones((96, 96), bool)) == (47.5, 47.5)
    assert inscribed_circle_centre(np.ones((191, 191), bool)) == (95.5, 95.5)
    framed = np.zeros((200, 200), bool)
    framed[:191, :191] = True  # the grid follows the mask's bounding box, not the frame around it
    assert inscribed_circle_centre(framed) == (95.5, 95.5) and inscribed_circle_centre(framed.T) == (95.5, 95.5)
    # … from 192 px every 2nd: the best grid pixel (47, 47) is pixel 94, within the step of the exact 95.5
    assert inscribed_circle_centre(np.ones((192, 192), bool)) == (94.5, 94.5)


def test_the_default_runner_is_serial(stage_inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stages.core.runner as runner

    monkeypatch.setattr(runner, "_map_dask", lambda *a, **k: pytest.fail("no runner given, yet Dask was started"))
    report = run_stage(stage_inputs, tmp_path / "kf")  # several samples per pool: a parallel backend would start
    assert (report.metrics["sft"], report.metrics["eval"]) == (3, 2)


def test_a_missing_area_is_no_candidate() -> None:
    from stages.keyframes.frames import top_k_frames

    assert top_k_frames([4, None, 9, 0, 4], 3) == [2, 0, 4]  # largest first, ties to the earlier frame


def test_sample_frames_names_a_bad_size_or_anchor() -> None:
    with pytest.raises(ValueError) as none_wanted:
        sample_frames(5, 0, 1)
    assert str(none_wanted.value) == "need positive frame counts, got T=5, N=0"
    with pytest.raises(ValueError) as past_the_end:
        sample_frames(5, 3, 5)  # the first index past the video
    assert str(past_the_end.value) == "anchor 5 outside a 5-frame video"
    assert sample_frames(5, 3, 4) == [0, 2, 4]  # the last frame is inside


def test_odd_n_centres_the_anchor_when_the_grid_has_room() -> None:
    # the widest grid that fits has more points than N: the anchor is the middle one of the N taken
    assert sample_frames(4, 3, 1) == [0, 1, 2]  # stride 1 (stride ⌊3/2⌋ = 1); not [1, 2, 3]
    assert sample_frames(7, 3, 2) == [0, 2, 4]  # stride 2 on the even phase 0, 2, 4, 6
    assert sample_frames(6, 5, 2) == [0, 1, 2, 3, 4]
