"""ingest's mask table (data/index/masks.parquet): the RLEs of mask_dict.json, so that the file is parsed once
per pipeline. Oracles: the stdlib `json` module on the raw mask_dict.json, pyarrow reading the parquet
directly, and the scorer's own mask_dict.json path (VISA's way) on the same predictions."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from schemas.answer import parse_answer
from stages.core import mask_table, revos
from stages.core.runner import RunnerParams
from stages.evaluate import evaluate
from stages.evaluate.infer import Reply
from stages.evaluate.scorer import load_ground_truth, score_predictions
from stages.ingest import ingest
from stages.keyframes import select_keyframes
from stages.params.evaluate import EvaluateParams
from stages.params.ingest import IngestParams
from stages.params.keyframes import KeyframesParams
from stages.params.model import ModelParams
from stages.params.sam2 import Sam2Params
from stages.params.sample import SampleParams
from stages.sample import sample_pools
from tests.revos_factory import VideoSpec, edit_json, simple_video, write_root

SERIAL = RunnerParams(kind="serial")


def specs() -> list[VideoSpec]:
    """Train and valid videos; simple_video's second object has no mask (null) on frame 1."""
    return ([simple_video(f"S/train/t{i}", n_frames=5 + i) for i in range(3)]
            + [simple_video(f"S/valid/v{i}", split="valid", n_frames=4 + i) for i in range(3)])


def raw_mask_dict(root: Path) -> dict:
    return json.loads((root / revos.MASK_DICT).read_text())


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("masks")
    write_root(base / "root", specs())
    ingest(IngestParams(), base / "root", base / "index", SERIAL)
    return base


def test_table_holds_the_rles_of_mask_dict_exactly(ingested: Path) -> None:
    oracle = raw_mask_dict(ingested / "root")
    table = pq.read_table(ingested / "index" / "masks.parquet")
    assert table.schema.names == ["anno_id", "frame_idx", "height", "width", "counts"]
    assert [str(t) for t in table.schema.types] == ["int64", "int32", "int32", "int32", "string"]
    rows = table.to_pylist()
    tracks = pd.read_parquet(ingested / "index" / "tracks.parquet")
    # the same (anno_id, frame) rows as the tracks table: every anno_id an indexed expression uses
    assert sorted((r["anno_id"], r["frame_idx"]) for r in rows) == sorted(zip(tracks["anno_id"], tracks["frame_idx"],
                                                                              strict=True))
    assert len({r["anno_id"] for r in rows}) == 12
    nulls = 0
    for r in rows:
        expected = oracle[str(r["anno_id"])][r["frame_idx"]]
        if expected is None:
            nulls += 1
            assert r["counts"] is None
        else:
            assert r["counts"] == expected["counts"] and [r["height"], r["width"]] == expected["size"]
    assert nulls == 6  # one absent frame per video, kept as null (not as an empty RLE)
    wanted = {int(a) for a in oracle}
    assert mask_table.read_masks(ingested / "index" / "masks.parquet", wanted | {424242}) == {
        int(a): masks for a, masks in oracle.items()}
    assert [p.name for p in (ingested / "index").iterdir() if p.name.startswith(".")] == []  # no temporary left


def test_row_groups_stay_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mask_table, "ROW_GROUP_ROWS", 10)
    root = write_root(tmp_path / "root", specs())
    ingest(IngestParams(), root, tmp_path / "index", SERIAL)
    meta = pq.ParquetFile(tmp_path / "index" / "masks.parquet").metadata
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    # flushed after the anno_id that reaches 10 rows: at most 10 + (longest video - 1) rows per group
    assert len(sizes) >= 6 and max(sizes) <= 10 + 7 and sum(sizes) == 2 * sum(5 + i + 4 + i for i in range(3))
    oracle = raw_mask_dict(root)
    assert mask_table.read_masks(tmp_path / "index" / "masks.parquet", {int(a) for a in oracle}) == {
        int(a): m for a, m in oracle.items()}


def test_rejected_anno_ids_and_dropped_videos_are_not_in_the_table(tmp_path: Path) -> None:
    videos = specs()
    root = write_root(tmp_path / "root", videos)
    bad_size = next(iter(videos[0].objects))  # an RLE of the wrong size: its expressions are quarantined
    dropped = videos[4]  # its foreground disagrees with its masks: the video is dropped (after the masks pass)

    def wrong_size(masks: dict) -> None:
        masks[str(bad_size)][0]["size"] = [5, 5]

    def wrong_foreground(fg: dict) -> None:
        fg[dropped.key]["masks_rle"][0] = fg[dropped.key]["masks_rle"][2]
    edit_json(root / revos.MASK_DICT, wrong_size)
    edit_json(root / revos.FOREGROUND, wrong_foreground)
    # a key repeated in mask_dict.json (json.load would silently keep the last one)
    repeated = next(iter(videos[1].objects))
    text = (root / revos.MASK_DICT).read_text()
    entry = json.dumps(json.loads(text)[str(repeated)])
    (root / revos.MASK_DICT).write_text(text[:-1] + f', "{repeated}": {entry}}}')

    ingest(IngestParams(strict=False), root, tmp_path / "index", SERIAL)
    quarantine = pd.read_parquet(tmp_path / "index" / "quarantine.parquet")
    reasons = dict(zip(quarantine["item"], quarantine["reason"], strict=True))
    assert "RLE size [5, 5]" in reasons[str(bad_size)] and "repeated in mask_dict" in reasons[str(repeated)]
    assert dropped.key in reasons
    tracks = pd.read_parquet(tmp_path / "index" / "tracks.parquet")
    masks = pq.read_table(tmp_path / "index" / "masks.parquet").to_pandas()
    assert set(masks["anno_id"]) == set(tracks["anno_id"])
    # the broken anno_ids' expressions are dropped, so their videos' other object is no longer used either
    gone = {*videos[0].objects, *videos[1].objects, *dropped.objects}
    assert {bad_size, repeated} < gone and not gone & set(masks["anno_id"])
    assert len(set(masks["anno_id"])) == 12 - len(gone) == 6
    assert sorted(zip(masks["anno_id"], masks["frame_idx"], strict=True)) == sorted(
        zip(tracks["anno_id"], tracks["frame_idx"], strict=True))
    # the scorer on the table: an anno_id ingest rejected counts as missing, as one absent from mask_dict does
    gt = load_ground_truth(root, "train", None, tmp_path / "index" / "masks.parquet")
    (tmp_path / "pred").mkdir()
    _, table = score_predictions(tmp_path / "pred", root, "train", ground_truth=gt)
    status = dict(zip(table["expression_id"], table["status"], strict=True))
    assert status[f"{videos[0].key}#0"] == status[f"{videos[1].key}#1"] == "missing_anno"
    assert status[f"{videos[2].key}#0"] == "missing_video"


