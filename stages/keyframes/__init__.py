"""`keyframes` stage: per sample, the keyframe, N sampled frames and geometry at train resolution.

`keyframes.frames`: anchor draws the keyframe over the video and shows N frames around it (the papers);
uniform shows the evaluation's spread of the video and draws the keyframe, its top-k and the AKS candidates
among those shown frames only (docs/sampling.md).

Areas and boxes come from ingest's tracks table (computed on RLEs, no decoding). The union area of a
multi-object target and the union masks need the RLEs of the sampled targets, read from ingest's mask
table (`masks.parquet`, one row group at a time, only the anno_ids of sampled expressions are kept;
mask_dict.json itself is parsed by ingest only). Only the keyframe mask of each object is ever decoded,
for its KTG point. A target empty in every frame is quarantined.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from pycocotools import mask as mask_utils

from schemas.index import QuarantineSchema, TracksSchema, VideosSchema
from schemas.sample import POOLS, KeyframesSchema, SampleSchema
from stages.core import mask_table, revos, rle
from stages.core.frame_spread import spread_frames
from stages.core.io import derive_seed, read_table, write_table
from stages.core.lineage import write_lineage
from stages.core.report import StageReport
from stages.core.runner import RunnerParams, map_ordered
from stages.keyframes.frames import (
    frames_and_keyframe,
    inscribed_circle_centre,
    sample_frames,
    scale_box,
)
from stages.params.keyframes import KeyframesParams

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Job:
    sample: dict
    video: dict
    areas: np.ndarray  # (K, T) per-object areas
    boxes: np.ndarray  # (K, T, 4) per-object boxes, NaN when absent
    rles: list[list[dict | None]]  # K × T
    params: KeyframesParams
    seed: int


def select_keyframes(params: KeyframesParams, seed: int, data_root: Path, index_dir: Path, sample_dir: Path,
                     out_dir: Path, runner: RunnerParams | None = None) -> StageReport:
    """Write `out_dir/{sft,grpo,eval}.parquet` (KeyframesSchema), `quarantine.parquet` and lineage.

    Args:
        params: the `keyframes` block.
        seed: global seed; each sample's draws use derive_seed(seed, "keyframes", sample_id).
        data_root: the ReVOS-layout root (named as the source of empty masks in the quarantine table).
        index_dir: ingest's tables (videos, tracks, masks).
        sample_dir: the sample stage's pools.
        out_dir: `data/keyframes`.
        runner: where per-sample work runs.

    Returns:
        metrics: rows per pool, `<pool>.short_videos` (T < N: all frames kept), `<pool>.aks_B`,
        `quarantined`; the quarantine reasons as a table.

    Raises:
        ValueError: samples whose video or anno_ids are missing from the index (tracks or masks table).
    """
    data_root, index_dir, sample_dir, out_dir = map(Path, (data_root, index_dir, sample_dir, out_dir))
    pools = {p: read_table(sample_dir / f"{p}.parquet", SampleSchema) for p in POOLS}
    videos = read_table(index_dir / "videos.parquet", VideosSchema).set_index("video").to_dict("index")
    tracks = read_table(index_dir / "tracks.parquet", TracksSchema)
    wanted = {int(a) for pool in pools.values() for ids in pool["anno_ids"] for a in ids}
    rles = _read_rles(index_dir / mask_table.FILE, wanted)
    geometry = _geometry(tracks[tracks["anno_id"].isin(wanted)])

    quarantine: list[dict] = []  # write_table and write_lineage make out_dir
    counts: dict[str, int] = {}
    for pool_name, pool in pools.items():
        jobs = [_job(row, videos, geometry, rles, params, seed) for row in pool.to_dict("records")]
        results = map_ordered(_process, jobs, runner or RunnerParams(kind="serial"), desc=f"keyframes {pool_name}")
        rows = _balance_aks([r for r in results if "reason" not in r], seed)
        source = str(data_root / revos.MASK_DICT)  # where the empty masks are
        quarantine += [{"stage": "keyframes", "kind": "sample", "item": r["sample_id"], "file": source,
                        "reason": r["reason"]} for r in results if "reason" in r]
        table = pd.DataFrame(rows, columns=list(KeyframesSchema.to_schema().columns))
        write_table(table, KeyframesSchema, out_dir / f"{pool_name}.parquet")
        counts[pool_name] = len(table)
        counts[f"{pool_name}.short_videos"] = int((table["n_video_frames"] < params.n_frames).sum())
        counts[f"{pool_name}.aks_B"] = int((table["aks_option"] == "B").sum())
    # `source` is ingest's column (several training sources): the sample id already names its source here
    columns = [c for c in QuarantineSchema.to_schema().columns if c != "source"]
    write_table(pd.DataFrame(quarantine, columns=columns), QuarantineSchema, out_dir / "quarantine.parquet")
    counts["quarantined"] = len(quarantine)
    write_lineage(out_dir, "keyframes", params, inputs={"index": index_dir, "sample": sample_dir}, seed=seed,
                  counts=counts, code_modules=["stages.keyframes", "stages.core.mask_table", "schemas.sample"])
    reasons = pd.DataFrame(quarantine, columns=["item", "reason"]) if quarantine else pd.DataFrame(
        columns=["item", "reason"])
    return StageReport("keyframes", metrics=dict(sorted(counts.items())),
                       tables={"quarantined samples": reasons[["item", "reason"]]})


def _read_rles(path: Path, wanted: set[int]) -> dict[int, list[dict | None]]:
    """RLEs of the wanted anno_ids from ingest's mask table (the rest is skipped, row group by row group)."""
    found = mask_table.read_masks(path, wanted)
    missing = wanted - set(found)
    if missing:
        raise ValueError(f"{path}: anno_ids {sorted(missing)[:10]} missing (re-run ingest?)")
    return found


