"""`shard` stage: WebDataset tars for SFT, GRPO and evaluation, a manifest, and exports for other tools.

Each sample is `<key>.frame_<i>.jpg` (the N sampled frames at train size) + `<key>.json` (question,
timestamps, ground truth; the accepted response for SFT). Keys are sample ids without dots. Tars are
byte-identical for the same inputs (fixed member mtime, owner and order). Exports: LLaMA-Factory
ShareGPT JSON with image files (what the papers trained SFT with) and verl parquet (GRPO).

Work is done per video: the samples of one video (consecutive in key order) are one unit of work, in
which each distinct source frame is decoded and encoded once at each train size it is needed at
(JPEG DCT scaling decodes it directly at a reduced size when the target is much smaller). Records
are streamed to the tar writer and the exports as units finish, so memory holds a few videos' frames,
never a whole pool.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import webdataset as wds
from PIL import Image

from schemas.answer import GroundTruth
from schemas.cot import AcceptedSchema, DifficultySchema
from schemas.sample import POOLS, KeyframesSchema
from stages.core import revos
from stages.core.frames_root import source_of
from stages.core.io import read_table, write_json
from stages.core.lineage import write_lineage
from stages.core.progress import track
from stages.core.report import StageReport
from stages.core.runner import RunnerParams, map_ordered
from stages.params.shard import ShardParams
from stages.tasks import frame_keys, get_task, timestamp_tag
from stages.tasks.views import frame_view, task_ground_truth

log = logging.getLogger(__name__)
DATA_SOURCE = "vrsflow/revos"


UNITS_AHEAD = 2  # per worker: video units in flight (bounds the frames held in memory)
VERL_ROW_GROUP = 64  # verl parquet rows written at once


def frame_jpeg(root: Path, video: str, frame: str, size: int, quality: int) -> bytes:
    """One frame resized to size × size (the train resolution), JPEG-encoded.

    The decoder is asked for at least size × size (`Image.draft`): libjpeg then decodes at the largest
    1/2, 1/4 or 1/8 DCT scale that still covers the target in both dimensions (a 1280 × 720 frame for
    112² decodes at 320 × 180), and bicubic resizing takes it to size × size.
    """
    with Image.open(revos.frame_path(root, video, frame)) as img:
        img.draft("RGB", (size, size))
        img = img.convert("RGB").resize((size, size), Image.Resampling.BICUBIC)
    buffer = io.BytesIO()
    img.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def ground_truth(sample: dict, difficulty: dict | None, task: str | None = None,
                 description: str | None = None) -> GroundTruth:
    """The ground truth of a keyframes row for a task (default: the sample's first) at the task's view
    (`stages.tasks.views`; masks resized with nearest neighbour)."""
    name = task or str(list(sample["tasks"])[0])
    return task_ground_truth(sample, get_task(name), difficulty, description)


def _sample_record(job: tuple, encode=frame_jpeg, truth=ground_truth) -> dict:
    """One shard sample (frames + json) of one task; `encode` makes a frame's JPEG bytes, `truth` the
    ground truth (the unit of work passes caching versions of both)."""
    key, sample, extra, root, quality = job
    task = get_task(extra["task"])
    view = frame_view(sample, task)
    description = extra.get("description")
    record: dict = {"__key__": key}
    for i, frame in enumerate(view.frame_names):
        record[f"frame_{i}.jpg"] = encode(root, sample["video"], frame, view.size, quality)
    gt = truth(sample, extra.get("difficulty"), task.name, description)
    meta = {"sample_id": sample["sample_id"], "pool": sample["pool"], "video": sample["video"],
            "expression_id": sample["expression_id"], "expression": sample["text"], "type": sample["type"],
            "task": task.name, "timestamps": view.timestamps, "source": extra["source"],
            "question": task.question(sample["text"], view.timestamps, description or ""),
            "ground_truth": json.loads(gt.to_json()), **extra.get("sft", {})}
    record["json"] = json.dumps(meta, sort_keys=True).encode()
    return record


def _unit_records(unit: list[tuple[str, tuple]]) -> list[tuple[str, dict]]:
    """(pool, record) for each (pool, job) of one video, each distinct (frame, size, quality) decoded
    and encoded once."""
    encoded: dict[tuple, bytes] = {}

    def encode(root: Path, video: str, frame: str, size: int, quality: int) -> bytes:
        key = (video, frame, size, quality)
        if key not in encoded:
            encoded[key] = frame_jpeg(root, video, frame, size, quality)
        return encoded[key]

    truths: dict[tuple, GroundTruth] = {}

    def truth(sample: dict, difficulty: dict | None, task: str, description: str | None) -> GroundTruth:
        # the traces of one sample share it (masks decoded and resized once)
        key = (sample["pool"], sample["sample_id"], task, description)
        if key not in truths:
            truths[key] = ground_truth(sample, difficulty, task, description)
        return truths[key]

    return [(pool, _sample_record(job, encode, truth)) for pool, job in unit]


def video_units(jobs: list[tuple]) -> list[list[tuple]]:
    """Consecutive jobs of the same video grouped (sample ids start with the video, so a video's
    samples are consecutive in key order); the order of records is kept."""
    units: list[list[tuple]] = []
    for job in jobs:
        if units and units[-1][0][1]["video"] == job[1]["video"]:
            units[-1].append(job)
        else:
            units.append([job])
    return units


def merged_units(jobs_by_pool: dict[str, list[tuple]]) -> list[list[tuple[str, tuple]]]:
    """One unit of (pool, job) per video across the pools (SFT and GRPO samples share training videos),
    each pool's jobs still in their order: repeatedly the smallest video at the head of any pool, with
    that video's run of jobs from every pool whose head it is."""
    queues = {pool: deque(video_units(jobs)) for pool, jobs in jobs_by_pool.items()}
    units: list[list[tuple[str, tuple]]] = []
    while any(queues.values()):
        video = min(q[0][0][1]["video"] for q in queues.values() if q)
        unit = []
        for pool, queue in queues.items():
            if queue and queue[0][0][1]["video"] == video:
                unit.extend((pool, job) for job in queue.popleft())
        units.append(unit)
    return units


def _imap_units(units: list[list[tuple]], runner: RunnerParams) -> Iterator[list[tuple[str, dict]]]:
    """`_unit_records` of each unit, in order, with at most UNITS_AHEAD × workers units in flight."""
    if runner.kind == "threads" and len(units) > 1:
        ahead = max(1, runner.workers) * UNITS_AHEAD
        with ThreadPoolExecutor(max_workers=max(1, runner.workers)) as pool:
            pending: deque = deque()
            for unit in units:
                pending.append(pool.submit(_unit_records, unit))
                if len(pending) >= ahead:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        return
    if runner.kind == "dask" and len(units) > 1:  # one cluster per window of units
        window = max(1, runner.workers) * 32
        for start in range(0, len(units), window):
            yield from map_ordered(_unit_records, units[start:start + window], runner)
        return
    for unit in units:
        yield _unit_records(unit)


def write_shards(params: ShardParams, data_root: Path, keyframes_dir: Path, filter_dir: Path, difficulty_dir: Path,
                 out_dir: Path, runner: RunnerParams | None = None, sources: tuple[str, ...] = ()) -> StageReport:
    """Write `out_dir/{sft,grpo,eval}/shard-NNNNNN.tar`, `manifest.json` and the exports.

    Args:
        params: the `shard` block.
        data_root: ReVOS-layout root (the JPEG frames).
        keyframes_dir, filter_dir, difficulty_dir: upstream stage folders.
        out_dir: `data/shards`.
        runner: where frames are resized and encoded.
        sources: the names of `data.sources`: each sample's meta and the manifest name its source (`root` for
            data.root's rows; `stages.core.frames_root.source_of`), the manifest counts per source.
    """
    out_dir = Path(out_dir)
    difficulty = read_table(Path(difficulty_dir) / "scores.parquet", DifficultySchema).set_index("sample_id")
    accepted = read_table(Path(filter_dir) / "accepted.parquet", AcceptedSchema)
    descriptions = _descriptions(accepted)
    jobs_by_pool: dict[str, list[tuple]] = {}
    for pool in POOLS:
        samples = read_table(Path(keyframes_dir) / f"{pool}.parquet", KeyframesSchema)
        by_id = {s["sample_id"]: s for s in samples.to_dict("records")}
        jobs = []
        if pool == "sft":
            for trace in accepted.sort_values(["sample_id", "trace_index"]).to_dict("records"):
                sample = by_id.get(trace["sample_id"])
                if sample is None:
                    continue
                sft = {"response": trace["response"], "template_id": trace["template_id"], "teacher": trace["teacher"]}
                key = f"{trace['sample_id']}_t{trace['trace_index']}"
                extra = {"sft": sft, "task": trace["task"], "difficulty": _row(difficulty, sample["sample_id"]),
                         "source": source_of(sample["video"], sources),
                         "description": _description(descriptions, sample["sample_id"], trace["task"])}
                jobs.append((key, sample, extra, Path(data_root), params.jpeg_quality))
        else:
            for sample in sorted(by_id.values(), key=lambda s: s["sample_id"]):
                tasks = [str(t) for t in sample["tasks"]]
                for task in tasks:  # the sample stage gives GRPO / eval samples one task each
                    key = sample["sample_id"] if len(tasks) == 1 else f"{sample['sample_id']}_{task}"
                    extra = {"task": task, "difficulty": _row(difficulty, sample["sample_id"]),
                             "source": source_of(sample["video"], sources),
                             "description": _description(descriptions, sample["sample_id"], task)}
                    jobs.append((key, sample, extra, Path(data_root), params.jpeg_quality))
        jobs_by_pool[pool] = jobs
    exports = out_dir / "exports"
    writers = {pool: _PoolWriter(out_dir / pool, params.samples_per_shard) for pool in POOLS}
    exporters: list = []
    if params.export_sharegpt:
        exporters.append(_ShareGptWriter(exports / "sharegpt"))
        writers["sft"].sinks.append(exporters[-1].add)
    if params.export_verl:
        for pool in ("grpo", "eval"):
            exporters.append(_VerlWriter(exports / "verl" / f"{pool}.parquet"))
            writers[pool].sinks.append(exporters[-1].add)
    units = merged_units(jobs_by_pool)
    for unit in track(_imap_units(units, runner or RunnerParams(kind="serial")), total=len(units), desc="shard"):
        for pool, record in unit:
            writers[pool].add(record)
    manifest = {pool: writer.close() for pool, writer in writers.items()}
    for exporter in exporters:
        exporter.close()
    write_json(out_dir / "manifest.json", manifest)
    counts = {pool: entry["count"] for pool, entry in manifest.items()}
    inputs = {"keyframes": Path(keyframes_dir), "filter": Path(filter_dir), "difficulty": Path(difficulty_dir)}
    write_lineage(out_dir, "shard", params, inputs=inputs,
                  counts=counts, code_modules=["stages.shard", "schemas.answer"],
                  extra={"shards": {p: {s["name"]: s["sha256"] for s in e["shards"]} for p, e in manifest.items()}})
    table = pd.DataFrame([{"pool": p, "shard": s["name"], "samples": s["count"], "bytes": s["bytes"]}
                          for p, e in manifest.items() for s in e["shards"]])
    metrics = {f"{p}.samples": c for p, c in counts.items()}
    metrics.update({f"{p}.shards": len(e["shards"]) for p, e in manifest.items()})
    metrics.update({f"{p}.source.{s}": n for p, e in manifest.items() for s, n in e["sources"].items()})
    per_source = pd.DataFrame([{"pool": p, "source": s, "samples": n} for p, e in manifest.items()
                               for s, n in e["sources"].items()], columns=["pool", "source", "samples"])
    return StageReport("shard", metrics=dict(sorted(metrics.items())),
                       tables={"shards": table, "samples per source": per_source})


def _descriptions(accepted: pd.DataFrame) -> dict[tuple[str, str], str]:
    """(sample id, task) → the first accepted trace text (the VDG descriptions other tasks are given)."""
    out: dict[tuple[str, str], str] = {}
    for trace in accepted.sort_values(["sample_id", "trace_index"]).to_dict("records"):
        out.setdefault((trace["sample_id"], trace["task"]), trace["text"].strip())
    return out


def _description(descriptions: dict[tuple[str, str], str], sample_id: str, task: str) -> str | None:
    """The description a task's sample is given: the accepted trace of the first task it needs, if any."""
    for needed in get_task(task).needs_tasks:
        if (sample_id, needed) in descriptions:
            return descriptions[(sample_id, needed)]
    return None


def _row(table: pd.DataFrame, sample_id: str) -> dict | None:
    return table.loc[sample_id].to_dict() if sample_id in table.index else None


class _PoolWriter:
    """Records streamed into `folder/shard-NNNNNN.tar` (per_shard each) and into each of `sinks`."""

    def __init__(self, folder: Path, per_shard: int) -> None:
        self.folder = folder
        self.per_shard = per_shard
        self.sinks: list = []
        self.count = 0
        self.sources: dict[str, int] = {}
        self.sink: wds.ShardWriter | None = None
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("shard-*.tar"):
            old.unlink()  # outputs are rewritten whole

    def add(self, record: dict) -> None:
        if self.sink is None:  # no tar at all for an empty pool
            # mtime 0 and a fixed owner: same inputs → byte-identical tars
            self.sink = wds.ShardWriter(str(self.folder / "shard-%06d.tar"), maxcount=self.per_shard, verbose=0,
                                        mtime=0.0, user="vrsflow", group="vrsflow")
        self.sink.write(record)
        for add in self.sinks:
            add(record)
        self.count += 1
        source = json.loads(record["json"])["source"]
        self.sources[source] = self.sources.get(source, 0) + 1

    def close(self) -> dict:
        """The pool's manifest entry: count, count per source, and name, bytes, sha256 and count of each tar."""
        if self.sink is not None:
            self.sink.close()
        shards = []
        for i, path in enumerate(sorted(self.folder.glob("shard-*.tar"))):
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):  # noqa: B023 - consumed in this iteration
                    digest.update(block)
            shards.append({"name": path.name, "bytes": path.stat().st_size, "sha256": digest.hexdigest(),
                           "count": min(self.per_shard, self.count - i * self.per_shard)})
        return {"count": self.count, "sources": dict(sorted(self.sources.items())), "shards": shards}


