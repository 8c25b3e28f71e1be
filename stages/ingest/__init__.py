"""`ingest` stage: any ReVOS-layout root → validated index tables in `data/index/`.

videos, expressions, tracks (per anno_id and frame: area and box computed on the RLE without decoding),
masks (per anno_id and frame: the RLE itself, `schemas/masks.py`) and quarantine. Memory stays bounded on
the real dataset: `mask_dict.json` and `mask_dict_foreground.json` are streamed (ijson, one anno_id / one
video at a time); only the anno_ids that expressions name are parsed further; the foreground check works on
RLEs (merge, area), never on decoded masks. This is the only parse of `mask_dict.json` in the pipeline:
keyframes and evaluate read the RLEs from `masks.parquet`, written in row groups while streaming.

Bad input (`ingest.strict: true`: the first one raises `IngestError` naming file, item and problem;
`false`: one quarantine row per problem, the rest proceeds):
- a bad video (entry, size, frame list, any frame's JPEG, foreground ≠ union of its targets) is dropped
  with its expressions; a video key present twice (both split files, or twice in one) is dropped from every
  split — its split is ambiguous, and keeping either copy could leak a validation video into training;
- a bad expression (text, type_id, id lists, an id repeated in its JSON object) drops only itself;
- a bad anno_id (missing, repeated in mask_dict, mask count ≠ frame count, RLE size ≠ the video's,
  unreadable RLE, used by two videos) drops the expressions that name it;
- a malformed meta file drops its split; a malformed mask_dict drops every target (no-target expressions
  stay); a malformed foreground file leaves the foreground unchecked.
Videos whose foreground cannot be checked (an anno_id failed, or missing from the foreground file) are
counted in the metrics, not dropped.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from pycocotools import mask as mask_utils

from schemas.index import ExpressionsSchema, QuarantineSchema, TracksSchema, VideosSchema
from stages.core import mask_table, revos, rle
from stages.core.ids import expression_id
from stages.core.io import write_table
from stages.core.lineage import write_lineage
from stages.core.report import StageReport, summary_line
from stages.core.runner import RunnerParams, map_ordered
from stages.ingest.checks import IngestError, Problems, check_expression, check_frame_names, check_jpeg, check_size
from stages.params.ingest import IngestParams

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
    foreground_annos: set[int] = field(default_factory=set)
    foreground_complete: bool = True  # False when a duplicated expression's targets were lost by the JSON parser


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
        out_dir: where videos/expressions/tracks/masks/quarantine.parquet and lineage.json go.
        runner: where the per-frame JPEG checks run (default: threads).

    Raises:
        IngestError: the first bad item, in strict mode (names file, item and problem).
    """
    root, out_dir = Path(root), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    problems = Problems(strict=params.strict, root=root)
    videos, expressions = _read_meta(root, problems)
    videos = _check_frames(root, videos, params, problems, runner or RunnerParams())
    expressions = [e for e in expressions if e.video in videos]
    masks_tmp = out_dir / f".{mask_table.FILE}.tmp"
    try:
        masks = _index_masks(root, videos, expressions, problems, masks_tmp)
        expressions = _drop_bad_annos(expressions, masks.bad, problems)
        fg_checked = _check_foreground(root, videos, masks, params, problems)
        expressions = [e for e in expressions if e.video in videos]
        return _write(root, out_dir, params, videos, expressions, masks.tracks, problems,
                      {"videos_foreground_unchecked": len(set(videos) - fg_checked)}, masks_tmp)
    finally:
        masks_tmp.unlink(missing_ok=True)  # moved into place by _write; left only after an error