def fixed_policy(queries: list) -> list:
    """A deterministic answer per query (middle shown frame, a box depending on the expression id)."""
    out = []
    for q in queries:
        key, h = q.timestamps[len(q.timestamps) // 2], sum(map(ord, q.key)) % 9
        text = (f'<think>x</think><answer>{{"keyframe_timestamp": {key}, '
                f'"bbox_2d_list": [[{h}, {h + 4}, {h + 30}, {h + 24}]]}}</answer>')
        out.append(Reply(text, parse_answer(text), [key]))
    return out


def test_pipeline_parses_mask_dict_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ingest → sample → keyframes → evaluate: mask_dict.json is streamed once (by ingest); keyframes and
    evaluate run with the file gone, and evaluate's scores equal the scorer's on mask_dict.json itself."""
    root = write_root(tmp_path / "root", specs())
    parsed: list[str] = []
    original = revos.iter_json_object

    def spy(path: Path):
        parsed.append(Path(path).name)
        return original(path)
    monkeypatch.setattr(revos, "iter_json_object", spy)
    index = tmp_path / "index"
    ingest(IngestParams(), root, index, SERIAL)
    assert parsed.count(revos.MASK_DICT) == 1
    hidden = tmp_path / "hidden.json"
    (root / revos.MASK_DICT).rename(hidden)  # from here on nothing can read it

    sample_pools(SampleParams(sft_first_k=1, grpo_size=2), 0, index, tmp_path / "sample")
    select_keyframes(KeyframesParams(n_frames=3, train_size=56), 0, root, index, tmp_path / "sample",
                     tmp_path / "kf", SERIAL)
    (tmp_path / "model").mkdir()
    params = EvaluateParams(segmenter="box", n_frames=3, frame_size=56, model_path=str(tmp_path / "model"))
    report = evaluate(params, ModelParams(), Sam2Params(), 56, root, tmp_path / "kf" / "eval.parquet",
                      tmp_path / "out", tmp_path / "reports" / "eval.md", SERIAL, policy=fixed_policy, index_dir=index)
    assert parsed.count(revos.MASK_DICT) == 1
    ids = pd.read_parquet(tmp_path / "kf" / "eval.parquet")["expression_id"].tolist()
    with pytest.raises(revos.RevosFormatError, match="mask_dict.json: file missing"):
        load_ground_truth(root, "valid", ids)  # the raw-file path would have needed it

    hidden.rename(root / revos.MASK_DICT)
    scores = pd.read_parquet(tmp_path / "out" / "scores.parquet")
    summary, visa = score_predictions(tmp_path / "out" / "predictions", root, "valid", ids)  # streams mask_dict.json
    assert len(scores) == len(ids) == 9 and (scores["status"] == "ok").all()
    assert 0 < scores["J"].mean() < 1  # boxes that partly cover the targets: a real score, not 0 or 1
    pd.testing.assert_frame_equal(scores, visa.reset_index(drop=True), check_exact=True)
    for key in ("J_overall", "F_overall", "JF_overall", "R_visa_overall", "n_scored"):
        assert report.metrics[key] == summary[key]


def test_missing_or_foreign_table_is_one_clear_error(ingested: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"masks.parquet: mask table missing .*re-run ingest"):
        mask_table.read_masks(tmp_path / "masks.parquet", {1})
    pq.write_table(pa.table({"anno_id": [1], "frame": [0]}), tmp_path / "masks.parquet")
    with pytest.raises(ValueError, match=r"masks.parquet: not a mask table"):
        mask_table.read_masks(tmp_path / "masks.parquet", {1})
    rows = pq.read_table(ingested / "index" / "masks.parquet")
    pq.write_table(rows.take(list(range(rows.num_rows))[::-1]).cast(rows.schema), tmp_path / "masks.parquet")
    with pytest.raises(ValueError, match=r"anno_id \d+: frame \d+ where frame 0 was expected"):
        mask_table.read_masks(tmp_path / "masks.parquet", set(rows["anno_id"].to_pylist()))
    # keyframes on an index without the table: names the file, does not fall back to mask_dict.json
    index = tmp_path / "index"
    index.mkdir()
    for name in ("videos", "expressions", "tracks"):
        (index / f"{name}.parquet").write_bytes((ingested / "index" / f"{name}.parquet").read_bytes())
    sample_pools(SampleParams(sft_first_k=1, grpo_size=2), 0, index, tmp_path / "sample")
    with pytest.raises(ValueError, match=r"index/masks.parquet: mask table missing"):
        select_keyframes(KeyframesParams(), 0, ingested / "root", index, tmp_path / "sample", tmp_path / "kf", SERIAL)
