"""shard stage: round trip (every sample once, every field intact), byte-identical tars, keys, exports."""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import webdataset as wds
from PIL import Image

from schemas.answer import GroundTruth
from schemas.cot import AcceptedSchema
from schemas.sample import POOLS, KeyframesSchema
from stages.core import rle
from stages.core.io import read_table
from stages.core.runner import RunnerParams
from stages.cot import generate_cot
from stages.difficulty import score_difficulty
from stages.filter import filter_traces
from stages.ingest import ingest
from stages.keyframes import select_keyframes
from stages.params.cot import CotParams
from stages.params.difficulty import DifficultyParams
from stages.params.filter import FilterParams
from stages.params.ingest import IngestParams
from stages.params.keyframes import KeyframesParams
from stages.params.sample import SampleParams
from stages.params.shard import ShardParams
from stages.params.teacher import TeacherParams
from stages.sample import sample_pools
from stages.shard import sharegpt_row, verl_row, write_shards
from stages.tasks import get_task
from tests.pipeline_repo import built_once
from tests.revos_factory import simple_video, write_root

TRAIN_SIZE = 56  # small frames keep the test fast; the stage takes the size from the keyframes table


def build_upstream(base: Path, n_train: int = 4, n_frames: int = 6) -> Path:
    """Run synthetic root → ingest → sample → keyframes → cot → filter → difficulty under `base`."""
    videos = [simple_video(f"S/train/v{i}", n_frames=n_frames + i % 2) for i in range(n_train)]
    videos += [simple_video("S/valid/w", split="valid", n_frames=n_frames)]
    write_root(base / "root", videos)
    ingest(IngestParams(), base / "root", base / "index", RunnerParams(kind="serial"))
    sample_pools(SampleParams(sft_first_k=1, grpo_size=2), 0, base / "index", base / "sample")
    select_keyframes(KeyframesParams(train_size=TRAIN_SIZE), 0, base / "root", base / "index", base / "sample",
                     base / "keyframes")
    teacher = TeacherParams()  # template backend: offline, from the annotations
    generate_cot(teacher, CotParams(cache_dir=str(base / "cot_cache")), 0, base / "root", base / "keyframes",
                 base / "cot")
    filter_traces(FilterParams(), base / "cot", base / "keyframes", base / "filter")
    score_difficulty(DifficultyParams(cache_dir=str(base / "difficulty_cache")), teacher, base / "root",
                     base / "index", base / "keyframes", base / "difficulty")
    return base


def shard(base: Path, out: Path, params: ShardParams | None = None) -> Path:
    """Write the shards of the upstream folders in `base` into `out`."""
    write_shards(params or ShardParams(), base / "root", base / "keyframes", base / "filter", base / "difficulty", out,
                 RunnerParams(kind="serial"))
    return out


def read_pool(folder: Path) -> list[dict]:
    """Every raw record of a pool's tars, in tar order."""
    urls = sorted(str(p) for p in folder.glob("shard-*.tar"))
    return list(wds.WebDataset(urls, shardshuffle=False, empty_check=False)) if urls else []


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # scripts/mutation.sh: a shard run mutates none of the upstream stages: one build for every mutant
    return built_once("shard-upstream", tmp_path_factory.mktemp("shard"), build_upstream)


@pytest.fixture(scope="module")
def shards(upstream: Path) -> Path:
    return shard(upstream, upstream / "shards", ShardParams(samples_per_shard=3))