def _read_meta(root: Path, problems: Problems) -> tuple[dict[str, _Video], list[_Expression]]:
    """Both meta files → valid videos and expressions; every bad entry reported, the rest kept.

    A video key present twice (in both split files, or repeated in one) is dropped everywhere: its split
    is ambiguous and keeping either copy could leak a validation video into training.
    """
    loaded: list[tuple[str, Path, dict, set[str]]] = []
    for split in revos.SPLITS:
        path = revos.meta_path(root, split)
        try:
            raw, duplicates = revos.load_meta(path)
        except revos.RevosFormatError as err:
            problems.add("file", path.name, path, str(err).removeprefix(f"{path}: "))
            continue
        bad_exps: set[str] = set()
        for kind, item in duplicates:
            if kind == "expression":
                bad_exps.add(item)
                problems.add(kind, item, path, "duplicate expression id (or a key repeated inside the expression)")
            elif kind == "video":
                problems.add(kind, item, path, "duplicate video key in the file (or a key repeated inside the video)")
                raw.pop(item, None)
            else:
                problems.add("file", path.name, path, f"duplicate key {item!r} outside the videos mapping")
        loaded.append((split, path, raw, bad_exps))
    files_of: dict[str, list[Path]] = defaultdict(list)
    for _, path, raw, _ in loaded:
        for key in raw:
            files_of[key].append(path)
    videos: dict[str, _Video] = {}
    expressions: list[_Expression] = []
    for split, path, raw, ambiguous in loaded:
        for key, entry in raw.items():
            if len(files_of[key]) > 1:
                if path == files_of[key][-1]:
                    names = " and ".join(p.name for p in files_of[key])
                    problems.add("video", key, path, f"duplicate video key (in {names}); dropped from every split")
                continue
            video, video_expressions = _parse_video(key, entry, split, path, ambiguous, problems)
            if video is not None:
                videos[key] = video
                expressions += video_expressions
    return videos, expressions


def _parse_video(key: str, entry: object, split: str, path: Path, ambiguous: set[str],
                 problems: Problems) -> tuple[_Video | None, list[_Expression]]:
    """One meta entry → (the video or None when unusable, its valid expressions).

    `ambiguous`: expression ids already reported (duplicated); they are skipped.
    """
    if not isinstance(entry, dict):
        problems.add("video", key, path, "video entry is not an object")
        return None, []
    reason = check_size(entry) or check_frame_names(entry.get("frames"))
    if reason is None and not isinstance(entry.get("expressions"), dict):
        reason = "expressions must be an object keyed by expression id"
    if reason:
        problems.add("video", key, path, reason)
        return None, []
    video = _Video(key, split, str(entry.get("vid_id", key)), entry["height"], entry["width"],
                   list(entry["frames"]), path)
    expressions = []
    for exp_id, expression in entry["expressions"].items():
        # the foreground is the union over every expression's targets, including ones rejected below
        video.foreground_annos.update(_int_ids(expression))
        if expression_id(key, exp_id) in ambiguous:
            video.foreground_complete = False
            continue
        reason = check_expression(expression)
        if reason:
            problems.add("expression", expression_id(key, exp_id), path, reason)
            continue
        expressions.append(_Expression(key, str(exp_id), split, expression["exp"], expression["type_id"],
                                       list(expression["obj_id"]), list(expression["anno_id"]), path))
    return video, expressions


def _int_ids(expression: object) -> list[int]:
    ids = expression.get("anno_id") if isinstance(expression, dict) else None
    if not isinstance(ids, list):
        return []
    return [i for i in ids if isinstance(i, int) and not isinstance(i, bool)]


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


@dataclass
class _Masks:
    tracks: pd.DataFrame  # one row per (used anno_id, frame)
    unions: dict[str, list[dict | None]]  # per video, per frame: union RLE of its foreground anno_ids
    bad: set[int]  # used anno_ids that failed (reported)
    unverifiable: set[str]  # videos whose foreground union is incomplete (an anno_id failed)


