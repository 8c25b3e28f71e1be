"""Score a predictions folder in VISA's layout against a ReVOS-layout root, exactly as VISA's
`tools/eval_revos.py` does (REFERENCE.md §3), plus R on binarised masks.

Predictions: `<pred_dir>/<video_key>/<exp_id>/<frame>.png`, one grayscale PNG per frame of the video
(0/255). As in VISA, an expression whose video folder is missing, or with any frame missing, unreadable
or of another size than the ground truth, scores 0 on every metric; its `status` says which. Ground
truth: the union of the expression's anno_ids (summed as uint8, VISA's overlap behaviour) and the video's
foreground from `mask_dict_foreground.json`. The anno_ids' RLEs come from ingest's mask table
(`masks.parquet`, the same strings as mask_dict.json) when one is given — the pipeline's evaluate stage,
so that mask_dict.json is parsed once per pipeline — and otherwise from `mask_dict.json`, streamed with
ijson (a root scored on its own: `vrsflow evaluate`, the benchmarks); either way only the anno_ids
needed are kept.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pandas as pd
from PIL import UnidentifiedImageError
from pycocotools import mask as mask_utils

from schemas.evaluate import ExpressionScoresSchema
from stages.core import mask_table, revos
from stages.core.ids import expression_id
from stages.core.rle import to_coco
from stages.core.runner import RunnerParams, map_ordered
from stages.evaluate import metrics as M

log = logging.getLogger(__name__)

FRAME_CHUNK = 32  # frames held in memory at once per expression (720p: ~28 MB per uint8 stack)
STATUSES = ("ok", "missing_video", "missing_frame", "unreadable_frame", "bad_shape", "missing_anno")


@dataclass(frozen=True)
class GroundTruth:
    """What scoring needs from a ReVOS root: videos of the split, RLEs by anno_id, foregrounds by video."""

    videos: dict[str, Any]  # meta_expressions "videos" mapping
    masks: dict[str, list]  # anno_id (str) → RLE | null per frame
    foreground: dict[str, list]  # video → foreground RLE per frame


@dataclass(frozen=True)
class _Job:
    video: str
    exp_id: str
    entry: dict
    frames: list[str]
    gt: GroundTruth
    pred_dir: Path
    bound_th: float


def load_ground_truth(root: Path, split: str = "valid", expressions: Iterable[str] | None = None,
                      masks_table: Path | None = None) -> GroundTruth:
    """Read the meta file of `split`, and stream the masks and foregrounds the chosen expressions need.

    Args:
        root: ReVOS-layout root.
        split: "valid" (the published benchmark) or "train".
        expressions: expression ids (`<video>#<exp_id>`) to keep; None = every expression of the split.
        masks_table: ingest's `masks.parquet` of this root: the anno_ids' RLEs are read from it and
            `mask_dict.json` is not opened; None = stream `mask_dict.json`. An anno_id absent from the table
            (ingest rejected it) counts as missing, as one absent from mask_dict.json does.

    Raises:
        RevosFormatError: a missing or malformed file. ValueError: an expression or anno_id not in the files.
    """
    root = Path(root)
    videos, _ = revos.load_meta(revos.meta_path(root, split))
    if expressions is not None:
        wanted = set(expressions)
        kept: dict[str, Any] = {}
        for video, entry in videos.items():
            exps = {k: v for k, v in entry.get("expressions", {}).items() if expression_id(video, k) in wanted}
            if exps:
                kept[video] = {**entry, "expressions": exps}
        found = {expression_id(v, k) for v, e in kept.items() for k in e["expressions"]}
        if wanted - found:
            raise ValueError(f"{revos.meta_path(root, split)}: expressions not found: {sorted(wanted - found)[:10]}")
        videos = kept
    for video, entry in videos.items():
        for exp_id, x in entry.get("expressions", {}).items():
            type_id = x.get("type_id", 0) if isinstance(x, dict) else None
            if isinstance(type_id, bool) or type_id not in (0, 1, 2):
                raise revos.RevosFormatError(f"{revos.meta_path(root, split)}: expression "
                                             f"{expression_id(video, exp_id)}: type_id {type_id!r} outside 0–2")
    annos = {str(a) for e in videos.values() for x in e["expressions"].values() for a in x.get("anno_id", [])}
    if masks_table is None:
        source = root / revos.MASK_DICT
        masks = {k: v for k, v in revos.iter_json_object(source) if k in annos}
    else:
        source = Path(masks_table)
        ids = {int(a) for a in annos if a.lstrip("-").isdigit()}
        masks = {str(a): v for a, v in mask_table.read_masks(source, ids).items() if str(a) in annos}
    if annos - set(masks):  # VISA: the expression cannot be scored; it scores 0 (status missing_anno)
        log.warning("%s: %d anno_ids missing (their expressions score 0), e.g. %s", source,
                    len(annos - set(masks)), sorted(annos - set(masks))[0])
    foreground = {k: v["masks_rle"] for k, v in revos.iter_json_object(root / revos.FOREGROUND) if k in videos}
    if set(videos) - set(foreground):
        raise ValueError(f"{root / revos.FOREGROUND}: videos missing: {sorted(set(videos) - set(foreground))[:10]}")
    return GroundTruth(videos, masks, foreground)


def read_mask_png(path: Path) -> np.ndarray:
    """A prediction PNG as VISA reads it: `cv2.imread(path, cv2.IMREAD_GRAYSCALE)` (uint8; RGB → luma,
    16-bit → high byte, as OpenCV converts them).

    Raises:
        OSError: the file is missing or not an image.
    """
    mask = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    if mask is None:
        raise OSError(f"{path}: not readable as an image")
    return mask


def _decode(rle: Any, where: str) -> np.ndarray:
    try:
        mask = mask_utils.decode(to_coco(rle))
    except (TypeError, ValueError, KeyError) as err:
        raise ValueError(f"{where}: unreadable RLE: {err}") from err
    # a list of RLEs decodes to (H, W, n): VISA sums it
    return mask.sum(axis=2).astype(np.uint8) if mask.ndim == 3 else mask.astype(np.uint8)


def _ground_truth_chunk(job: _Job, frames: range, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(gt summed over instances, foreground), uint8 (t, H, W), for a range of frame positions."""
    gt = np.zeros((len(frames), *shape), dtype=np.uint8)
    fg = np.zeros_like(gt)
    fg_rles = job.gt.foreground[job.video]
    for i, t in enumerate(frames):
        for anno in job.entry.get("anno_id", []):
            rles = job.gt.masks[str(anno)]
            if t >= len(rles):
                raise ValueError(f"{revos.MASK_DICT}: anno_id {anno} has {len(rles)} frames, video {job.video} "
                                 f"has {len(job.frames)}")
            if rles[t]:
                decoded = _decode(rles[t], f"anno_id {anno} frame {job.frames[t]}")
                if decoded.shape != shape:
                    raise _ShapeMismatch
                gt[i] += decoded  # uint8: VISA's sum of overlapping instances
        if t >= len(fg_rles):
            raise ValueError(f"{revos.FOREGROUND}: video {job.video} has {len(fg_rles)} foreground frames, "
                             f"expected {len(job.frames)}")
        decoded = _decode(fg_rles[t], f"foreground of {job.video} frame {job.frames[t]}")
        if decoded.shape != shape:
            raise _ShapeMismatch
        fg[i] = decoded
    return gt, fg