def user_text(meta: dict, image_token: str) -> str:
    """The question as one string with an image placeholder after each timestamp (LLaMA-Factory, verl)."""
    return "".join(f"{timestamp_tag(t)}{image_token}" for t in meta["timestamps"]) + "\n" + meta["question"]


def sharegpt_row(record: dict, image_paths: list[str]) -> dict:
    """One LLaMA-Factory ShareGPT entry (messages + images)."""
    meta = json.loads(record["json"])
    return {"messages": [{"role": "user", "content": user_text(meta, "<image>")},
                         {"role": "assistant", "content": meta["response"]}],
            "images": image_paths}


class _ShareGptWriter:
    """LLaMA-Factory export streamed: each record's images written as it comes, the rows kept (text only)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.images = folder / "images"
        self.images.mkdir(parents=True, exist_ok=True)
        self.rows: list[dict] = []

    def add(self, record: dict) -> None:
        paths = []
        for name in frame_keys(record):
            path = self.images / f"{record['__key__']}_{name.split('.')[0]}.jpg"
            path.write_bytes(record[name])
            paths.append(f"images/{path.name}")
        self.rows.append(sharegpt_row(record, paths))

    def close(self) -> None:
        write_json(self.folder / "sft.json", self.rows)
        write_json(self.folder / "dataset_info.json", {"vrsflow_sft": {
            "file_name": "sft.json", "formatting": "sharegpt",
            "columns": {"messages": "messages", "images": "images"},
            "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}}})


def export_sharegpt(records: Iterable[dict], folder: Path) -> None:
    """`folder/sft.json` + `folder/images/<key>_<i>.jpg`; register it in LLaMA-Factory's dataset_info.json."""
    writer = _ShareGptWriter(folder)
    for record in records:
        writer.add(record)
    writer.close()


