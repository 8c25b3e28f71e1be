"""`ingest` stage: any ReVOS-layout root → validated index tables in `data/index/`.

videos, expressions, tracks (per anno_id and frame: area and box computed on the RLE without decoding)
and quarantine. Memory stays bounded on the real dataset: `mask_dict.json` is streamed one anno_id at a
time; only the anno_ids used by expressions are indexed; the foreground check works on RLEs (merge and
intersect), never on decoded masks.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from pycocotools import mask as mask_utils

from schemas.index import ExpressionsSchema, QuarantineSchema, TracksSchema, VideosSchema
from stages.core import revos, rle
from stages.core.ids import expression_id
from stages.core.io import write_table
from stages.core.lineage import write_lineage
from stages.core.params import IngestParams
from stages.core.report import StageReport
from stages.core.runner import RunnerParams, map_ordered
from stages.ingest.checks import IngestError, Problems, check_expression, check_frame_names, check_jpeg, check_size

__all__ = ["IngestError", "ingest"]
log = logging.getLogger(__name__)
TYPE_NAMES = {0: "referring", 1: "reasoning", 2: "no_target"}


@dataclass
class _Video:
    key: str
    split: str
    vid_id: str
    height: int
    width: int
    frames: list[str]
    file: Path


@dataclass
class _Expression:
    video: str
    exp_id: str
    split: str
    text: str
    type_id: int
    obj_ids: list[int]
    anno_ids: list[int]
    file: Path


def ingest(params: IngestParams, root: Path, out_dir: Path, runner: RunnerParams | None = None) -> StageReport:
    """Index the ReVOS-layout dataset at `root` into `out_dir`.

    Args:
        params: the `ingest` block (strict mode, JPEG check depth, foreground tolerance).
        root: dataset root (JPEGImages/, mask_dict*.json, meta_expressions_*_.json).
        out_dir: where videos/expressions/tracks/quarantine.parquet and lineage.json go.
        runner: where the per-frame JPEG checks run (default: threads).

    Raises:
        IngestError: the first bad item, in strict mode (names file, item and problem).
    """
    root, out_dir = Path(root), Path(out_dir)
    problems = Problems(strict=params.strict)
    videos, expressions = _read_meta(root, problems)
    videos = _check_frames(root, videos, params, problems, runner or RunnerParams())
    expressions = [e for e in expressions if e.video in videos]
    tracks, fg_unions, bad_annos = _index_masks(root, videos, expressions, problems)
    expressions = _drop_bad_annos(expressions, bad_annos, problems)
    _check_foreground(root, videos, expressions, fg_unions, params, problems)
    return _write(root, out_dir, params, videos, expressions, tracks, problems)


def _read_meta(root: Path, problems: Problems) -> tuple[dict[str, _Video], list[_Expression]]:
    videos: dict[str, _Video] = {}
    expressions: list[_Expression] = []
    for split in revos.SPLITS:
        path = revos.meta_path(root, split)
        try:
            raw, duplicates = revos.load_meta(path)
        except revos.RevosFormatError as err:
            problems.add("file", path.name, path, str(err).removeprefix(f"{path}: "))
            continue
        for key in duplicates:
            problems.add("video" if key in raw else "expression", key, path,
                         "duplicate key in the JSON object (video key or expression id repeated)")
        for key, entry in raw.items():
            if not isinstance(entry, dict):
                problems.add("video", key, path, "video entry is not an object")
                continue
            if key in videos:
                problems.add("video", key, path, f"duplicate video key (also in {videos[key].file.name})")
                continue
            reason = check_size(entry) or check_frame_names(entry.get("frames"))
            if reason is None and not isinstance(entry.get("expressions"), dict):
                reason = "expressions must be an object keyed by expression id"
            if reason:
                problems.add("video", key, path, reason)
                continue
            videos[key] = _Video(key, split, str(entry.get("vid_id", key)), entry["height"], entry["width"],
                                 list(entry["frames"]), path)
            for exp_id, expression in entry["expressions"].items():
                reason = check_expression(expression)
                if reason:
                    problems.add("expression", expression_id(key, exp_id), path, reason)
                    continue
                expressions.append(_Expression(key, str(exp_id), split, expression["exp"], expression["type_id"],
                                               list(expression["obj_id"]), list(expression["anno_id"]), path))
    return videos, expressions


def _check_frames(root: Path, videos: dict[str, _Video], params: IngestParams, problems: Problems,
                  runner: RunnerParams) -> dict[str, _Video]:
    jobs = [(revos.frame_path(root, v.key, f), v.height, v.width, params.check_jpeg)
            for v in videos.values() for f in v.frames]
    reasons = map_ordered(_check_jpeg_job, jobs, runner, desc="ingest frames")
    bad_videos: set[str] = set()
    position = 0
    for video in videos.values():
        for frame in video.frames:
            reason = reasons[position]
            position += 1
            if reason and video.key not in bad_videos:
                problems.add("frame", f"{video.key}/{frame}", revos.frame_path(root, video.key, frame), reason)
                bad_videos.add(video.key)
    return {k: v for k, v in videos.items() if k not in bad_videos}


def _check_jpeg_job(job: tuple) -> str | None:
    return check_jpeg(*job)


def _index_masks(root: Path, videos: dict[str, _Video], expressions: list[_Expression],
                 problems: Problems) -> tuple[pd.DataFrame, dict[str, list[dict | None]], set[int]]:
    """Stream mask_dict.json once: per used anno_id, check it and compute areas and boxes; accumulate
    each video's per-frame union RLE for the foreground check."""
    path = Path(root) / revos.MASK_DICT
    video_of: dict[int, str] = {}
    for e in expressions:
        for anno in e.anno_ids:
            if video_of.setdefault(anno, e.video) != e.video:
                problems.add("anno", str(anno), revos.meta_path(root, e.split),
                             f"anno_id used by two videos ({video_of[anno]} and {e.video})")
    unions: dict[str, list[dict | None]] = {k: [None] * len(v.frames) for k, v in videos.items()}
    frames: dict[str, list] = defaultdict(list)
    bad: set[int] = set()
    seen: set[int] = set()
    try:
        items = revos.iter_json_object(path)
        for key, masks in items:
            try:
                anno = int(key)
            except ValueError:
                continue
            if anno not in video_of:
                continue  # unused anno_ids are fine (ReVOS shares one mask_dict across splits)
            seen.add(anno)
            video = videos[video_of[anno]]
            reason = _check_anno(masks, video)
            if reason:
                problems.add("anno", str(anno), path, f"{reason} (video {video.key})")
                bad.add(anno)
                continue
            try:
                areas, boxes = rle.areas_and_boxes(masks)
            except rle.RLEError as err:
                problems.add("anno", str(anno), path, f"{err} (video {video.key})")
                bad.add(anno)
                continue
            n = len(video.frames)
            frames["anno_id"].append(np.full(n, anno))
            frames["video"].append(np.full(n, video.key, dtype=object))
            frames["frame_idx"].append(np.arange(n))
            frames["frame"].append(np.asarray(video.frames, dtype=object))
            frames["area"].append(areas)
            frames["box"].append(boxes)
            union = unions[video.key]
            for t, m in enumerate(masks):
                if m is not None and areas[t] > 0:
                    union[t] = rle.to_coco(m) if union[t] is None else mask_utils.merge([union[t], rle.to_coco(m)])
    except revos.RevosFormatError as err:
        problems.add("file", revos.MASK_DICT, path, str(err).removeprefix(f"{path}: "))
        bad |= set(video_of)
    for anno in sorted(set(video_of) - seen - bad):
        bad.add(anno)
        problems.add("anno", str(anno), path, f"anno_id missing from mask_dict (video {video_of[anno]})")
    if frames["anno_id"]:
        box = np.concatenate(frames["box"])
        tracks = pd.DataFrame({
            "anno_id": np.concatenate(frames["anno_id"]), "video": np.concatenate(frames["video"]),
            "frame_idx": np.concatenate(frames["frame_idx"]), "frame": np.concatenate(frames["frame"]),
            "area": np.concatenate(frames["area"]),
            "x1": box[:, 0], "y1": box[:, 1], "x2": box[:, 2], "y2": box[:, 3],
        })
    else:
        columns = ["anno_id", "video", "frame_idx", "frame", "area", "x1", "y1", "x2", "y2"]
        tracks = pd.DataFrame({c: [] for c in columns})
    tracks = tracks[~tracks["anno_id"].isin(bad)].sort_values(["anno_id", "frame_idx"]).reset_index(drop=True)
    return tracks, unions, bad