def _geometry(tracks: pd.DataFrame) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """anno_id → (areas (T,), boxes (T, 4)) from the tracks table (one sort, then array slices)."""
    if tracks.empty:  # only no-target samples
        return {}
    ordered = tracks.sort_values(["anno_id", "frame_idx"])
    annos = ordered["anno_id"].to_numpy()
    areas = ordered["area"].to_numpy()
    boxes = ordered[["x1", "y1", "x2", "y2"]].to_numpy()  # TracksSchema: float columns
    starts = np.flatnonzero(np.r_[True, annos[1:] != annos[:-1]])
    ends = np.r_[starts[1:], len(annos)]
    return {int(annos[s]): (areas[s:e], boxes[s:e]) for s, e in zip(starts, ends, strict=True)}


def _job(row: dict, videos: dict, geometry: dict, rles: dict, params: KeyframesParams, seed: int) -> _Job:
    if row["video"] not in videos:
        raise ValueError(f"sample {row['sample_id']}: video {row['video']} is not in the videos table (stale index?)")
    video = videos[row["video"]]
    annos = [int(a) for a in row["anno_ids"]]
    T = int(video["n_frames"])
    for a in annos:
        if a not in geometry or len(geometry[a][0]) != T:
            have = len(geometry[a][0]) if a in geometry else 0
            raise ValueError(f"{row['expression_id']}: anno_id {a} has {have} track rows, the video has {T} frames "
                             "(tracks table out of date?)")
        if len(rles[a]) != T:
            raise ValueError(f"{row['expression_id']}: anno_id {a} has {len(rles[a])} RLEs in {mask_table.FILE}, "
                             f"the video has {T} frames")
    areas = np.array([geometry[a][0] for a in annos]).reshape(len(annos), T)
    boxes = np.array([geometry[a][1] for a in annos]).reshape(len(annos), T, 4)
    row_seed = derive_seed(seed, "keyframes", row["sample_id"])
    return _Job(row, video, areas, boxes, [rles[a] for a in annos], params, row_seed)


