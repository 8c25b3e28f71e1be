"""ingest: index tables from a ReVOS-layout root; every bad-input case in strict and quarantine modes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pandera.errors
import pytest

from schemas.index import ExpressionsSchema, QuarantineSchema, TracksSchema, VideosSchema
from stages.core.params import IngestParams
from stages.core.runner import RunnerParams
from stages.ingest import IngestError, ingest
from tests.revos_factory import edit_json, simple_video, write_root

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


def _spec_anno(index: int) -> str:
    return str(sorted(simple_video(BAD).objects)[index])


def delete_frame(root: Path) -> None:
    (root / "JPEGImages" / BAD / "00002.jpg").unlink()


def garbage_frame(root: Path) -> None:
    (root / "JPEGImages" / BAD / "00002.jpg").write_bytes(b"not a jpeg at all")


def truncate_frame(root: Path) -> None:
    path = root / "JPEGImages" / BAD / "00002.jpg"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def short_mask_list(root: Path) -> None:
    edit_json(root / "mask_dict.json", lambda d: d[_spec_anno(0)].pop())


def wrong_rle_size(root: Path) -> None:
    edit_json(root / "mask_dict.json", lambda d: d[_spec_anno(0)][0].__setitem__("size", [99, 32]))


def missing_anno(root: Path) -> None:
    edit_json(root / "mask_dict.json", lambda d: d.pop(_spec_anno(0)))


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


def duplicate_video_key(root: Path) -> None:
    train = json.loads(_meta(root).read_text())
    edit_json(_meta(root, "valid"), lambda d: d["videos"].__setitem__(BAD, train["videos"][BAD]))


def duplicate_expression_id(root: Path) -> None:
    text = _meta(root).read_text()
    data = json.loads(text)
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


def malformed_meta(root: Path) -> None:
    _meta(root).write_text(_meta(root).read_text()[:-40])


def malformed_mask_dict(root: Path) -> None:
    path = root / "mask_dict.json"
    path.write_text(path.read_text()[:-10])


# (corruption, words the message must contain, quarantine kind, item, what survives in quarantine mode)
CASES: list[tuple[Callable[[Path], None], list[str], str, str]] = [
    (delete_frame, ["frame file missing", f"{BAD}/00002"], "frame", f"{BAD}/00002"),
    (garbage_frame, ["unreadable or truncated JPEG", f"{BAD}/00002"], "frame", f"{BAD}/00002"),
    (truncate_frame, ["truncated", f"{BAD}/00002"], "frame", f"{BAD}/00002"),
    (short_mask_list, ["3 masks for 4 frames", BAD], "anno", _spec_anno(0)),
    (wrong_rle_size, ["RLE size [99, 32]", "24x32"], "anno", _spec_anno(0)),
    (missing_anno, ["anno_id missing from mask_dict", BAD], "anno", _spec_anno(0)),
    (obj_anno_mismatch, ["obj_id has 2 entries but anno_id has 1", f"{BAD}#0"], "expression", f"{BAD}#0"),
    (bad_type_id, ["type_id must be 0, 1 or 2, got 5", f"{BAD}#0"], "expression", f"{BAD}#0"),
    (empty_text, ["empty expression text", f"{BAD}#0"], "expression", f"{BAD}#0"),
    (non_string_text, ["expression text must be a string", f"{BAD}#0"], "expression", f"{BAD}#0"),
    (duplicate_video_key, ["duplicate video key", BAD], "video", BAD),
    (duplicate_expression_id, ["duplicate key", "meta_expressions_train_.json"], "expression", "0"),
    (unsorted_frames, ["frame names not sorted", BAD], "video", BAD),
    (duplicate_frames, ["duplicate frame names", BAD], "video", BAD),
    (malformed_meta, ["malformed JSON", "meta_expressions_train_.json"], "file", "meta_expressions_train_.json"),
    (malformed_mask_dict, ["malformed JSON", "mask_dict.json"], "file", "mask_dict.json"),
]
IDS = [case[0].__name__ for case in CASES]


@pytest.mark.parametrize(("corrupt", "words", "kind", "item"), CASES, ids=IDS)
def test_strict_mode_names_the_problem(root: Path, tmp_path: Path, corrupt, words, kind, item) -> None:
    corrupt(root)
    with pytest.raises(IngestError) as info:
        run(root, tmp_path / "index", strict=True)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(("corrupt", "words", "kind", "item"), CASES, ids=IDS)
def test_quarantine_mode_keeps_the_rest(root: Path, tmp_path: Path, corrupt, words, kind, item) -> None:
    corrupt(root)
    videos, expressions, tracks, quarantine = run(root, tmp_path / "index", strict=False)
    hit = quarantine[(quarantine["kind"] == kind) & (quarantine["item"] == item)]
    assert len(hit) >= 1, quarantine
    assert any(words[0] in reason for reason in hit["reason"])
    # the other videos are untouched (a malformed train meta file loses the train split only)
    assert "SRC/valid/c" in set(videos["video"])
    if corrupt is malformed_mask_dict:  # no target can be trusted: only no-target expressions remain
        assert set(expressions["type"]) == {"no_target"} and tracks.empty
        return
    assert len(expressions[expressions["video"] == "SRC/valid/c"]) == 3
    if corrupt is not malformed_meta:
        assert "SRC/train/b" in set(videos["video"])
        assert len(expressions[expressions["video"] == "SRC/train/b"]) == 3
    # nothing that failed is indexed
    if kind in ("frame", "video") and corrupt is not duplicate_video_key:
        assert BAD not in set(videos["video"]) and BAD not in set(expressions["video"])
    if kind == "expression" and "#" in item:
        assert item not in set(expressions["expression_id"])
    if kind == "anno":
        assert int(item) not in set(tracks["anno_id"])
        assert not expressions["anno_ids"].map(lambda ids: int(item) in list(ids)).any()


def test_header_mode_reads_truncated_header_only(root: Path, tmp_path: Path) -> None:
    garbage_frame(root)
    _, _, _, quarantine = run(root, tmp_path / "index", strict=False, check_jpeg="header")
    assert (quarantine["kind"] == "frame").any()


def test_foreground_mismatch_is_caught(root: Path, tmp_path: Path) -> None:
    def blank(d: dict) -> None:
        d[BAD]["masks_rle"][0] = d[BAD]["masks_rle"][0] | {"counts": "PT0"}  # an all-empty 24x32 RLE

    edit_json(root / "mask_dict_foreground.json", blank)
    with pytest.raises(IngestError, match="foreground differs"):
        run(root, tmp_path / "index", strict=True)


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