def _check_anno(masks: object, video: _Video) -> str | None:
    if not isinstance(masks, list):
        return "mask list is not a list"
    if len(masks) != len(video.frames):
        return f"{len(masks)} masks for {len(video.frames)} frames"
    for t, m in enumerate(masks):
        if m is None:
            continue
        if not isinstance(m, dict) or "size" not in m or "counts" not in m:
            return f"frame {video.frames[t]}: not an RLE object"
        if list(m["size"]) != [video.height, video.width]:
            return f"frame {video.frames[t]}: RLE size {list(m['size'])} but the video is {video.height}x{video.width}"
    return None


def _drop_bad_annos(expressions: list[_Expression], bad: set[int], problems: Problems) -> list[_Expression]:
    kept = []
    for e in expressions:
        broken = sorted(set(e.anno_ids) & bad)
        if broken:
            problems.add("expression", expression_id(e.video, e.exp_id), e.file, f"uses bad anno_id(s) {broken}")
        else:
            kept.append(e)
    return kept


def _check_foreground(root: Path, videos: dict[str, _Video], expressions: list[_Expression],
                      unions: dict[str, list[dict | None]], params: IngestParams, problems: Problems) -> None:
    """mask_dict_foreground must equal the union of the masks of the video's expressions (RLE algebra)."""
    path = Path(root) / revos.FOREGROUND
    with_targets = {e.video for e in expressions if e.anno_ids}
    try:
        for key, entry in revos.iter_json_object(path):
            if key not in videos or key not in with_targets:
                continue
            video = videos[key]
            masks = entry.get("masks_rle") if isinstance(entry, dict) else None
            if not isinstance(masks, list) or len(masks) != len(video.frames):
                problems.add("video", key, path, "foreground masks_rle missing or not one per frame")
                continue
            for t, fg in enumerate(masks):
                reason = _foreground_mismatch(fg, unions[key][t], video, params.foreground_tolerance)
                if reason:
                    problems.add("frame", f"{key}/{video.frames[t]}", path, reason)
                    break
    except revos.RevosFormatError as err:
        problems.add("file", revos.FOREGROUND, path, str(err).removeprefix(f"{path}: "))