def _process(job: _Job) -> dict:
    """One sample → one KeyframesSchema row, or {"sample_id", "reason"} when it must be quarantined."""
    sample, video, params = job.sample, job.video, job.params
    H, W, T, S = int(video["height"]), int(video["width"]), int(video["n_frames"]), params.train_size
    if not job.rles:  # a no-target expression (evaluation keeps them; training only when asked)
        return _no_target_row(job)
    if len(job.rles) == 1:  # the tracks' areas are already the union's; no RLE work per frame
        union_areas = job.areas[0].astype(float)
    else:
        union_areas = np.asarray([mask_utils.area(rle.union([obj[t] for obj in job.rles], H, W))
                                  for t in range(T)], dtype=float)
    rng = np.random.default_rng(job.seed)
    try:
        indices, key_idx, topk = frames_and_keyframe(union_areas, params.n_frames, params.top_k, params.mode,
                                                     params.frames, rng)
    except ValueError as err:
        annos = [int(a) for a in sample["anno_ids"]]
        return {"sample_id": sample["sample_id"],
                "reason": f"{sample['expression_id']}: {err} of {sample['video']} ({T} frames, anno_ids {annos})"}
    unions = {t: rle.union([obj[t] for obj in job.rles], H, W) for t in indices}
    area_scale = (S * S) / (H * W)
    boxes = [[scale_box(job.boxes[k, t], W, H, S) for k in range(len(job.rles))] for t in indices]
    areas = [[float(job.areas[k, t]) * area_scale for k in range(len(job.rles))] for t in indices]
    points = []
    for obj in job.rles:
        centre = inscribed_circle_centre(rle.decode(obj[key_idx], H, W))
        points.append(None if centre is None else [centre[0] * S / W, centre[1] * S / H])
    # uniform: the AKS candidates are shown frames too, as the evaluation's candidates (its selections) always are
    zero = [int(t) for t in (indices if params.frames == "uniform" else range(T)) if union_areas[t] == 0]
    # AKS candidates for both options are chosen here (RCoT-Seg: option A is the largest-area frame, option B
    # a zero-area frame drawn with the per-sample seed); which option a sample gets is decided per pool by
    # `_balance_aks`, so that A:B is 1:1 exactly over the samples that have both
    aks_a = int(topk[0])
    aks_b = int(rng.choice(zero)) if zero else None

    def candidate(t: int) -> dict:
        """The candidate frame's file (ingest's frame list) and geometry at train size."""
        mask = rle.union([obj[t] for obj in job.rles], H, W)
        return {"aks_frame_idx": t, "aks_frame_name": str(video["frames"][t]),
                "aks_boxes": [scale_box(job.boxes[k, t], W, H, S) for k in range(len(job.rles))],
                "aks_areas": [float(job.areas[k, t]) * (S * S) / (H * W) for k in range(len(job.rles))],
                "aks_union_mask": json.dumps(rle.to_json(mask), sort_keys=True)}
    return {
        **{k: sample[k] for k in SampleSchema.to_schema().columns},
        "height": H, "width": W, "n_video_frames": T,
        "frame_indices": indices, "frame_names": [video["frames"][t] for t in indices], "timestamps": indices,
        "keyframe_pos": indices.index(key_idx), "keyframe_idx": key_idx, "keyframe_timestamp": key_idx,
        "keyframe_mode": params.mode, "frame_spread": params.frames, "topk_indices": topk,
        "boxes": boxes, "areas": areas, "union_areas": [float(union_areas[t]) * area_scale for t in indices],
        "union_masks": [json.dumps(rle.to_json(unions[t]), sort_keys=True) for t in indices],
        "ktg_points": points, "aks_valid": topk, "aks_invalid": zero, "aks_option": "A", **candidate(aks_a),
        "aks_frame_b": None if aks_b is None else candidate(aks_b), "train_size": S,
        "video_union_areas": [float(a) for a in union_areas],
        "keyframe_size": params.keyframe_size or S, "seed": job.seed,
    }


def _balance_aks(rows: list[dict], seed: int) -> list[dict]:
    """RCoT-Seg's AKS task asks A (a valid keyframe) and B (a zero-area frame) 1:1. Samples with both
    kinds of frame are ranked by a seeded hash of their id; the first half (rounded down) gets B and
    its recorded zero-area frame. Samples without a zero-area frame can only be A; no-target samples
    only B. Order-independent: the ranking depends on ids, not on row order."""
    eligible = sorted((derive_seed(seed, "keyframes", "aks", r["sample_id"]), i)
                      for i, r in enumerate(rows) if r["aks_frame_b"] is not None and r["aks_option"] == "A")
    for _, i in eligible[: len(eligible) // 2]:
        rows[i] = {**rows[i], "aks_option": "B", **rows[i]["aks_frame_b"]}
    return [{k: v for k, v in r.items() if k != "aks_frame_b"} for r in rows]


def _no_target_row(job: _Job) -> dict:
    """A no-target sample (evaluation; training pools only when asked): frames around the middle frame (anchor)
    or the evaluation's spread with its middle shown frame as the keyframe (uniform), no geometry, every frame
    a zero-area (AKS option B) frame."""
    sample, video, params = job.sample, job.video, job.params
    T, H, W = int(video["n_frames"]), int(video["height"]), int(video["width"])
    if params.frames == "uniform":
        indices = spread_frames(T, params.n_frames)
        key_idx, invalid = indices[len(indices) // 2], list(indices)
    else:
        key_idx, invalid = T // 2, list(range(T))
        indices = sample_frames(T, params.n_frames, key_idx)
    empty = json.dumps(rle.to_json(rle.union([], H, W)), sort_keys=True)
    return {
        **{k: sample[k] for k in SampleSchema.to_schema().columns},
        "height": H, "width": W, "n_video_frames": T,
        "frame_indices": indices, "frame_names": [video["frames"][t] for t in indices], "timestamps": indices,
        "keyframe_pos": indices.index(key_idx), "keyframe_idx": key_idx, "keyframe_timestamp": key_idx,
        "keyframe_mode": params.mode, "frame_spread": params.frames, "topk_indices": [], "boxes": [[] for _ in indices],
        "areas": [[] for _ in indices], "union_areas": [0.0 for _ in indices], "union_masks": [empty] * len(indices),
        "ktg_points": [], "aks_valid": [], "aks_invalid": invalid, "aks_option": "B",
        "aks_frame_idx": key_idx, "aks_frame_name": str(video["frames"][key_idx]), "aks_boxes": [], "aks_areas": [],
        "aks_union_mask": empty, "aks_frame_b": None, "train_size": params.train_size,
        "video_union_areas": [0.0] * T,
        "keyframe_size": params.keyframe_size or params.train_size, "seed": job.seed,
    }
