"""ingest: index tables from a ReVOS-layout root; every bad-input case in strict and quarantine modes."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pandera.errors
import pytest

from schemas.index import ExpressionsSchema, QuarantineSchema, TracksSchema, VideosSchema
from stages.core import rle
from stages.core.runner import RunnerParams
from stages.ingest import IngestError, ingest
from stages.params.ingest import IngestParams
from stages.params.synth import SynthParams, SynthScale
from stages.synth import generate_synthetic
from tests.revos_factory import VideoSpec, break_frame, edit_json, simple_video, truncate_file, write_root

BAD = "SRC/train/a"
SERIAL = RunnerParams(kind="serial")


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    return write_root(tmp_path / "root", [simple_video(BAD), simple_video("SRC/train/b"),
                                          simple_video("SRC/valid/c", split="valid", n_frames=5)])


def run(root: Path, out: Path, strict: bool, check_jpeg: str = "decode") -> tuple[pd.DataFrame, ...]:
    ingest(IngestParams(strict=strict, check_jpeg=check_jpeg), root, out, SERIAL)
    return tuple(pd.read_parquet(out / f"{t}.parquet") for t in ("videos", "expressions", "tracks", "quarantine"))


def test_clean_root_indexes_everything(root: Path, tmp_path: Path) -> None:
    videos, expressions, tracks, quarantine = run(root, tmp_path / "index", strict=True)
    assert list(videos["video"]) == ["SRC/train/a", "SRC/train/b", "SRC/valid/c"]
    assert list(videos["split"]) == ["train", "train", "valid"]
    assert list(videos.loc[0, "frames"]) == ["00000", "00002", "00004", "00006"]
    assert len(expressions) == 9 and set(expressions["type"]) == {"referring", "reasoning", "no_target"}
    assert expressions.loc[expressions["expression_id"] == f"{BAD}#1", "n_instances"].item() == 2
    assert quarantine.empty
    spec = simple_video(BAD)
    anno_a, anno_b = sorted(spec.objects)
    rows = tracks[tracks["anno_id"] == anno_a].sort_values("frame_idx")
    # rectangles (2+i, 2, 10+i, 8): area 48, exclusive-edge boxes
    assert list(rows["area"]) == [48] * 4
    assert rows[["x1", "y1", "x2", "y2"]].iloc[1].tolist() == [3.0, 2.0, 11.0, 8.0]
    absent = tracks[(tracks["anno_id"] == anno_b) & (tracks["frame_idx"] == 1)]
    assert absent["area"].item() == 0 and absent[["x1", "x2"]].isna().all(axis=None)
    lineage = json.loads((tmp_path / "index" / "lineage.json").read_text())
    assert lineage["counts"]["videos"] == 3 and "mask_dict.json" in lineage["inputs"]


def test_report_counts_strata_and_reasons(root: Path, tmp_path: Path) -> None:
    bad_type_id(root)
    foreground_mismatch(root)  # drops BAD altogether
    edit_json(_meta(root), lambda d: d["videos"]["SRC/train/b"]["expressions"]["1"].__setitem__("exp", ""))
    report = ingest(IngestParams(strict=False), root, tmp_path / "index", SERIAL)
    assert report.metrics == {
        "expressions": 5, "quarantined": 3, "quarantined.expression": 2, "quarantined.video": 1, "tracks": 14,
        "train.no_target.none": 1, "train.referring.single": 1,
        "valid.no_target.none": 1, "valid.reasoning.multi": 1, "valid.referring.single": 1,
        "videos": 2, "videos_foreground_unchecked": 0,
    }
    reasons = report.tables["quarantine reasons"]
    assert sorted(reasons["kind"]) == ["expression", "expression", "video"] and reasons["items"].sum() == 3
    assert report.tables["expressions per stratum"]["expressions"].sum() == 5


def test_deterministic(root: Path, tmp_path: Path) -> None:
    first = run(root, tmp_path / "one", strict=True)
    second = run(root, tmp_path / "two", strict=True)
    for a, b in zip(first, second, strict=True):
        pd.testing.assert_frame_equal(a, b)
    for table in ("videos", "expressions", "tracks"):
        name = f"{table}.parquet"
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()


def _meta(root: Path, split: str = "train") -> Path:
    return root / f"meta_expressions_{split}_.json"


def _spec_anno(index: int, key: str = BAD) -> str:
    return str(sorted(simple_video(key).objects)[index])


def delete_frame(root: Path) -> None:
    break_frame(root, BAD, "00002", "missing")


def garbage_frame(root: Path) -> None:
    break_frame(root, BAD, "00002", "garbage")


def truncate_frame(root: Path) -> None:
    break_frame(root, BAD, "00002", "truncate")


def resized_frame(root: Path) -> None:
    break_frame(root, BAD, "00002", "resize")


def short_mask_list(root: Path) -> None:
    edit_json(root / "mask_dict.json", lambda d: d[_spec_anno(0)].pop())


def wrong_rle_size(root: Path) -> None:
    edit_json(root / "mask_dict.json", lambda d: d[_spec_anno(0)][0].__setitem__("size", [99, 32]))


def numeric_rle_counts(root: Path) -> None:
    edit_json(root / "mask_dict.json", lambda d: d[_spec_anno(0)][2].__setitem__("counts", 12))


def missing_anno(root: Path) -> None:
    edit_json(root / "mask_dict.json", lambda d: d.pop(_spec_anno(0)))


def anno_in_two_videos(root: Path) -> None:
    other = "SRC/train/b"
    anno = int(_spec_anno(0))
    edit_json(_meta(root), lambda d: d["videos"][other]["expressions"]["0"].__setitem__("anno_id", [anno]))


def _expr(root: Path, key: str, value: object, exp_id: str = "0") -> None:
    edit_json(_meta(root), lambda d: d["videos"][BAD]["expressions"][exp_id].__setitem__(key, value))


def obj_anno_mismatch(root: Path) -> None:
    _expr(root, "obj_id", [0, 1])


def bad_type_id(root: Path) -> None:
    _expr(root, "type_id", 5)


def empty_text(root: Path) -> None:
    _expr(root, "exp", "   ")


def non_string_text(root: Path) -> None:
    _expr(root, "exp", 42)


def expression_not_object(root: Path) -> None:
    edit_json(_meta(root), lambda d: d["videos"][BAD]["expressions"].__setitem__("0", "the left box"))


def duplicate_video_key(root: Path) -> None:
    train = json.loads(_meta(root).read_text())
    edit_json(_meta(root, "valid"), lambda d: d["videos"].__setitem__(BAD, train["videos"][BAD]))


def duplicate_expression_id(root: Path) -> None:
    """The same expression id twice in one JSON object (legal JSON that json.load would collapse)."""
    data = json.loads(_meta(root).read_text())
    entries = data["videos"][BAD]["expressions"]
    pairs = ", ".join(f'"0": {json.dumps(e)}' for e in entries.values())  # every expression under id "0"
    marker = json.dumps(entries)
    compact = json.dumps(data)
    assert marker in compact
    _meta(root).write_text(compact.replace(marker, "{" + pairs + "}"))


def unsorted_frames(root: Path) -> None:
    edit_json(_meta(root), lambda d: d["videos"][BAD]["frames"].reverse())


def duplicate_frames(root: Path) -> None:
    def edit(d: dict) -> None:
        frames = d["videos"][BAD]["frames"]
        frames[1] = frames[0]

    edit_json(_meta(root), edit)


def zero_height(root: Path) -> None:
    edit_json(_meta(root), lambda d: d["videos"][BAD].__setitem__("height", 0))


def malformed_meta(root: Path) -> None:
    truncate_file(_meta(root), 40)


def malformed_valid_meta(root: Path) -> None:
    truncate_file(_meta(root, "valid"), 3)


def missing_valid_meta(root: Path) -> None:
    _meta(root, "valid").unlink()


def malformed_mask_dict(root: Path) -> None:
    truncate_file(root / "mask_dict.json", 10)


def malformed_foreground(root: Path) -> None:
    truncate_file(root / "mask_dict_foreground.json", 10)


def foreground_mismatch(root: Path) -> None:
    def blank(d: dict) -> None:
        d[BAD]["masks_rle"][0] = d[BAD]["masks_rle"][0] | {"counts": "PT0"}  # an all-empty 24x32 RLE

    edit_json(root / "mask_dict_foreground.json", blank)


def foreground_short(root: Path) -> None:
    edit_json(root / "mask_dict_foreground.json", lambda d: d[BAD]["masks_rle"].pop())


def foreground_wrong_size(root: Path) -> None:
    edit_json(root / "mask_dict_foreground.json", lambda d: d[BAD]["masks_rle"][1].__setitem__("size", [12, 32]))


ALL = {BAD, "SRC/train/b", "SRC/valid/c"}
OTHERS = ALL - {BAD}
A0, A1 = _spec_anno(0), _spec_anno(1)


@dataclass(frozen=True)
class Case:
    """A corruption; words the strict error must contain; the quarantine row it gives; the videos and the
    number of expressions that survive in quarantine mode."""

    corrupt: Callable[[Path], None]
    words: list[str]
    kind: str
    item: str
    videos: set[str]
    n_expressions: int


CASES = [
    Case(delete_frame, ["frame file missing", f"{BAD}/00002"], "frame", f"{BAD}/00002", OTHERS, 6),
    Case(garbage_frame, ["unreadable or truncated JPEG", f"{BAD}/00002"], "frame", f"{BAD}/00002", OTHERS, 6),
    Case(truncate_frame, ["truncated", f"{BAD}/00002"], "frame", f"{BAD}/00002", OTHERS, 6),
    Case(resized_frame, ["JPEG is 16x12 but the video is 32x24", f"{BAD}/00002"], "frame", f"{BAD}/00002",
         OTHERS, 6),
    # anno 0 of BAD is used by expressions 0 and 1: both go, the no-target expression stays
    Case(short_mask_list, ["3 masks for 4 frames", BAD, "mask_dict.json"], "anno", A0, ALL, 7),
    Case(wrong_rle_size, ["frame 00000: RLE size [99, 32]", "24x32", BAD], "anno", A0, ALL, 7),
    Case(numeric_rle_counts, ["frame 00004: RLE counts", BAD], "anno", A0, ALL, 7),
    Case(missing_anno, ["anno_id missing from mask_dict", BAD], "anno", A0, ALL, 7),
    Case(anno_in_two_videos, ["anno_id used by two videos", BAD, "SRC/train/b"], "anno", A0, ALL, 6),
    Case(obj_anno_mismatch, ["obj_id has 2 entries but anno_id has 1", f"{BAD}#0"], "expression", f"{BAD}#0",
         ALL, 8),
    Case(bad_type_id, ["type_id must be 0, 1 or 2, got 5", f"{BAD}#0"], "expression", f"{BAD}#0", ALL, 8),
    Case(empty_text, ["empty expression text", f"{BAD}#0"], "expression", f"{BAD}#0", ALL, 8),
    Case(non_string_text, ["expression text must be a string", f"{BAD}#0"], "expression", f"{BAD}#0", ALL, 8),
    Case(expression_not_object, ["not an object", f"{BAD}#0"], "expression", f"{BAD}#0", ALL, 8),
    Case(duplicate_video_key, ["duplicate video key", BAD, "meta_expressions_valid_.json"], "video", BAD,
         OTHERS, 6),
    # all three expressions of BAD are written under id "0": that id is ambiguous, the video has none left
    Case(duplicate_expression_id, ["duplicate expression id", f"{BAD}#0", "meta_expressions_train_.json"],
         "expression", f"{BAD}#0", ALL, 6),
    Case(unsorted_frames, ["frame names not sorted", BAD], "video", BAD, OTHERS, 6),
    Case(duplicate_frames, ["duplicate frame names", BAD], "video", BAD, OTHERS, 6),
    Case(zero_height, ["height must be a positive integer", BAD], "video", BAD, OTHERS, 6),
    Case(malformed_meta, ["malformed JSON", "meta_expressions_train_.json"], "file", "meta_expressions_train_.json",
         {"SRC/valid/c"}, 3),
    Case(malformed_valid_meta, ["malformed JSON", "meta_expressions_valid_.json"], "file",
         "meta_expressions_valid_.json", {BAD, "SRC/train/b"}, 6),
    Case(missing_valid_meta, ["file missing", "meta_expressions_valid_.json"], "file",
         "meta_expressions_valid_.json", {BAD, "SRC/train/b"}, 6),
    # no target can be trusted: only no-target expressions remain
    Case(malformed_mask_dict, ["malformed JSON", "mask_dict.json"], "file", "mask_dict.json", ALL, 3),
    # the foreground cannot be checked, the index itself is sound
    Case(malformed_foreground, ["malformed JSON", "mask_dict_foreground.json"], "file",
         "mask_dict_foreground.json", ALL, 9),
    Case(foreground_mismatch, ["frame 00000: foreground differs", BAD, "mask_dict_foreground.json"], "video", BAD,
         OTHERS, 6),
    Case(foreground_short, ["3 masks for 4 frames", BAD, "mask_dict_foreground.json"], "video", BAD, OTHERS, 6),
    Case(foreground_wrong_size, ["frame 00002: foreground RLE size [12, 32]", BAD], "video", BAD, OTHERS, 6),
]
IDS = [case.corrupt.__name__ for case in CASES]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_strict_mode_names_the_problem(root: Path, tmp_path: Path, case: Case) -> None:
    case.corrupt(root)
    with pytest.raises(IngestError) as info:
        run(root, tmp_path / "index", strict=True)
    for word in case.words:
        assert word in str(info.value)
    assert not (tmp_path / "index" / "videos.parquet").exists()


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_quarantine_mode_keeps_the_rest(root: Path, tmp_path: Path, case: Case) -> None:
    case.corrupt(root)
    videos, expressions, tracks, quarantine = run(root, tmp_path / "index", strict=False)
    hit = quarantine[(quarantine["kind"] == case.kind) & (quarantine["item"] == case.item)]
    assert len(hit) == 1, quarantine
    assert case.words[0] in hit["reason"].item()
    assert not Path(hit["file"].item()).is_absolute() and (root / hit["file"].item()).parent.exists()
    assert set(videos["video"]) == case.videos
    assert len(expressions) == case.n_expressions
    assert set(expressions["video"]) <= case.videos
    # the videos nothing happened to keep all their expressions and tracks
    for key in case.videos - {BAD, "SRC/train/b" if case.corrupt is anno_in_two_videos else ""}:
        if case.corrupt is not malformed_mask_dict:
            assert len(expressions[expressions["video"] == key]) == 3
            assert set(tracks.loc[tracks["video"] == key, "anno_id"]) == {int(a) for a in simple_video(key).objects}
    # nothing that failed is indexed
    if case.kind == "expression":
        assert case.item not in set(expressions["expression_id"])
    if case.kind == "anno":
        assert int(case.item) not in set(tracks["anno_id"])
        assert not expressions["anno_ids"].map(lambda ids: int(case.item) in list(ids)).any()
    # every track row belongs to an indexed expression's target
    used = {a for ids in expressions["anno_ids"] for a in ids}
    assert set(tracks["anno_id"]) == used
    metrics = json.loads((tmp_path / "index" / "lineage.json").read_text())["counts"]
    assert metrics["quarantined"] == len(quarantine)


def test_bad_video_drops_its_expressions_only(root: Path, tmp_path: Path) -> None:
    """Several problems at once in quarantine mode: each is reported once, the clean video is untouched."""
    bad_type_id(root)
    edit_json(_meta(root, "valid"), lambda d: d["videos"]["SRC/valid/c"]["frames"].reverse())
    _, expressions, _, quarantine = run(root, tmp_path / "index", strict=False)
    assert sorted(quarantine["item"]) == [f"{BAD}#0", "SRC/valid/c"]
    assert sorted(expressions["expression_id"]) == [f"{BAD}#1", f"{BAD}#2"] + [f"SRC/train/b#{i}" for i in range(3)]


def test_unused_anno_ids_are_ignored(root: Path, tmp_path: Path) -> None:
    """ReVOS shares one mask_dict between splits: anno_ids nobody uses are skipped, even malformed ones."""
    edit_json(root / "mask_dict.json", lambda d: d.update({"999999": "not even a list", "x": []}))
    _, _, tracks, quarantine = run(root, tmp_path / "index", strict=True)
    assert quarantine.empty and 999999 not in set(tracks["anno_id"])


def test_foreground_tolerance(root: Path, tmp_path: Path) -> None:
    """A one-pixel foreground difference passes once the tolerance allows it (24×32 frame: 1/768)."""
    def one_pixel_more(d: dict) -> None:
        mask = rle.decode(d[BAD]["masks_rle"][0], 24, 32)
        mask[0, 0] = True
        d[BAD]["masks_rle"][0] = rle.encode(mask)

    edit_json(root / "mask_dict_foreground.json", one_pixel_more)
    with pytest.raises(IngestError, match="differs from the union of the expressions' masks in 1 pixels"):
        run(root, tmp_path / "strict", strict=True)
    ingest(IngestParams(strict=True, foreground_tolerance=1 / 768), root, tmp_path / "tolerant", SERIAL)
    assert len(pd.read_parquet(tmp_path / "tolerant" / "videos.parquet")) == 3


def test_header_mode_reads_truncated_header_only(root: Path, tmp_path: Path) -> None:
    garbage_frame(root)
    _, _, _, quarantine = run(root, tmp_path / "index", strict=False, check_jpeg="header")
    assert (quarantine["kind"] == "frame").any()


VALID_ROWS = {
    VideosSchema: {"video": "S/train/a", "vid_id": "a", "split": "train", "height": 4, "width": 5, "n_frames": 2,
                   "frames": ["00000", "00003"]},
    ExpressionsSchema: {"expression_id": "S/train/a#0", "video": "S/train/a", "exp_id": "0", "split": "train",
                        "text": "the box", "type": "referring", "type_id": 0, "obj_ids": [0], "anno_ids": [3],
                        "n_instances": 1},
    TracksSchema: {"anno_id": 3, "video": "S/train/a", "frame_idx": 0, "frame": "00000", "area": 4,
                   "x1": 0.0, "y1": 0.0, "x2": 2.0, "y2": 2.0},
    QuarantineSchema: {"stage": "ingest", "kind": "video", "item": "S/train/a", "file": "m.json", "reason": "bad"},
}
SCHEMA_VIOLATIONS = [
    (VideosSchema, {"split": "test"}),
    (VideosSchema, {"height": 0}),
    (VideosSchema, {"frames": ["00003", "00000"]}),
    (VideosSchema, {"n_frames": 3}),
    (ExpressionsSchema, {"type": "other"}),
    (ExpressionsSchema, {"type_id": 3}),
    (ExpressionsSchema, {"text": ""}),
    (ExpressionsSchema, {"n_instances": 2}),
    (ExpressionsSchema, {"type": "no_target", "type_id": 2}),
    (ExpressionsSchema, {"anno_ids": ["x"]}),
    (TracksSchema, {"area": -1}),
    (TracksSchema, {"area": 0}),  # a box without area
    (TracksSchema, {"x2": 0.0}),  # x2 must exceed x1
    (QuarantineSchema, {"kind": "planet"}),
    (QuarantineSchema, {"reason": ""}),
]


@pytest.mark.parametrize(("schema", "change"), SCHEMA_VIOLATIONS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_schema_rules(schema, change: dict) -> None:
    good = pd.DataFrame([VALID_ROWS[schema]])
    schema.validate(good, lazy=True)
    with pytest.raises(pandera.errors.SchemaErrors):
        schema.validate(pd.DataFrame([VALID_ROWS[schema] | change]), lazy=True)


def test_schema_rejects_unknown_columns_and_duplicates() -> None:
    row = VALID_ROWS[TracksSchema]
    with pytest.raises(pandera.errors.SchemaErrors):
        TracksSchema.validate(pd.DataFrame([row | {"extra": 1}]), lazy=True)
    with pytest.raises(pandera.errors.SchemaErrors):
        TracksSchema.validate(pd.DataFrame([row, row]), lazy=True)
    with pytest.raises(pandera.errors.SchemaErrors):
        VideosSchema.validate(pd.DataFrame([VALID_ROWS[VideosSchema]] * 2), lazy=True)


def test_absent_box_is_nan(root: Path, tmp_path: Path) -> None:
    _, _, tracks, _ = run(root, tmp_path / "index", strict=True)
    empty = tracks[tracks["area"] == 0]
    assert len(empty) and np.isnan(empty[["x1", "y1", "x2", "y2"]].to_numpy()).all()


def _expected_tracks(root: Path) -> dict[tuple[int, int], tuple[int, list[float]]]:
    """(anno_id, frame_idx) → (area, box) by decoding every mask with numpy: the slow, obvious way."""
    masks = json.loads((root / "mask_dict.json").read_text())
    meta = {}
    for split in ("train", "valid"):
        meta |= json.loads(_meta(root, split).read_text())["videos"]
    expected = {}
    for entry in meta.values():
        for e in entry["expressions"].values():
            for anno in e["anno_id"]:
                for t, m in enumerate(masks[str(anno)]):
                    mask = rle.decode(m, entry["height"], entry["width"])
                    ys, xs = np.nonzero(mask)
                    box = ([float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)]
                           if ys.size else [np.nan] * 4)
                    expected[(anno, t)] = (int(ys.size), box)
    return expected


def _check_round_trip(root: Path, out: Path) -> None:
    videos, expressions, tracks, quarantine = run(root, out, strict=True)
    assert quarantine.empty
    meta = {}
    for split in ("train", "valid"):
        for key, entry in json.loads(_meta(root, split).read_text())["videos"].items():
            meta[key] = (split, entry)
    assert sorted(videos["video"]) == sorted(meta)
    for row in videos.itertuples():
        split, entry = meta[row.video]
        assert (row.split, row.height, row.width, list(row.frames)) == (
            split, entry["height"], entry["width"], entry["frames"])
    assert len(expressions) == sum(len(entry["expressions"]) for _, entry in meta.values())
    for row in expressions.itertuples():
        source = meta[row.video][1]["expressions"][row.exp_id]
        assert (row.text, row.type_id, list(row.anno_ids), list(row.obj_ids)) == (
            source["exp"], source["type_id"], source["anno_id"], source["obj_id"])
    expected = _expected_tracks(root)
    assert len(tracks) == len(expected)
    for row in tracks.itertuples():
        area, box = expected[(row.anno_id, row.frame_idx)]
        assert row.area == area
        np.testing.assert_array_equal([row.x1, row.y1, row.x2, row.y2], box)
    report = json.loads((out / "lineage.json").read_text())
    assert set(report["inputs"]) == {"JPEGImages", "meta_expressions_train_.json", "meta_expressions_valid_.json",
                                     "mask_dict.json", "mask_dict_foreground.json"}


def test_real_layout_round_trip(tmp_path: Path) -> None:
    """ReVOS-like details: nested keys, frame-number gaps, objects that leave and come back, 3 targets,
    and anno_ids in the shared mask_dict that no expression uses."""
    moving = [(i, 1 + i, 6 + i, 9 + i) if i % 4 != 2 else None for i in range(7)]
    spec = VideoSpec(
        "UVO/all/-fbscFfkh4M", split="valid", height=20, width=30, frames=["00000", "00005", "00145", "00150",
                                                                          "00165", "00170", "00200"],
        objects={11: moving, 12: [(20, 2, 29, 19)] * 7, 13: [None] * 6 + [(0, 0, 30, 20)], 14: [(5, 5, 6, 6)] * 7},
        expressions=[{"exp": "the object that disappears twice", "obj_id": [0], "anno_id": [11], "type_id": 1},
                     {"exp": "everything", "obj_id": [0, 1, 2], "anno_id": [11, 12, 13], "type_id": 0},
                     {"exp": "a dog", "obj_id": [], "anno_id": [], "type_id": 2}],
    )
    root = write_root(tmp_path / "root", [spec, simple_video("MOSE/train/x"), simple_video("TAO/train/y", n_frames=6)])
    _check_round_trip(root, tmp_path / "index")
    tracks = pd.read_parquet(tmp_path / "index" / "tracks.parquet")
    assert 14 not in set(tracks["anno_id"])  # in mask_dict, used by nobody
    full = tracks[(tracks["anno_id"] == 13) & (tracks["frame"] == "00200")]
    assert full[["area", "x1", "y1", "x2", "y2"]].iloc[0].tolist() == [600, 0.0, 0.0, 30.0, 20.0]


def test_synthetic_round_trip(tmp_path: Path) -> None:
    """The synth stage's output (the pipeline's default input) indexes cleanly and exactly."""
    scale = SynthScale(n_videos_train=3, n_videos_valid=2, min_frames=6, max_frames=8, height=48, width=64)
    root = tmp_path / "synth"
    generate_synthetic(SynthParams(seed=5, default=scale), root)
    _check_round_trip(root, tmp_path / "index")