def test_every_sample_exactly_once_with_fields_intact(upstream: Path, shards: Path) -> None:
    accepted = read_table(upstream / "filter" / "accepted.parquet", AcceptedSchema)
    for pool in POOLS:
        table = read_table(upstream / "keyframes" / f"{pool}.parquet", KeyframesSchema)
        by_id = {row["sample_id"]: row for row in table.to_dict("records")}
        records = read_pool(shards / pool)
        keys = [r["__key__"] for r in records]
        assert len(keys) == len(set(keys)), f"{pool}: a key repeats"
        if pool == "sft":
            traces = accepted[accepted["sample_id"].isin(by_id)]
            trace_keys = [f"{s}_t{t}" for s, t in zip(traces["sample_id"], traces["trace_index"], strict=True)]
            expected, responses = set(trace_keys), dict(zip(trace_keys, traces["response"], strict=True))
        else:
            expected, responses = set(by_id), {}
        assert set(keys) == expected and len(keys) > 0, pool
        for record in records:
            assert "." not in record["__key__"]
            meta = json.loads(record["json"])
            row = by_id[meta["sample_id"]]
            assert meta["pool"] == pool and meta["expression"] == row["text"] and meta["video"] == row["video"]
            assert meta["timestamps"] == [int(t) for t in row["timestamps"]]
            assert meta["question"] == get_task("veason").question(row["text"], meta["timestamps"])
            if pool == "sft":
                assert meta["response"] == responses[record["__key__"]]
            frames = sorted(k for k in record if k.startswith("frame_"))
            assert len(frames) == len(row["frame_names"])
            for name in frames:
                with Image.open(io.BytesIO(record[name])) as img:
                    assert img.format == "JPEG" and img.size == (TRAIN_SIZE, TRAIN_SIZE)
            gt = GroundTruth.from_json(meta["ground_truth"])
            assert gt.timestamps == meta["timestamps"] and gt.image_size == [TRAIN_SIZE, TRAIN_SIZE]
            assert gt.keyframe_timestamp == int(row["keyframe_timestamp"])
            for got, want in zip(gt.boxes, row["boxes"], strict=True):
                assert got == [None if b is None else [float(v) for v in b] for b in want]
            assert gt.union_areas == pytest.approx([float(a) for a in row["union_areas"]])
            for mask_rle, area in zip(gt.masks, gt.union_areas, strict=True):
                mask = rle.decode(mask_rle, TRAIN_SIZE, TRAIN_SIZE)
                assert mask.shape == (TRAIN_SIZE, TRAIN_SIZE)
                # nearest-neighbour resizing of the union mask keeps its area close to the scaled area
                assert abs(int(mask.sum()) - area) <= 0.35 * area + 2 * TRAIN_SIZE
            assert gt.difficulty is not None and 1.0 <= gt.difficulty <= 10.0 and gt.token_budget > 0


def test_manifest_matches_files(shards: Path) -> None:
    manifest = json.loads((shards / "manifest.json").read_text())
    assert set(manifest) == set(POOLS)
    for pool, entry in manifest.items():
        files = sorted(p.name for p in (shards / pool).glob("shard-*.tar"))
        assert [s["name"] for s in entry["shards"]] == files
        assert sum(s["count"] for s in entry["shards"]) == entry["count"] == len(read_pool(shards / pool))
        for s in entry["shards"]:
            data = (shards / pool / s["name"]).read_bytes()
            assert s["bytes"] == len(data) and s["sha256"] == hashlib.sha256(data).hexdigest()
            assert s["count"] == len(read_pool_file(shards / pool / s["name"]))
    assert len(manifest["sft"]["shards"]) >= 2  # 3 per shard: the split into several tars is exercised


def read_pool_file(path: Path) -> list[dict]:
    return list(wds.WebDataset([str(path)], shardshuffle=False, empty_check=False))


def test_same_params_give_byte_identical_tars(upstream: Path, shards: Path, tmp_path: Path) -> None:
    again = shard(upstream, tmp_path / "again", ShardParams(samples_per_shard=3))
    for pool in POOLS:
        for path in sorted((shards / pool).glob("shard-*.tar")):
            assert (again / pool / path.name).read_bytes() == path.read_bytes(), f"{pool}/{path.name}"
    assert (again / "manifest.json").read_text() == (shards / "manifest.json").read_text()
    for path in sorted((shards / "exports" / "verl").glob("*.parquet")):
        assert path.read_bytes() == (again / "exports" / "verl" / path.name).read_bytes(), path.name


