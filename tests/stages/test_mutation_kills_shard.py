"""The shard stage pinned for the mutation run (scripts/mutation.sh shard, docs/testing.md), on hand-made upstream
tables: which traces and samples become records under which keys, each record's frames (at its task's view) and
meta, descriptions, difficulty, sources, the manifest, tars per shard, metrics, tables, lineage and both exports."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import webdataset as wds
from PIL import Image

import schemas.answer
import stages.shard as shard_module
from schemas.cot import AcceptedSchema, DifficultySchema
from schemas.sample import KeyframesSchema
from stages.core import rle
from stages.core.io import write_table
from stages.core.progress import add_listener, remove_listener
from stages.core.runner import RunnerParams
from stages.params.shard import ShardParams
from stages.shard import export_sharegpt, export_verl, ground_truth, user_text, write_shards
from stages.tasks import get_task
from stages.tasks.views import task_ground_truth
from tests.stages.test_shard import reference_jpeg

SIDE = 16  # original frames: 16 × 16
TRAIN, KEY = 8, 12  # train size and keyframe size
FRAMES = ["00000", "00002", "00004"]
QUALITY = 90
TEACHER = "template-teacher-v1"


def _frames(root: Path, video: str, shade: int) -> None:
    folder = root / "JPEGImages" / video
    folder.mkdir(parents=True)
    for i, name in enumerate(FRAMES):
        pixels = np.zeros((SIDE, SIDE, 3), dtype=np.uint8)
        pixels[:, : 4 + 4 * i] = (shade, 40 * i, 255 - shade)
        Image.fromarray(pixels).save(folder / f"{name}.jpg", quality=95)


def _mask(x1: int, y1: int, x2: int, y2: int) -> str:
    mask = np.zeros((SIDE, SIDE), dtype=bool)
    mask[y1:y2, x1:x2] = True
    return json.dumps(rle.encode(mask))


def keyframes_row(sample_id: str, pool: str, video: str, tasks: list[str], keyframe_pos: int = 2) -> dict:
    """Sampled frames 0, 2, 4 (timestamps the same); one object, absent from the first frame."""
    timestamps = [0, 2, 4]
    return {
        "sample_id": sample_id, "pool": pool, "expression_id": f"e-{sample_id}", "video": video, "exp_id": "0",
        "split": "train", "text": "the red square", "type": "referring", "n_instances": 1, "anno_ids": [1],
        "stratum": "referring/1", "motion": 0.1, "level": None, "tasks": tasks,
        "height": SIDE, "width": SIDE, "n_video_frames": 6, "frame_indices": [0, 2, 4], "frame_names": FRAMES,
        "timestamps": timestamps, "keyframe_pos": keyframe_pos, "keyframe_idx": timestamps[keyframe_pos],
        "keyframe_timestamp": timestamps[keyframe_pos], "keyframe_mode": "max_area",
        "frame_spread": "anchor", "topk_indices": [2, 4],
        "boxes": [[None], [[1.0, 1.0, 3.0, 3.0]], [[4.0, 1.0, 7.0, 3.0]]],
        "areas": [[0.0], [4.0], [6.0]], "union_areas": [0.0, 4.0, 6.0],
        "union_masks": [_mask(0, 0, 0, 0), _mask(2, 2, 6, 6), _mask(8, 2, 14, 6)],
        "ktg_points": [[5.0, 2.0]], "aks_valid": [4], "aks_invalid": [0], "aks_option": "A",
        "aks_frame_idx": 4, "aks_frame_name": "00004", "aks_boxes": [[4.0, 1.0, 7.0, 3.0]], "aks_areas": [6.0],
        "aks_union_mask": _mask(8, 2, 14, 6), "keyframe_size": KEY,
        "video_union_areas": [0.0, 0.0, 16.0, 0.0, 24.0, 0.0],
        "train_size": TRAIN, "seed": 0,
    }


def trace(sample_id: str, index: int, task: str, text: str, pool: str = "sft") -> dict:
    return {"request_key": hashlib.sha256(f"{sample_id}/{index}".encode()).hexdigest(), "sample_id": sample_id,
            "pool": pool, "trace_index": index, "task": task, "template_set": "veason", "template_id": f"tpl-{index}",
            "teacher": TEACHER, "backend": "template", "keyframe_timestamp": 4, "text": text, "finish_reason": "stop",
            "prompt_tokens": 1, "completion_tokens": 1, "reasoning_tokens": 0, "latency_s": 0.1, "attempts": 1,
            "error": "", "response": f"<think>{task} {index}</think><answer>{{}}</answer>"}


DESCRIPTION = "A red square moves to the right."
ROWS = {
    "sft": [keyframes_row("vidA__0", "sft", "vidA", ["veason"])],
    # one sample with two tasks: one record per task; a KTG task needs the sample's VDG description
    # stored out of sample-id order: the stage sorts
    "grpo": [keyframes_row("vidA__2", "grpo", "vidA", ["veason", "rcot_ktg"]),
             keyframes_row("src1_vidB__0", "grpo", "src1/vidB", ["veason"])],
    # the same sample id as in sft with another keyframe: each pool's record carries its own ground truth
    "eval": [keyframes_row("vidA__0", "eval", "vidA", ["veason"], keyframe_pos=1),
             # an AKS sample without an accepted VDG description: its question has no description line
             keyframes_row("vidA__5", "eval", "vidA", ["rcot_aks"])],
}
TRACES = [  # stored out of order: the stage sorts by (sample_id, trace_index)
    trace("vidA__0", 3, "rcot_ktg", "Step 1: ktg"),
    trace("vidA__0", 0, "veason", "Step 1: first"),
    trace("vidA__0", 2, "rcot_vdg", f"  {DESCRIPTION}\n"),
    trace("vidA__0", 4, "rcot_vdg", "A later description."),  # not the one given: the first accepted is
    trace("vidA__0", 1, "veason", "Step 1: second"),
    trace("vidA__2", 0, "rcot_vdg", "The square in grpo.", pool="grpo"),  # no sft record; its description counts
    trace("src1_vidB__0", 0, "veason", "Step 1: grpo", pool="grpo"),  # not an sft sample, sorted first: skipped
]


def difficulty_row(sample_id: str, pool: str) -> dict:
    return {"sample_id": sample_id, "pool": pool, "expression_id": f"e-{sample_id}", "scene_complexity": 2,
            "segmentation_challenge": 3, "temporal_ambiguity": 4, "motion_complexity": 5, "linguistic_ambiguity": 6,
            "difficulty": 4.0, "level": "medium", "token_budget": 320, "backend": "heuristic"}


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("shard_kills")
    _frames(base / "root", "vidA", 250)
    _frames(base / "root", "src1/vidB", 60)
    for pool, rows in ROWS.items():
        write_table(pd.DataFrame(rows), KeyframesSchema, base / "keyframes" / f"{pool}.parquet")
    write_table(pd.DataFrame(TRACES), AcceptedSchema, base / "filter" / "accepted.parquet")
    write_table(pd.DataFrame([difficulty_row("vidA__0", "sft"), difficulty_row("vidA__2", "grpo")]),
                DifficultySchema, base / "difficulty" / "scores.parquet")
    return base


def run(base: Path, out: Path, params: ShardParams, runner: RunnerParams | None = None):
    return write_shards(params, base / "root", base / "keyframes", base / "filter", base / "difficulty", out,
                        runner, sources=("src1",))




def pool_records(folder: Path) -> list[dict]:
    urls = sorted(str(p) for p in folder.glob("shard-*.tar"))
    return list(wds.WebDataset(urls, shardshuffle=False, empty_check=False)) if urls else []


def expected_meta(pool: str, row: dict, task: str, description: str | None, difficulty: dict | None,
                  source: str, sft: dict | None = None) -> dict:
    view = get_task(task).view
    timestamps = {"keyframe": [row["keyframe_timestamp"]], "candidate": [row["aks_frame_idx"]]}.get(view, [0, 2, 4])
    gt = task_ground_truth(row, get_task(task), difficulty, description)
    return {"sample_id": row["sample_id"], "pool": pool, "video": row["video"], "expression_id": row["expression_id"],
            "expression": "the red square", "type": "referring", "task": task, "timestamps": timestamps,
            "source": source, "question": get_task(task).question("the red square", timestamps, description or ""),
            "ground_truth": json.loads(gt.to_json()), **(sft or {})}


def test_write_shards_on_hand_made_upstream(upstream: Path, tmp_path: Path, capfd: pytest.CaptureFixture,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """One run (in the test itself, so that the mutation run maps every function it calls to this test), checked
    whole; then the same inputs with threads and the exports off give the same tars and no exports."""
    out = tmp_path / "shards"
    (out / "sft").mkdir(parents=True)
    (out / "sft" / "shard-000009.tar").write_bytes(b"stale")  # outputs are rewritten whole
    progress: list[tuple[str, int, int]] = []
    listener = lambda desc, done, total: progress.append((desc, done, total))  # noqa: E731
    add_listener(listener)
    truths: list[tuple] = []
    real_truth = shard_module.ground_truth

    def counting_truth(sample, difficulty, task=None, description=None):
        truths.append((sample["pool"], sample["sample_id"], task, description))
        return real_truth(sample, difficulty, task, description)

    monkeypatch.setattr(shard_module, "ground_truth", counting_truth)
    try:
        report = run(upstream, out, ShardParams(samples_per_shard=2, jpeg_quality=QUALITY))
    finally:
        remove_listener(listener)
    assert progress == [("shard", 1, 2), ("shard", 2, 2)]  # one step per video (src1/vidB, then vidA)
    captured = capfd.readouterr()
    assert "# writing" not in captured.out + captured.err  # the tar writer is quiet
    # one ground truth per (pool, sample, task, description): 11 records, 8 ground truths (masks resized once)
    assert len(truths) == len(set(truths)) == 8
    monkeypatch.setattr(shard_module, "ground_truth", real_truth)
    check_records(upstream, out)
    for pool in ("sft", "grpo", "eval"):  # fixed member mtime and owner: byte-identical tars
        for path in sorted((out / pool).glob("*.tar")):
            with tarfile.open(path) as tar:
                members = tar.getmembers()
            assert members and {(m.mtime, m.uname, m.gname) for m in members} == {(0, "vrsflow", "vrsflow")}
    check_manifest_metrics_tables_and_lineage(upstream, out, report)
    check_sharegpt_export(out)
    check_verl_export(out)
    first = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != "lineage.json"}
    run(upstream, out, ShardParams(samples_per_shard=2, jpeg_quality=QUALITY), RunnerParams(kind="threads", workers=2))
    again = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != "lineage.json"}
    assert again == first and len(first) > 20  # the same folder written again, with threads: the same files
    plain = tmp_path / "plain"
    run(upstream, plain, ShardParams(samples_per_shard=2, jpeg_quality=QUALITY, export_sharegpt=False,
                                     export_verl=False), RunnerParams(kind="threads", workers=2))
    assert not (plain / "exports").exists()
    for pool in ("sft", "grpo", "eval"):
        tars = sorted(p.name for p in (out / pool).glob("*.tar"))
        assert sorted(p.name for p in (plain / pool).glob("*.tar")) == tars
        for name in tars:
            assert (plain / pool / name).read_bytes() == (out / pool / name).read_bytes()


def check_records(upstream: Path, out: Path) -> None:
    sft, grpo, ev = (pool_records(out / p) for p in ("sft", "grpo", "eval"))
    assert [r["__key__"] for r in sft] == ["vidA__0_t0", "vidA__0_t1", "vidA__0_t2", "vidA__0_t3", "vidA__0_t4"]
    assert [r["__key__"] for r in grpo] == ["src1_vidB__0", "vidA__2_veason", "vidA__2_rcot_ktg"]
    assert [r["__key__"] for r in ev] == ["vidA__0", "vidA__5"]
    by_trace = {(t["sample_id"], t["trace_index"]): t for t in TRACES}
    sft_row, (vid_a2, vid_b), (eval_row, eval_aks) = ROWS["sft"][0], ROWS["grpo"], ROWS["eval"]
    difficulty = {"vidA__0": difficulty_row("vidA__0", "sft"), "vidA__2": difficulty_row("vidA__2", "grpo")}
    expected = {
        ("sft", f"vidA__0_t{i}"): expected_meta(
            "sft", sft_row, by_trace["vidA__0", i]["task"], DESCRIPTION if i == 3 else None, difficulty["vidA__0"],
            "root", {"response": by_trace["vidA__0", i]["response"], "template_id": f"tpl-{i}", "teacher": TEACHER})
        for i in range(5)}
    expected["grpo", "src1_vidB__0"] = expected_meta("grpo", vid_b, "veason", None, None, "src1")
    expected["grpo", "vidA__2_veason"] = expected_meta("grpo", vid_a2, "veason", None, difficulty["vidA__2"], "root")
    expected["grpo", "vidA__2_rcot_ktg"] = expected_meta("grpo", vid_a2, "rcot_ktg", "The square in grpo.",
                                                         difficulty["vidA__2"], "root")
    expected["eval", "vidA__0"] = expected_meta("eval", eval_row, "veason", None, difficulty["vidA__0"], "root")
    expected["eval", "vidA__5"] = expected_meta("eval", eval_aks, "rcot_aks", None, None, "root")
    for pool, records in (("sft", sft), ("grpo", grpo), ("eval", ev)):
        for record in records:
            meta = expected[pool, record["__key__"]]
            assert record["json"] == json.dumps(meta, sort_keys=True).encode(), (pool, record["__key__"])
            one_frame = meta["task"] in ("rcot_ktg", "rcot_aks")  # the keyframe / the AKS candidate (00004)
            names = [str(meta["timestamps"][0]).zfill(5)] if one_frame else FRAMES
            size = KEY if one_frame else TRAIN
            frames = sorted(k for k in record if k.startswith("frame_"))
            assert frames == [f"frame_{i}.jpg" for i in range(len(names))], record["__key__"]
            for i, name in enumerate(names):
                path = upstream / "root" / "JPEGImages" / meta["video"] / f"{name}.jpg"
                assert record[f"frame_{i}.jpg"] == reference_jpeg(path, size, QUALITY), (record["__key__"], i)
    # literals for what the oracle above takes from the views: sizes, keyframes, difficulty, description
    ktg = json.loads(sft[3]["json"])
    assert ktg["timestamps"] == [4] and ktg["ground_truth"]["image_size"] == [KEY, KEY]
    assert ktg["ground_truth"]["description"] == DESCRIPTION and ktg["ground_truth"]["token_budget"] == 320
    assert json.loads(sft[0]["json"])["ground_truth"]["description"] is None
    assert json.loads(grpo[0]["json"])["ground_truth"]["difficulty"] is None
    assert json.loads(ev[0]["json"])["ground_truth"]["keyframe_timestamp"] == 2
    assert "Video description" in ktg["question"] and "Video description" not in json.loads(ev[1]["json"])["question"]
    assert json.loads(sft[0]["json"])["ground_truth"]["keyframe_timestamp"] == 4


def check_manifest_metrics_tables_and_lineage(upstream: Path, out: Path, report) -> None:
    manifest = json.loads((out / "manifest.json").read_text())
    assert not (out / "sft" / "shard-000009.tar").exists()

    def entry(pool: str, counts: list[int], sources: dict) -> dict:
        shards_ = []
        for i, count in enumerate(counts):
            data = (out / pool / f"shard-{i:06d}.tar").read_bytes()
            shards_.append({"name": f"shard-{i:06d}.tar", "bytes": len(data),
                            "sha256": hashlib.sha256(data).hexdigest(), "count": count})
        return {"count": sum(counts), "sources": sources, "shards": shards_}

    expected = {"sft": entry("sft", [2, 2, 1], {"root": 5}), "grpo": entry("grpo", [2, 1], {"root": 2, "src1": 1}),
                "eval": entry("eval", [2], {"root": 2})}
    assert manifest == expected
    assert sorted(p.name for p in (out / "grpo").glob("*.tar")) == ["shard-000000.tar", "shard-000001.tar"]
    assert report.stage == "shard"
    assert report.metrics == {"eval.samples": 2, "eval.shards": 1, "eval.source.root": 2, "grpo.samples": 3,
                              "grpo.shards": 2, "grpo.source.root": 2, "grpo.source.src1": 1, "sft.samples": 5,
                              "sft.shards": 3, "sft.source.root": 5}
    assert list(report.metrics) == sorted(report.metrics)
    assert list(report.tables) == ["shards", "samples per source"]
    assert report.tables["shards"].to_dict("records") == [
        {"pool": p, "shard": s["name"], "samples": s["count"], "bytes": s["bytes"]}
        for p in ("sft", "grpo", "eval") for s in expected[p]["shards"]]
    assert report.tables["samples per source"].to_dict("records") == [
        {"pool": "sft", "source": "root", "samples": 5}, {"pool": "grpo", "source": "root", "samples": 2},
        {"pool": "grpo", "source": "src1", "samples": 1}, {"pool": "eval", "source": "root", "samples": 2}]
    record = json.loads((out / "lineage.json").read_text())
    assert record["stage"] == "shard" and record["counts"] == {"eval": 2, "grpo": 3, "sft": 5}
    assert record["params"] == {"samples_per_shard": 2, "jpeg_quality": QUALITY, "export_sharegpt": True,
                                "export_verl": True}
    assert sorted(record["inputs"]) == ["difficulty", "filter", "keyframes"]
    assert record["inputs"]["filter"]["path"] == (upstream / "filter").as_posix()
    assert record["extra"] == {"shards": {p: {s["name"]: s["sha256"] for s in e["shards"]}
                                          for p, e in expected.items()}}
    digest = hashlib.sha256()  # the code version: schemas/answer.py, then stages/shard's .py files (by module name)
    files = [Path(schemas.answer.__file__), *sorted(Path(shard_module.__file__).parent.rglob("*.py"))]
    for file in files:
        digest.update(file.name.encode() + file.read_bytes())
    assert record["code_version"]["sha256"] == digest.hexdigest()


def check_sharegpt_export(out: Path) -> None:
    folder = out / "exports" / "sharegpt"
    sft = pool_records(out / "sft")
    rows = json.loads((folder / "sft.json").read_text())
    assert len(rows) == 5
    for row, record in zip(rows, sft, strict=True):
        meta = json.loads(record["json"])
        names = [f"images/{record['__key__']}_frame_{i}.jpg" for i in range(len(meta["timestamps"]))]
        tags = "".join(f"<{t}s><image>" for t in meta["timestamps"])
        assert row == {"messages": [{"role": "user", "content": f"{tags}\n{meta['question']}"},
                                    {"role": "assistant", "content": meta["response"]}], "images": names}
        for i, name in enumerate(names):
            assert (folder / name).read_bytes() == record[f"frame_{i}.jpg"]
    assert json.loads((folder / "dataset_info.json").read_text()) == {"vrsflow_sft": {
        "file_name": "sft.json", "formatting": "sharegpt", "columns": {"messages": "messages", "images": "images"},
        "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}}}


def check_verl_export(out: Path) -> None:
    for pool in ("grpo", "eval"):
        records = pool_records(out / pool)
        table = pq.read_table(out / "exports" / "verl" / f"{pool}.parquet").to_pylist()
        assert len(table) == len(records)
        for index, (row, record) in enumerate(zip(table, records, strict=True)):
            meta = json.loads(record["json"])
            tags = "".join(f"<{t}s><image>" for t in meta["timestamps"])
            assert row == {
                "data_source": "vrsflow/revos",
                "prompt": [{"role": "user", "content": f"{tags}\n{meta['question']}"}],
                "images": [{"bytes": record[f"frame_{i}.jpg"]} for i in range(len(meta["timestamps"]))],
                "ability": "video_reasoning_segmentation",
                "reward_model": {"style": "rule", "ground_truth": json.dumps(meta["ground_truth"], sort_keys=True)},
                "extra_info": {"index": index, "sample_id": meta["sample_id"], "split": pool,
                               "expression": "the red square"}}


# ---------------------------------------------------------------- the exports and helpers on their own


def _record(key: str, n_frames: int, pool: str = "grpo") -> dict:
    meta = {"sample_id": key, "pool": pool, "expression": f"expr {key}", "timestamps": list(range(n_frames)),
            "question": "Q?", "ground_truth": {"b": 1, "a": [2]}, "response": f"<think>{key}</think>"}
    record = {"__key__": key, "json": json.dumps(meta).encode()}
    record.update({f"frame_{i}.jpg": bytes([i, len(key)]) for i in range(n_frames)})
    return record


def test_export_verl_in_row_groups_of_64(tmp_path: Path) -> None:
    records = [_record(f"k{i}", 1 + i % 2) for i in range(129)] + [_record("none", 0)]
    path = tmp_path / "v" / "deeper" / "grpo.parquet"
    export_verl(records, path)
    meta = pq.ParquetFile(path).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [64, 64, 2]
    rows = pq.read_table(path).to_pylist()  # later groups take the first group's schema (an empty image list too)
    assert rows[129]["images"] == [] and rows[129]["extra_info"]["sample_id"] == "none"
    assert [r["extra_info"]["index"] for r in rows] == list(range(130))
    assert rows[127]["images"] == [{"bytes": bytes([0, 4])}, {"bytes": bytes([1, 4])}]
    assert rows[127]["reward_model"]["ground_truth"] == '{"a": [2], "b": 1}'
    assert rows[127]["prompt"][0]["content"] == "<0s><image><1s><image>\nQ?"
    export_verl([], tmp_path / "v" / "deeper" / "eval.parquet")  # into an existing folder
    export_verl([], tmp_path / "new" / "deeper" / "test.parquet")  # into new folders
    assert pq.read_table(tmp_path / "new" / "deeper" / "test.parquet").num_rows == 0
    empty = pq.read_table(tmp_path / "v" / "deeper" / "eval.parquet")
    assert empty.num_rows == 0 and empty.column_names == ["data_source"]


def test_export_sharegpt_helper(tmp_path: Path) -> None:
    export_sharegpt([_record("a", 2, "sft"), _record("b", 1, "sft")], tmp_path / "sg")
    rows = json.loads((tmp_path / "sg" / "sft.json").read_text())
    assert rows == [
        {"messages": [{"role": "user", "content": "<0s><image><1s><image>\nQ?"},
                      {"role": "assistant", "content": "<think>a</think>"}],
         "images": ["images/a_frame_0.jpg", "images/a_frame_1.jpg"]},
        {"messages": [{"role": "user", "content": "<0s><image>\nQ?"},
                      {"role": "assistant", "content": "<think>b</think>"}],
         "images": ["images/b_frame_0.jpg"]}]
    assert (tmp_path / "sg" / "images" / "a_frame_1.jpg").read_bytes() == bytes([1, 1])
    assert (tmp_path / "sg" / "dataset_info.json").is_file()


def test_user_text_and_default_ground_truth_task() -> None:
    assert user_text({"timestamps": [0, 12], "question": "Where?"}, "<img>") == "<0s><img><12s><img>\nWhere?"
    row = keyframes_row("vidA__2", "grpo", "vidA", ["rcot_kfg", "veason"])
    default = ground_truth(row, None)  # the sample's first task
    assert default.task == "rcot_kfg" and default.difficulty is None
    assert ground_truth(row, {"difficulty": 5.5, "token_budget": 64}, "veason").token_budget == 64


def test_dask_units_go_in_windows_of_32_per_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list] = []

    def fake_map(fn, items, runner):
        calls.append(list(items))
        return [[("p", item)] for item in items]

    monkeypatch.setattr(shard_module, "map_ordered", fake_map)
    units = [[i] for i in range(70)]
    got = list(shard_module._imap_units(units, RunnerParams(kind="dask", workers=2)))
    assert got == [[("p", [i])] for i in range(70)]
    assert [len(c) for c in calls] == [64, 6] and calls[1][0] == [64]
    calls.clear()
    assert len(list(shard_module._imap_units(units, RunnerParams(kind="dask", workers=1)))) == 70
    assert [len(c) for c in calls] == [32, 32, 6]
    calls.clear()
    no_workers = type("R", (), {"kind": "dask", "workers": 0})  # params refuse it; the stage keeps a window of 32
    assert len(list(shard_module._imap_units(units, no_workers))) == 70 and [len(c) for c in calls] == [32, 32, 6]
    calls.clear()
    monkeypatch.setattr(shard_module, "_unit_records", lambda unit: [("serial", unit)])
    assert list(shard_module._imap_units([[0]], RunnerParams(kind="dask", workers=2))) == [[("serial", [0])]]
    assert calls == []  # one unit: no cluster


class _InlineExecutor:
    """A ThreadPoolExecutor stand-in that runs each job at submit time and records how many were submitted."""

    submitted: list[int] = []

    def __init__(self, max_workers: int) -> None:
        self.max_workers = max_workers

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def submit(self, fn, *args) -> Future:
        _InlineExecutor.submitted.append(args[0][0])
        future: Future = Future()
        future.set_result(fn(*args))
        return future


@pytest.mark.parametrize(("workers", "ahead"), [(1, 2), (3, 6), (0, 2)])
def test_threads_keep_units_ahead_times_workers_in_flight(monkeypatch: pytest.MonkeyPatch, workers: int,
                                                           ahead: int) -> None:
    monkeypatch.setattr(shard_module, "ThreadPoolExecutor", _InlineExecutor)
    monkeypatch.setattr(shard_module, "_unit_records", lambda unit: [("p", unit)])
    _InlineExecutor.submitted = []
    stream = shard_module._imap_units([[i] for i in range(10)], RunnerParams(kind="threads", workers=max(workers, 1)))
    if workers == 0:  # a runner with no workers is refused by params; the stage still keeps one
        stream = shard_module._imap_units([[i] for i in range(10)], type("R", (), {"kind": "threads", "workers": 0}))
    assert next(stream) == [("p", [0])] and _InlineExecutor.submitted == list(range(ahead))
    assert [("p", [1])] == next(stream) and len(_InlineExecutor.submitted) == ahead + 1
    assert list(stream) == [[("p", [i])] for i in range(2, 10)] and _InlineExecutor.submitted == list(range(10))
    _InlineExecutor.submitted = []
    assert list(shard_module._imap_units([[0]], RunnerParams(kind="threads", workers=2))) == [[("p", [0])]]
    assert _InlineExecutor.submitted == []  # one unit: no pool


def test_frames_are_rgb_jpegs_whatever_the_source_mode(tmp_path: Path) -> None:
    """A grayscale source frame becomes a 3-channel JPEG like every other (the model's processor expects RGB)."""
    folder = tmp_path / "JPEGImages" / "gray"
    folder.mkdir(parents=True)
    Image.fromarray(np.arange(SIDE * SIDE, dtype=np.uint8).reshape(SIDE, SIDE)).save(folder / "00000.jpg")
    data = shard_module.frame_jpeg(tmp_path, "gray", "00000", TRAIN, QUALITY)
    with Image.open(io.BytesIO(data)) as img:
        assert (img.format, img.mode, img.size) == ("JPEG", "RGB", (TRAIN, TRAIN))
    assert data == reference_jpeg(folder / "00000.jpg", TRAIN, QUALITY)


def test_nothing_to_shard(tmp_path: Path) -> None:
    """Empty upstream tables: no tars, zero counts, empty tables that keep their columns, empty exports."""
    for pool in ("sft", "grpo", "eval"):
        write_table(pd.DataFrame({c: [] for c in KeyframesSchema.to_schema().columns}), KeyframesSchema,
                    tmp_path / "keyframes" / f"{pool}.parquet")
    write_table(pd.DataFrame({c: [] for c in AcceptedSchema.to_schema().columns}), AcceptedSchema,
                tmp_path / "filter" / "accepted.parquet")
    write_table(pd.DataFrame({c: [] for c in DifficultySchema.to_schema().columns}), DifficultySchema,
                tmp_path / "difficulty" / "scores.parquet")
    (tmp_path / "root").mkdir()
    report = run(tmp_path, tmp_path / "out", ShardParams())
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest == {p: {"count": 0, "sources": {}, "shards": []} for p in ("eval", "grpo", "sft")}
    assert not list((tmp_path / "out").rglob("*.tar"))
    assert report.metrics == {"eval.samples": 0, "eval.shards": 0, "grpo.samples": 0, "grpo.shards": 0,
                              "sft.samples": 0, "sft.shards": 0}
    assert list(report.tables["samples per source"].columns) == ["pool", "source", "samples"]
    assert len(report.tables["samples per source"]) == 0 and len(report.tables["shards"]) == 0
    assert json.loads((tmp_path / "out" / "exports" / "sharegpt" / "sft.json").read_text()) == []
    for pool in ("grpo", "eval"):
        table = pq.read_table(tmp_path / "out" / "exports" / "verl" / f"{pool}.parquet")
        assert table.num_rows == 0 and table.column_names == ["data_source"]


# ---- third part: the runners' own work (survivors of the complete run: docs/testing.md) -------------------------


def test_threads_run_two_units_on_at_most_workers_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    import stages.shard as shard_module

    lock, active, peak, where, pause = threading.Lock(), [0], [0], [], [0.05]

    def records(unit):  # slow enough that a second thread, if there were one, would overlap it
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
            where.append(threading.current_thread() is threading.main_thread())
        time.sleep(pause[0])
        with lock:
            active[0] -= 1
        return [unit[0]]

    monkeypatch.setattr(shard_module, "_unit_records", records)
    assert list(shard_module._imap_units([[0], [1]], RunnerParams(kind="threads", workers=1))) == [[0], [1]]
    assert where == [False, False]  # two units are already worth the pool
    assert peak[0] == 1  # one worker: one unit at a time, however many are queued ahead
    where.clear()
    pause[0] = 0.2  # two workers overlap for sure
    assert list(shard_module._imap_units([[i] for i in range(6)], RunnerParams(kind="threads", workers=2))) == [
        [i] for i in range(6)]
    assert peak[0] == 2 and not any(where)


def test_dask_gets_every_window_of_two_or_more_units(monkeypatch: pytest.MonkeyPatch) -> None:
    import stages.shard as shard_module

    calls = []

    def map_ordered(fn, items, runner):  # stands in for the cluster: records what it is given
        calls.append((fn, len(items), runner))
        return [fn(item) for item in items]

    monkeypatch.setattr(shard_module, "_unit_records", lambda unit: [unit[0]])
    monkeypatch.setattr(shard_module, "map_ordered", map_ordered)
    runner = RunnerParams(kind="dask", workers=1)
    assert list(shard_module._imap_units([[0], [1]], runner)) == [[0], [1]]
    assert calls == [(shard_module._unit_records, 2, runner)]
    calls.clear()
    assert list(shard_module._imap_units([[0]], runner)) == [[0]] and calls == []  # one unit: no cluster


def test_a_later_row_group_of_frameless_rows_keeps_the_first_group_s_schema(tmp_path: Path) -> None:
    # on its own the last group ([] images only) would infer a list of nulls, which the file cannot take
    export_verl([_record(f"k{i}", 1) for i in range(64)] + [_record("none", 0)], tmp_path / "grpo.parquet")
    rows = pq.read_table(tmp_path / "grpo.parquet").to_pylist()
    assert len(rows) == 65 and rows[64]["images"] == [] and rows[63]["images"] == [{"bytes": bytes([0, 3])}]
    export_verl([], tmp_path / "eval.parquet")  # the empty export's one column is still text, not null
    assert pq.read_schema(tmp_path / "eval.parquet").field("data_source").type == pa.string()