def verl_row(record: dict, index: int) -> dict:
    """One verl RL row: chat prompt with one <image> per frame, images, rule reward with ground truth."""
    meta = json.loads(record["json"])
    frames = [record[k] for k in frame_keys(record)]
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": user_text(meta, "<image>")}],
        "images": [{"bytes": b} for b in frames],
        "ability": "video_reasoning_segmentation",
        "reward_model": {"style": "rule", "ground_truth": json.dumps(meta["ground_truth"], sort_keys=True)},
        "extra_info": {"index": index, "sample_id": meta["sample_id"], "split": meta["pool"],
                       "expression": meta["expression"]},
    }


class _VerlWriter:
    """verl parquet streamed in row groups of VERL_ROW_GROUP rows (the image bytes of one group in memory)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[dict] = []
        self.index = 0
        self.writer: pq.ParquetWriter | None = None

    def add(self, record: dict) -> None:
        self.rows.append(verl_row(record, self.index))
        self.index += 1
        if len(self.rows) >= VERL_ROW_GROUP:
            self._flush()

    def _flush(self) -> None:
        if not self.rows:
            return
        if self.writer is None:
            table = pa.Table.from_pylist(self.rows)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.writer = pq.ParquetWriter(self.path, table.schema)
        else:
            table = pa.Table.from_pylist(self.rows, schema=self.writer.schema)
        self.writer.write_table(table)
        self.rows = []

    def close(self) -> None:
        self._flush()
        if self.writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table({"data_source": pa.array([], pa.string())}), self.path)
        else:
            self.writer.close()


def export_verl(records: Iterable[dict], path: Path) -> None:
    """verl parquet (as `examples/data_preprocess/*.py` write it)."""
    writer = _VerlWriter(path)
    for record in records:
        writer.add(record)
    writer.close()