def test_tar_members_carry_fixed_metadata(shards: Path) -> None:
    import tarfile

    with tarfile.open(next((shards / "sft").glob("shard-*.tar"))) as tar:
        members = tar.getmembers()
    assert members and {(m.mtime, m.uname, m.gname) for m in members} == {(0, "vrsflow", "vrsflow")}


def test_sharegpt_export(shards: Path) -> None:
    folder = shards / "exports" / "sharegpt"
    rows = json.loads((folder / "sft.json").read_text())
    info = json.loads((folder / "dataset_info.json").read_text())
    assert info["vrsflow_sft"]["formatting"] == "sharegpt" and len(rows) == len(read_pool(shards / "sft"))
    for row in rows:
        user, assistant = row["messages"]
        assert (user["role"], assistant["role"]) == ("user", "assistant")
        assert user["content"].count("<image>") == len(row["images"]) > 0
        assert assistant["content"].startswith("<think>") and assistant["content"].endswith("</answer>")
        assert all((folder / p).is_file() for p in row["images"])


def test_verl_export(shards: Path) -> None:
    for pool in ("grpo", "eval"):
        table = pd.read_parquet(shards / "exports" / "verl" / f"{pool}.parquet")
        assert len(table) == len(read_pool(shards / pool))
        assert {"data_source", "prompt", "images", "ability", "reward_model", "extra_info"} <= set(table.columns)
        for row in table.to_dict("records"):
            content = row["prompt"][0]["content"]
            assert content.count("<image>") == len(row["images"])
            assert row["reward_model"]["style"] == "rule"
            GroundTruth.from_json(row["reward_model"]["ground_truth"])
            assert row["extra_info"]["split"] == pool


