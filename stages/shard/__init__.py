"""`shard` stage: WebDataset tars for SFT, GRPO and evaluation, a manifest, and exports for other tools.

Each sample is `<key>.frame_<i>.jpg` (the N sampled frames at train size) + `<key>.json` (question,
timestamps, ground truth; the accepted response for SFT). Keys are sample ids without dots. Tars are
byte-identical for the same inputs (fixed member mtime, owner and order). Exports: LLaMA-Factory
ShareGPT JSON with image files (what the papers trained SFT with) and verl parquet (GRPO).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import webdataset as wds
from PIL import Image

from schemas.answer import GroundTruth
from schemas.cot import AcceptedSchema, DifficultySchema
from schemas.sample import POOLS, KeyframesSchema
from stages.core import revos, rle
from stages.core.io import read_table, write_json
from stages.core.lineage import write_lineage
from stages.core.params import ShardParams
from stages.core.report import StageReport
from stages.core.runner import RunnerParams, map_ordered
from stages.teacher.prompts import build_question, timestamp_tag

log = logging.getLogger(__name__)
DATA_SOURCE = "vrsflow/revos"


def frame_jpeg(root: Path, video: str, frame: str, size: int, quality: int) -> bytes:
    """One frame resized to size × size (the train resolution), JPEG-encoded."""
    with Image.open(revos.frame_path(root, video, frame)) as img:
        img = img.convert("RGB").resize((size, size), Image.Resampling.BICUBIC)
    buffer = io.BytesIO()
    img.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def ground_truth(sample: dict, difficulty: dict | None) -> GroundTruth:
    """The ground truth of a keyframes row at train resolution (masks resized with nearest neighbour)."""
    size = int(sample["train_size"])
    masks = []
    for text in sample["union_masks"]:
        mask = rle.decode(json.loads(text), int(sample["height"]), int(sample["width"]))
        small = np.asarray(Image.fromarray(mask.astype(np.uint8) * 255).resize((size, size), Image.Resampling.NEAREST))
        masks.append(rle.encode(small > 127))
    return GroundTruth(
        timestamps=[int(t) for t in sample["timestamps"]], image_size=[size, size],
        boxes=[[None if b is None else [float(v) for v in b] for b in frame] for frame in sample["boxes"]],
        areas=[[float(a) for a in frame] for frame in sample["areas"]],
        union_areas=[float(a) for a in sample["union_areas"]], masks=masks,
        keyframe_timestamp=int(sample["keyframe_timestamp"]),
        points=[None if p is None else [float(v) for v in p] for p in sample["ktg_points"]],
        aks_option=sample["aks_option"],
        difficulty=None if difficulty is None else float(difficulty["difficulty"]),
        token_budget=None if difficulty is None else int(difficulty["token_budget"]),
    )


def _sample_record(job: tuple) -> dict:
    """One shard sample (frames + json); runs in the runner's workers."""
    key, sample, extra, root, quality = job
    size = int(sample["train_size"])
    timestamps = [int(t) for t in sample["timestamps"]]
    record: dict = {"__key__": key}
    for i, frame in enumerate(sample["frame_names"]):
        record[f"frame_{i}.jpg"] = frame_jpeg(root, sample["video"], frame, size, quality)
    meta = {"sample_id": sample["sample_id"], "pool": sample["pool"], "video": sample["video"],
            "expression_id": sample["expression_id"], "expression": sample["text"], "type": sample["type"],
            "timestamps": timestamps, "question": build_question(sample["text"], timestamps),
            "ground_truth": json.loads(ground_truth(sample, extra.get("difficulty")).to_json()), **extra.get("sft", {})}
    record["json"] = json.dumps(meta, sort_keys=True).encode()
    return record