class _ShapeMismatch(Exception):
    """A prediction frame and the ground truth differ in size (VISA scores the expression 0)."""


def _read_chunk(job: _Job, frames: range, shape: tuple[int, int] | None) -> np.ndarray | str:
    folder = job.pred_dir / job.video / job.exp_id
    out = []
    for t in frames:
        path = folder / f"{job.frames[t]}.png"
        if not path.is_file():
            return "missing_frame"
        try:
            mask = read_mask_png(path)
        except (OSError, UnidentifiedImageError):
            return "unreadable_frame"
        if shape is not None and mask.shape != shape:
            return "bad_shape"
        shape = mask.shape
        out.append(mask)
    return np.stack(out)


def _score(job: _Job) -> dict:
    row = {"video": job.video, "exp_id": job.exp_id, "expression_id": expression_id(job.video, job.exp_id),
           "type_id": int(job.entry.get("type_id", 0)), "text": str(job.entry.get("exp", "")),
           "n_frames": len(job.frames), "status": "ok", **dict.fromkeys(M.METRICS, 0.0)}
    if any(str(a) not in job.gt.masks for a in job.entry.get("anno_id", [])):
        return {**row, "status": "missing_anno"}
    if not (job.pred_dir / job.video).is_dir():
        return {**row, "status": "missing_video"}
    per_frame: dict[str, list[np.ndarray]] = {m: [] for m in M.METRICS}
    shape: tuple[int, int] | None = None
    for start in range(0, len(job.frames), FRAME_CHUNK):
        frames = range(start, min(start + FRAME_CHUNK, len(job.frames)))
        pred = _read_chunk(job, frames, shape)
        if isinstance(pred, str):
            return {**row, "status": pred}
        shape = pred.shape[1:]
        try:
            gt, fg = _ground_truth_chunk(job, frames, shape)
        except _ShapeMismatch:
            return {**row, "status": "bad_shape"}
        for metric, values in M.measures(gt, pred, fg, job.bound_th).items():  # masks packed once for J and F
            per_frame[metric].append(values)
    return {**row, **{m: float(np.concatenate(v).mean()) for m, v in per_frame.items()}}