def _record(n_frames: int) -> dict:
    gt = GroundTruth(timestamps=list(range(0, 2 * n_frames, 2)), image_size=[4, 4], boxes=[[[0, 0, 2, 2]]] * n_frames,
                     areas=[[4.0]] * n_frames, union_areas=[4.0] * n_frames,
                     masks=[rle.encode(np.ones((4, 4), bool))] * n_frames, keyframe_timestamp=2 * (n_frames // 2))
    meta = {"sample_id": "S_train_v0__0", "pool": "grpo", "expression": "the left box", "timestamps": gt.timestamps,
            "question": "Which timestamp?", "ground_truth": json.loads(gt.to_json()), "response": "<think>x</think>"}
    record = {"__key__": "S_train_v0__0", "json": json.dumps(meta).encode()}
    record.update({f"frame_{i}.jpg": bytes([i]) for i in range(n_frames)})
    return record


@pytest.mark.parametrize("n_frames", [1, 3, 6])
def test_row_functions(n_frames: int) -> None:
    row = verl_row(_record(n_frames), 7)
    assert row["prompt"][0]["content"].count("<image>") == n_frames == len(row["images"])
    assert [img["bytes"] for img in row["images"]] == [bytes([i]) for i in range(n_frames)]
    assert row["extra_info"]["index"] == 7 and row["reward_model"]["style"] == "rule"
    assert GroundTruth.from_json(row["reward_model"]["ground_truth"]).keyframe_timestamp == 2 * (n_frames // 2)
    entry = sharegpt_row(_record(n_frames), [f"images/{i}.jpg" for i in range(n_frames)])
    assert entry["messages"][0]["content"].count("<image>") == n_frames
    assert entry["messages"][1] == {"role": "assistant", "content": "<think>x</think>"}
    # the timestamp tag precedes its frame, as in the question template
    assert entry["messages"][0]["content"].startswith("<0s><image>")


def test_empty_filter_output_gives_empty_sft_pool(upstream: Path, tmp_path: Path) -> None:
    base = tmp_path / "up"
    (base / "filter").mkdir(parents=True)
    for name in ("root", "keyframes", "difficulty"):
        (base / name).symlink_to(upstream / name, target_is_directory=True)
    accepted = read_table(upstream / "filter" / "accepted.parquet", AcceptedSchema)
    accepted.iloc[:0].to_parquet(base / "filter" / "accepted.parquet")
    out = shard(base, tmp_path / "out", replace(ShardParams(), export_sharegpt=True))
    assert json.loads((out / "manifest.json").read_text())["sft"] == {"count": 0, "sources": {}, "shards": []}


# --- frames decoded once per video, streamed, byte-identical to the per-sample definition --------------------


def reference_jpeg(path: Path, size: int, quality: int) -> bytes:
    """A frame's bytes by the stage's documented definition, written out here: decode at the largest
    DCT scale covering size², RGB, bicubic to size², JPEG at `quality`."""
    with Image.open(path) as img:
        img.draft("RGB", (size, size))
        small = img.convert("RGB").resize((size, size), Image.Resampling.BICUBIC)
    buffer = io.BytesIO()
    small.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def test_frames_equal_the_per_sample_definition(upstream: Path, shards: Path) -> None:
    from stages.core import revos
    from stages.tasks import get_task
    from stages.tasks.views import frame_view

    quality = ShardParams().jpeg_quality
    checked = 0
    for pool in POOLS:
        table = read_table(upstream / "keyframes" / f"{pool}.parquet", KeyframesSchema)
        by_id = {row["sample_id"]: row for row in table.to_dict("records")}
        for record in read_pool(shards / pool):
            meta = json.loads(record["json"])
            view = frame_view(by_id[meta["sample_id"]], get_task(meta["task"]))
            for i, name in enumerate(view.frame_names):
                path = revos.frame_path(upstream / "root", meta["video"], name)
                assert record[f"frame_{i}.jpg"] == reference_jpeg(path, view.size, quality), (record["__key__"], i)
                checked += 1
    assert checked > 20


def test_threads_and_serial_give_identical_bytes_and_each_frame_is_decoded_once(
        upstream: Path, shards: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stages.shard as shard_module

    calls: list[tuple] = []
    original = shard_module.frame_jpeg

    def counting(root, video, frame, size, quality):
        calls.append((video, frame, size, quality))
        return original(root, video, frame, size, quality)

    monkeypatch.setattr(shard_module, "frame_jpeg", counting)
    out = tmp_path / "threads"
    write_shards(ShardParams(samples_per_shard=3), upstream / "root", upstream / "keyframes", upstream / "filter",
                 upstream / "difficulty", out, RunnerParams(kind="threads", workers=2))
    assert len(calls) == len(set(calls)) > 0  # no (frame, size) of a video decoded twice, across pools too
    mine = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file() and p.name != "lineage.json")
    theirs = sorted(p.relative_to(shards) for p in shards.rglob("*") if p.is_file() and p.name != "lineage.json")
    assert mine == theirs and len(mine) > 10
    for rel in mine:  # tars, manifest, ShareGPT JSON and images, verl parquet
        assert (out / rel).read_bytes() == (shards / rel).read_bytes(), rel


def test_units_stream_with_bounded_lookahead(monkeypatch: pytest.MonkeyPatch) -> None:
    import stages.shard as shard_module

    started: list[int] = []
    monkeypatch.setattr(shard_module, "_unit_records", lambda unit: (started.append(unit[0]), [unit[0]])[1])
    units = [[i] for i in range(20)]
    stream = shard_module._imap_units(units, RunnerParams(kind="threads", workers=2))
    first = next(stream)
    # one result taken: at most UNITS_AHEAD × workers units were ever submitted
    assert first == [0] and len(started) <= shard_module.UNITS_AHEAD * 2
    assert [first, *stream] == [[i] for i in range(20)]
    jobs = [(f"k{i}", {"video": v}) for i, v in enumerate("aabbbca")]
    assert [len(u) for u in shard_module.video_units(jobs)] == [2, 3, 1, 1]
    other = [(f"g{i}", {"video": v}) for i, v in enumerate("bd")]
    merged = shard_module.merged_units({"sft": jobs, "grpo": other})
    assert [[(pool, job[0]) for pool, job in unit] for unit in merged] == [
        [("sft", "k0"), ("sft", "k1")], [("sft", "k2"), ("sft", "k3"), ("sft", "k4"), ("grpo", "g0")],
        [("sft", "k5")], [("sft", "k6")], [("grpo", "g1")]]