def _foreground_mismatch(fg: dict | None, union: dict | None, video: _Video, tolerance: float) -> str | None:
    if fg is not None and list(fg.get("size", [])) != [video.height, video.width]:
        return f"foreground RLE size {fg.get('size')} but the video is {video.height}x{video.width}"
    fg_area = 0 if fg is None else int(mask_utils.area(rle.to_coco(fg)))
    union_area = 0 if union is None else int(mask_utils.area(union))
    if fg_area == 0 and union_area == 0:
        return None
    inter = 0
    if fg_area and union_area:
        inter = int(mask_utils.area(mask_utils.merge([rle.to_coco(fg), union], intersect=True)))
    differing = fg_area + union_area - 2 * inter
    if differing > tolerance * video.height * video.width:
        return f"foreground differs from the union of the expressions' masks in {differing} pixels"
    return None


def _write(root: Path, out_dir: Path, params: IngestParams, videos: dict[str, _Video],
           expressions: list[_Expression], tracks: pd.DataFrame, problems: Problems) -> StageReport:
    out_dir.mkdir(parents=True, exist_ok=True)
    videos_df = pd.DataFrame([
        {"video": v.key, "vid_id": v.vid_id, "split": v.split, "height": v.height, "width": v.width,
         "n_frames": len(v.frames), "frames": v.frames} for v in sorted(videos.values(), key=lambda v: v.key)
    ], columns=["video", "vid_id", "split", "height", "width", "n_frames", "frames"])
    expressions_df = pd.DataFrame([
        {"expression_id": expression_id(e.video, e.exp_id), "video": e.video, "exp_id": e.exp_id, "split": e.split,
         "text": e.text, "type": TYPE_NAMES[e.type_id], "type_id": e.type_id, "obj_ids": e.obj_ids,
         "anno_ids": e.anno_ids, "n_instances": len(e.anno_ids)}
        for e in sorted(expressions, key=lambda e: (e.video, _natural(e.exp_id)))
    ], columns=["expression_id", "video", "exp_id", "split", "text", "type", "type_id", "obj_ids", "anno_ids",
                "n_instances"])
    used = {a for e in expressions for a in e.anno_ids}
    tracks = tracks[tracks["anno_id"].isin(used)].reset_index(drop=True)
    quarantine_df = pd.DataFrame(problems.rows, columns=["stage", "kind", "item", "file", "reason"])
    write_table(videos_df, VideosSchema, out_dir / "videos.parquet")
    write_table(expressions_df, ExpressionsSchema, out_dir / "expressions.parquet")
    write_table(tracks, TracksSchema, out_dir / "tracks.parquet")
    write_table(quarantine_df, QuarantineSchema, out_dir / "quarantine.parquet")
    strata = _strata(expressions_df)
    counts = {"videos": len(videos_df), "expressions": len(expressions_df), "tracks": len(tracks),
              "quarantined": len(quarantine_df)}
    inputs = {p.name: p for p in [revos.meta_path(root, s) for s in revos.SPLITS]
              + [root / revos.MASK_DICT, root / revos.FOREGROUND] if p.is_file()}
    write_lineage(out_dir, "ingest", params, inputs=inputs, counts=counts,
                  code_modules=["stages.ingest", "stages.core.revos", "stages.core.rle", "schemas.index"])
    metrics: dict[str, float | int] = {**counts}
    for row in strata.itertuples(index=False):
        metrics[f"{row.split}.{row.type}.{row.instances}"] = int(row.expressions)
    reasons = (quarantine_df.groupby(["kind", "reason"]).size().rename("items").reset_index()
               if len(quarantine_df) else pd.DataFrame(columns=["kind", "reason", "items"]))
    for kind, n in Counter(quarantine_df["kind"]).items():
        metrics[f"quarantined.{kind}"] = n
    log.info("ingest: %s", counts)
    return StageReport("ingest", metrics=dict(sorted(metrics.items())),
                       tables={"expressions per stratum": strata, "quarantine reasons": reasons})


def _natural(exp_id: str) -> tuple[int, str]:
    return (int(exp_id), exp_id) if exp_id.isdigit() else (1 << 62, exp_id)


def _strata(expressions: pd.DataFrame) -> pd.DataFrame:
    if expressions.empty:
        return pd.DataFrame(columns=["split", "type", "instances", "expressions"])
    n = expressions["n_instances"]
    instances = np.select([n == 0, n == 1], ["none", "single"], "multi")
    return (expressions.assign(instances=instances).groupby(["split", "type", "instances"]).size()
            .rename("expressions").reset_index())