def write_shards(params: ShardParams, data_root: Path, keyframes_dir: Path, filter_dir: Path, difficulty_dir: Path,
                 out_dir: Path, runner: RunnerParams | None = None) -> StageReport:
    """Write `out_dir/{sft,grpo,eval}/shard-NNNNNN.tar`, `manifest.json` and the exports.

    Args:
        params: the `shard` block.
        data_root: ReVOS-layout root (the JPEG frames).
        keyframes_dir, filter_dir, difficulty_dir: upstream stage folders.
        out_dir: `data/shards`.
        runner: where frames are resized and encoded.
    """
    out_dir = Path(out_dir)
    difficulty = read_table(Path(difficulty_dir) / "scores.parquet", DifficultySchema).set_index("sample_id")
    accepted = read_table(Path(filter_dir) / "accepted.parquet", AcceptedSchema)
    manifest: dict[str, dict] = {}
    records_by_pool: dict[str, list[dict]] = {}
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
                jobs.append((key, sample, {"sft": sft, "difficulty": _row(difficulty, sample["sample_id"])},
                             Path(data_root), params.jpeg_quality))
        else:
            for sample in sorted(by_id.values(), key=lambda s: s["sample_id"]):
                jobs.append((sample["sample_id"], sample, {"difficulty": _row(difficulty, sample["sample_id"])},
                             Path(data_root), params.jpeg_quality))
        records = map_ordered(_sample_record, jobs, runner or RunnerParams(kind="serial"), desc=f"shard {pool}")
        records_by_pool[pool] = records
        manifest[pool] = _write_pool(records, out_dir / pool, params.samples_per_shard)
    write_json(out_dir / "manifest.json", manifest)
    exports = out_dir / "exports"
    if params.export_sharegpt:
        export_sharegpt(records_by_pool["sft"], exports / "sharegpt")
    if params.export_verl:
        for pool in ("grpo", "eval"):
            export_verl(records_by_pool[pool], exports / "verl" / f"{pool}.parquet")
    counts = {pool: entry["count"] for pool, entry in manifest.items()}
    inputs = {"keyframes": Path(keyframes_dir), "filter": Path(filter_dir), "difficulty": Path(difficulty_dir)}
    write_lineage(out_dir, "shard", params, inputs=inputs,
                  counts=counts, code_modules=["stages.shard", "schemas.answer"],
                  extra={"shards": {p: {s["name"]: s["sha256"] for s in e["shards"]} for p, e in manifest.items()}})
    table = pd.DataFrame([{"pool": p, "shard": s["name"], "samples": s["count"], "bytes": s["bytes"]}
                          for p, e in manifest.items() for s in e["shards"]])
    metrics = {f"{p}.samples": c for p, c in counts.items()}
    metrics.update({f"{p}.shards": len(e["shards"]) for p, e in manifest.items()})
    return StageReport("shard", metrics=dict(sorted(metrics.items())), tables={"shards": table})


def _row(table: pd.DataFrame, sample_id: str) -> dict | None:
    return table.loc[sample_id].to_dict() if sample_id in table.index else None


def _write_pool(records: list[dict], folder: Path, per_shard: int) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("shard-*.tar"):
        old.unlink()  # outputs are rewritten whole
    if records:
        # mtime 0 and a fixed owner: same inputs → byte-identical tars
        with wds.ShardWriter(str(folder / "shard-%06d.tar"), maxcount=per_shard, verbose=0, mtime=0.0,
                             user="vrsflow", group="vrsflow") as sink:
            for record in records:
                sink.write(record)
    shards = []
    for path in sorted(folder.glob("shard-*.tar")):
        data = path.read_bytes()
        shards.append({"name": path.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                       "count": len(records[len(shards) * per_shard:(len(shards) + 1) * per_shard])})
    return {"count": len(records), "shards": shards}


def user_text(meta: dict, image_token: str) -> str:
    """The question as one string with an image placeholder after each timestamp (LLaMA-Factory, verl)."""
    return "".join(f"{timestamp_tag(t)}{image_token}" for t in meta["timestamps"]) + "\n" + meta["question"]


def sharegpt_row(record: dict, image_paths: list[str]) -> dict:
    """One LLaMA-Factory ShareGPT entry (messages + images)."""
    meta = json.loads(record["json"])
    return {"messages": [{"role": "user", "content": user_text(meta, "<image>")},
                         {"role": "assistant", "content": meta["response"]}],
            "images": image_paths}


def export_sharegpt(records: list[dict], folder: Path) -> None:
    """`folder/sft.json` + `folder/images/<key>_<i>.jpg`; register it in LLaMA-Factory's dataset_info.json."""
    images = folder / "images"
    images.mkdir(parents=True, exist_ok=True)
    rows = []
    for record in records:
        paths = []
        for name in sorted(k for k in record if k.startswith("frame_")):
            path = images / f"{record['__key__']}_{name.split('.')[0]}.jpg"
            path.write_bytes(record[name])
            paths.append(f"images/{path.name}")
        rows.append(sharegpt_row(record, paths))
    write_json(folder / "sft.json", rows)
    write_json(folder / "dataset_info.json", {"vrsflow_sft": {
        "file_name": "sft.json", "formatting": "sharegpt",
        "columns": {"messages": "messages", "images": "images"},
        "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}}})


def verl_row(record: dict, index: int) -> dict:
    """One verl RL row: chat prompt with one <image> per frame, images, rule reward with ground truth."""
    meta = json.loads(record["json"])
    frames = [record[k] for k in sorted(k for k in record if k.startswith("frame_"))]
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": user_text(meta, "<image>")}],
        "images": [{"bytes": b} for b in frames],
        "ability": "video_reasoning_segmentation",
        "reward_model": {"style": "rule", "ground_truth": json.dumps(meta["ground_truth"], sort_keys=True)},
        "extra_info": {"index": index, "sample_id": meta["sample_id"], "split": meta["pool"],
                       "expression": meta["expression"]},
    }


def export_verl(records: list[dict], path: Path) -> None:
    """verl parquet (as `examples/data_preprocess/*.py` write it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [verl_row(r, i) for i, r in enumerate(records)]
    if not rows:
        pq.write_table(pa.table({"data_source": pa.array([], pa.string())}), path)
        return
    pq.write_table(pa.Table.from_pylist(rows), path)