def _index_masks(root: Path, videos: dict[str, _Video], expressions: list[_Expression],
                 problems: Problems, masks_path: Path) -> _Masks:
    """Stream mask_dict.json once (one anno_id in memory at a time): check every anno_id a video needs,
    compute areas and boxes of the used ones on the RLE, write their RLEs to the mask table at `masks_path`
    (row groups of bounded size), and accumulate each video's per-frame union RLE for the foreground
    check. anno_ids nobody uses are skipped unparsed (ReVOS shares one mask_dict between the splits)."""
    path = Path(root) / revos.MASK_DICT
    bad: set[int] = set()
    used: dict[int, str] = {}
    for e in expressions:
        for anno in e.anno_ids:
            if used.setdefault(anno, e.video) != e.video and anno not in bad:
                bad.add(anno)
                problems.add("anno", str(anno), e.file, f"anno_id used by two videos ({used[anno]} and {e.video})")
    needed = {anno: key for key, v in videos.items() for anno in v.foreground_annos} | used
    unions: dict[str, list[dict | None]] = {k: [None] * len(v.frames) for k, v in videos.items()}
    unverifiable = {key for key, v in videos.items() if not v.foreground_complete}
    columns: dict[str, list] = defaultdict(list)
    seen: set[int] = set()
    with mask_table.MaskTableWriter(masks_path) as table:
        try:
            for key, masks in revos.iter_json_object(path):
                anno = _int_key(key)
                if anno not in needed:
                    continue
                video = videos[needed[anno]]
                if anno in seen:  # a repeated key: json.load would keep the last value, ijson yields both
                    unverifiable.add(video.key)
                    if anno in used and anno not in bad:
                        problems.add("anno", str(anno), path, f"anno_id repeated in mask_dict (video {video.key})")
                    bad.add(anno)
                    continue
                seen.add(anno)
                reason = _check_anno(masks, video)
                areas = boxes = None
                if reason is None:
                    try:
                        areas, boxes = rle.areas_and_boxes(masks)
                    except rle.RLEError as err:
                        reason = str(err)
                if reason is not None:
                    unverifiable.add(video.key)
                    if anno in used and anno not in bad:
                        problems.add("anno", str(anno), path, f"{reason} (video {video.key})")
                    bad.add(anno)
                    continue
                if anno in used and anno not in bad:
                    _append_track(columns, anno, video, areas, boxes)
                    table.add(anno, masks, video.height, video.width)
                _accumulate(unions[video.key], masks, areas)
        except revos.RevosFormatError as err:
            problems.add("file", revos.MASK_DICT, path, str(err).removeprefix(f"{path}: "))
            bad |= set(used)
            unverifiable |= set(videos)
    for anno in sorted(set(needed) - seen - bad):
        unverifiable.add(needed[anno])
        if anno in used:
            bad.add(anno)
            problems.add("anno", str(anno), path, f"anno_id missing from mask_dict (video {needed[anno]})")
    return _Masks(_tracks_frame(columns, bad), unions, bad, unverifiable)


def _int_key(key: str) -> int | None:
    try:
        return int(key)
    except ValueError:
        return None


def _append_track(columns: dict[str, list], anno: int, video: _Video, areas: np.ndarray, boxes: np.ndarray) -> None:
    n = len(video.frames)
    columns["anno_id"].append(np.full(n, anno))
    columns["video"].append(np.full(n, video.key, dtype=object))
    columns["frame_idx"].append(np.arange(n))
    columns["frame"].append(np.asarray(video.frames, dtype=object))
    columns["area"].append(areas)
    columns["box"].append(boxes)


def _accumulate(union: list[dict | None], masks: list[dict | None], areas: np.ndarray) -> None:
    """Merge one anno_id's per-frame RLEs into the video's running union (RLE merge, no decoding)."""
    for t, m in enumerate(masks):
        if m is not None and areas[t] > 0:
            union[t] = rle.to_coco(m) if union[t] is None else mask_utils.merge([union[t], rle.to_coco(m)])


def _tracks_frame(columns: dict[str, list], bad: set[int]) -> pd.DataFrame:
    names = ["anno_id", "video", "frame_idx", "frame", "area", "x1", "y1", "x2", "y2"]
    if not columns["anno_id"]:
        return pd.DataFrame({c: [] for c in names})
    box = np.concatenate(columns["box"])
    tracks = pd.DataFrame({
        "anno_id": np.concatenate(columns["anno_id"]), "video": np.concatenate(columns["video"]),
        "frame_idx": np.concatenate(columns["frame_idx"]), "frame": np.concatenate(columns["frame"]),
        "area": np.concatenate(columns["area"]),
        "x1": box[:, 0], "y1": box[:, 1], "x2": box[:, 2], "y2": box[:, 3],
    })
    return tracks[~tracks["anno_id"].isin(bad)].sort_values(["anno_id", "frame_idx"]).reset_index(drop=True)


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
        size = m["size"]
        if not isinstance(size, list) or size != [video.height, video.width]:
            return f"frame {video.frames[t]}: RLE size {size!r} but the video is {video.height}x{video.width}"
        if not isinstance(m["counts"], str):
            return f"frame {video.frames[t]}: RLE counts must be a compressed string"
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