def score_predictions(pred_dir: Path, data_root: Path, split: str = "valid", expressions: Iterable[str] | None = None,
                      runner: RunnerParams | None = None, bound_th: float = M.BOUND_TH,
                      ground_truth: GroundTruth | None = None) -> tuple[dict[str, float], pd.DataFrame]:
    """Score every chosen expression of `split`; returns (aggregates, per-expression table).

    Aggregates (`metrics.aggregate`, percent): J, F, JF, R_visa, R_binary per referring / reasoning /
    overall, plus counts: `n_expressions`, `n_scored` (type 0/1), `n_<status>` for every non-ok status.
    The table (ExpressionScoresSchema) has one row per expression, metrics as fractions (0–1).

    Raises:
        FileNotFoundError: `pred_dir` does not exist. RevosFormatError / ValueError: bad ground truth.
    """
    pred_dir = Path(pred_dir)
    if not pred_dir.is_dir():
        raise FileNotFoundError(f"predictions folder {pred_dir} does not exist")
    gt = ground_truth or load_ground_truth(Path(data_root), split, expressions)
    jobs = [_Job(video, exp_id, entry, list(gt.videos[video]["frames"]), gt, pred_dir, bound_th)
            for video in sorted(gt.videos) for exp_id, entry in sorted(gt.videos[video]["expressions"].items(),
                                                                      key=lambda kv: _exp_order(kv[0]))]
    rows = map_ordered(_score, jobs, runner or RunnerParams(kind="serial"), desc="score")
    table = pd.DataFrame(rows, columns=list(ExpressionScoresSchema.to_schema().columns))
    table["JF"] = (table["J"] + table["F"]) / 2
    table = ExpressionScoresSchema.validate(table, lazy=True)
    summary = M.aggregate(table)
    summary["n_expressions"] = len(table)
    summary["n_scored"] = int(table["type_id"].isin(list(M.TYPE_NAMES)).sum())
    for status in STATUSES[1:]:
        summary[f"n_{status}"] = int((table["status"] == status).sum())
    bad = table[table["status"] != "ok"]
    if len(bad):
        log.warning("%d of %d expressions score 0 (%s), e.g. %s", len(bad), len(table),
                    bad["status"].value_counts().to_dict(), bad["expression_id"].iloc[0])
    return summary, table


def _exp_order(exp_id: str) -> tuple[int, str]:
    return (int(exp_id), exp_id) if exp_id.isdigit() else (1 << 62, exp_id)