def _check_foreground(root: Path, videos: dict[str, _Video], masks: _Masks, params: IngestParams,
                      problems: Problems) -> set[str]:
    """mask_dict_foreground must equal, frame by frame, the union of the masks of every anno_id the video's
    expressions name (RLE merge/intersect areas, no decoding), within `foreground_tolerance` × H × W pixels.

    A mismatching video is reported and dropped (quarantine mode). Videos whose union is incomplete (an
    anno_id already failed) are not checked; videos absent from the file are only counted (logged).
    Returns the keys of the videos checked.
    """
    path = Path(root) / revos.FOREGROUND
    checked: set[str] = set()
    try:
        for key, entry in revos.iter_json_object(path):
            if key not in videos or key in masks.unverifiable or key in checked:
                continue
            checked.add(key)
            reason = _foreground_problem(entry, masks.unions[key], videos[key], params.foreground_tolerance)
            if reason:
                problems.add("video", key, path, reason)
                del videos[key]
    except revos.RevosFormatError as err:
        problems.add("file", revos.FOREGROUND, path, str(err).removeprefix(f"{path}: "))
    missing = len(set(videos) - checked - masks.unverifiable)
    if missing:
        log.warning("ingest: %d video(s) have no entry in %s; their foreground was not checked", missing, path.name)
    return checked


def _foreground_problem(entry: object, union: list[dict | None], video: _Video, tolerance: float) -> str | None:
    """The reason a video's foreground entry disagrees with the union of its masks, or None."""
    fg_masks = entry.get("masks_rle") if isinstance(entry, dict) else None
    if not isinstance(fg_masks, list) or len(fg_masks) != len(video.frames):
        n = len(fg_masks) if isinstance(fg_masks, list) else "no"
        return f"foreground masks_rle: {n} masks for {len(video.frames)} frames"
    for t, fg in enumerate(fg_masks):
        try:
            reason = _foreground_mismatch(fg, union[t], video, tolerance)
        except (TypeError, ValueError, KeyError, AttributeError) as err:
            reason = f"unreadable foreground RLE: {err}"
        if reason:
            return f"frame {video.frames[t]}: {reason}"
    return None


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
           expressions: list[_Expression], tracks: pd.DataFrame, problems: Problems,
           extra_metrics: dict[str, int], masks_tmp: Path) -> StageReport:
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
    mask_rows = mask_table.finish(masks_tmp, out_dir / mask_table.FILE, used)  # the same (anno_id, frame) rows
    if mask_rows != len(tracks):
        raise AssertionError(f"ingest: {mask_rows} mask rows but {len(tracks)} track rows")
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
    inputs["JPEGImages"] = root / "JPEGImages"  # the raw frames: hashed once, then cached by (size, mtime, inode)
    write_lineage(out_dir, "ingest", params, inputs=inputs, counts=counts,
                  code_modules=["stages.ingest", "stages.core.revos", "stages.core.rle",
                                "stages.core.mask_table", "schemas.index", "schemas.masks"])
    metrics: dict[str, float | int] = {**counts, **extra_metrics}
    for row in strata.itertuples(index=False):
        metrics[f"{row.split}.{row.type}.{row.instances}"] = int(row.expressions)
    reasons = (quarantine_df.groupby(["kind", "reason"]).size().rename("items").reset_index()
               if len(quarantine_df) else pd.DataFrame(columns=["kind", "reason", "items"]))
    for kind, n in Counter(quarantine_df["kind"]).items():
        metrics[f"quarantined.{kind}"] = n
    log.info(summary_line("ingest", counts))  # one short line; all values in the metrics file
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
