"""Write simulated videos in the ReVOS layout (JPEGImages/, mask_dict*.json, meta_expressions_*_.json)."""

from __future__ import annotations

import io
import json
import logging
import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image
from pycocotools import mask as mask_utils

from stages.core.io import derive_seed, write_json
from stages.core.lineage import write_lineage
from stages.core.report import StageReport, summary_line
from stages.core.runner import RunnerParams, map_ordered
from stages.params.synth import SynthParams, SynthScale
from stages.synth.expressions import Facts, generate_expressions
from stages.synth.render import Visible, background, full_shape_area, render_frame
from stages.synth.scene import simulate_video

log = logging.getLogger(__name__)
SPLITS = ("train", "valid")
TYPE_NAMES = {0: "referring", 1: "reasoning", 2: "no_target"}
MIXTURE_SOURCE = {"mevis": "MV", "refytvos": "YT", "refdavis": "DV"}  # first key component of synth.mixture's roots


def encode_window(patch: np.ndarray, window: tuple[int, int, int, int], height: int, width: int) -> dict | None:
    """COCO compressed RLE (counts as str) of a (height, width) mask that is zero outside `window`
    (y0, y1, x0, x1), where it equals `patch`; None when the patch is empty (ReVOS: absent).

    Only the window's columns are scanned (the runs of the other columns are all zeros), then
    pycocotools compresses the run lengths, so the bytes equal `mask_utils.encode` of the full mask
    at a fraction of its cost on 720p frames.
    """
    if not patch.any():
        return None
    y0, y1, x0, x1 = window
    strip = np.zeros((height, x1 - x0), dtype=np.uint8)
    strip[y0:y1] = patch
    flat = strip.ravel(order="F")
    changes = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    runs = np.diff(np.concatenate([[0], changes, [flat.size]])).tolist()
    if flat[0]:
        runs.insert(0, 0)  # COCO runs start with a (possibly empty) run of zeros
    runs[0] += x0 * height
    after = (width - x1) * height
    if not flat[-1]:
        runs[-1] += after
    elif after:
        runs.append(after)
    rle = mask_utils.frPyObjects({"size": [height, width], "counts": runs}, height, width)
    return {"size": [height, width], "counts": rle["counts"].decode("ascii")}


def _encode_visible(visible: Visible, height: int, width: int) -> dict | None:
    """RLE of one object's visible pixels; None when nothing is visible (absent or fully hidden)."""
    if visible.window is None:
        return None
    return encode_window(visible.patch, visible.window, height, width)


def frame_names(rng: np.random.Generator, n_frames: int, gap_prob: float) -> list[str]:
    """Sorted 5-digit names with gaps: numbers skip ahead with probability `gap_prob` (ReVOS does)."""
    number = int(rng.integers(0, 4))
    names = []
    for _ in range(n_frames):
        names.append(f"{number:05d}")
        number += 1 + (int(rng.integers(1, 6)) if rng.random() < gap_prob else 0)
    return names


def _write_video(out_dir: Path, key: str, seed: int, scale: SynthScale, anno_start: int) -> tuple[dict, dict, dict]:
    """Simulate, render and write one video; return its meta entry, mask_dict items and foreground entry."""
    rng = np.random.default_rng(seed)
    video = simulate_video(rng, scale)
    names = frame_names(rng, video.n_frames, scale.frame_gap_prob)
    bg = background(video)
    folder = out_dir / "JPEGImages" / key
    folder.mkdir(parents=True, exist_ok=True)
    n_obj = len(video.objects)
    visible_area = np.zeros((video.n_frames, n_obj), dtype=np.int64)
    full_area = np.zeros((video.n_frames, n_obj), dtype=np.int64)
    centroids = np.full((video.n_frames, n_obj, 2), np.nan)
    hidden_by: list[list[tuple[int, ...]]] = []
    rles: list[list[dict | None]] = [[] for _ in range(n_obj)]
    for t, name in enumerate(names):
        image, visible = render_frame(video, bg, t)
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="JPEG", quality=scale.jpeg_quality)
        (folder / f"{name}.jpg").write_bytes(buffer.getvalue())
        hidden_by.append([visible[obj_id].hidden_by for obj_id in range(n_obj)])
        for obj_id in range(n_obj):
            seen = visible[obj_id]
            visible_area[t, obj_id] = seen.area
            full_area[t, obj_id] = seen.full_area
            centroids[t, obj_id] = seen.centroid()
            rles[obj_id].append(_encode_visible(seen, video.height, video.width))
    shape_area = np.array([full_shape_area(o.kind, o.radius) for o in video.objects], dtype=np.int64)
    facts = Facts(visible_area, full_area, centroids, shape_area, hidden_by)
    expressions = generate_expressions(video, facts, rng)
    anno_of = {obj.obj_id: anno_start + obj.obj_id for obj in video.objects}
    meta_exprs = {
        str(i): {"exp": e.text, "obj_id": list(e.obj_ids), "anno_id": [anno_of[o] for o in e.obj_ids],
                 "type_id": e.type_id}
        for i, e in enumerate(expressions)
    }
    meta = {"vid_id": key.rsplit("/", 1)[-1], "height": video.height, "width": video.width, "frames": names,
            "expressions": meta_exprs}
    mask_items = {str(anno_of[obj_id]): rles[obj_id] for obj_id in range(n_obj)}
    used = sorted({o for e in expressions for o in e.obj_ids})
    return meta, mask_items, _foreground([rles[o] for o in used], video.n_frames, video.height, video.width)


def _foreground(tracks: list[list[dict | None]], n_frames: int, height: int, width: int) -> dict:
    """mask_dict_foreground entry: per frame the union RLE of the given tracks and its area ratio."""
    fg_rles, fg_ratio = [], []
    for t in range(n_frames):
        frame_rles = [_bytes_rle(track[t]) for track in tracks if track[t] is not None]
        if frame_rles:
            merged = mask_utils.merge(frame_rles, intersect=False)
        else:
            merged = mask_utils.encode(np.zeros((height, width), dtype=np.uint8, order="F"))
        fg_rles.append({"size": [height, width], "counts": merged["counts"].decode("ascii")})
        fg_ratio.append(round(float(mask_utils.area(merged)) / (height * width), 6))
    return {"masks_rle": fg_rles, "foreground_ratio": fg_ratio}


def _write_video_task(task: tuple) -> tuple[dict, dict, dict]:
    return _write_video(*task)


def _bytes_rle(rle: dict) -> dict:
    return {"size": rle["size"], "counts": rle["counts"].encode("ascii")}


def generate_synthetic(params: SynthParams, out_dir: Path, runner: RunnerParams | None = None) -> StageReport:
    """Generate the synthetic dataset into `out_dir` (rewritten whole) and return its counts.

    Args:
        params: the `synth` params block (seed, size preset, source name).
        out_dir: the dataset root to write, in the ReVOS layout.
        runner: where the per-video work runs (default: in-process). Output bytes do not depend on it:
            each video's seed and anno_id range come from its key and position, not from run order.
    """
    out_dir = Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    if params.size == "hostile":  # hand-built geometry cases, not a simulation (stages/synth/hostile.py)
        from stages.synth.hostile import write_hostile

        meta, mask_dict, foreground = write_hostile(out_dir, params.source, params.seed, SPLITS, _foreground)
    else:
        meta, mask_dict, foreground = _write_simulated(params, out_dir, runner)
    for split in SPLITS:
        write_json(out_dir / f"meta_expressions_{split}_.json", {"videos": meta[split]})
    _write_compact_json(out_dir / "mask_dict.json", mask_dict)
    _write_compact_json(out_dir / "mask_dict_foreground.json", foreground)
    counts = _counts(meta)
    if params.layout != "revos":
        _rewrite_layout(params.layout, out_dir)
    for layout in params.mixture:  # training-source roots of their own (same scale and seed, own video keys)
        sub = replace(params, layout=layout, source=MIXTURE_SOURCE[layout], mixture=())
        sub_counts = generate_synthetic(sub, out_dir / layout, runner).metrics
        counts.update({f"mixture.{layout}.{k}": v for k, v in sub_counts.items() if k.startswith("train.")})
    write_lineage(out_dir, "synth", params, seed=params.seed, counts=counts, code_modules=["stages.synth"])
    table = pd.DataFrame(
        [{"split": split, "type": TYPE_NAMES[e["type_id"]], "instances": _instances(e)}
         for split in SPLITS for v in meta[split].values() for e in v["expressions"].values()]
    ).value_counts().rename("expressions").reset_index().sort_values(["split", "type", "instances"])
    log.info(summary_line("synth", counts))  # one short line; all values in the metrics file
    return StageReport("synth", metrics=counts, tables={"expressions per split, type and instances": table})


def _write_simulated(params: SynthParams, out_dir: Path, runner: RunnerParams | None
                     ) -> tuple[dict[str, dict], dict[str, list], dict[str, dict]]:
    """Simulate and write every video; (meta per split, mask_dict items, mask_dict_foreground entries)."""
    scale = params.scale
    meta: dict[str, dict] = {split: {} for split in SPLITS}
    mask_dict: dict[str, list] = {}
    foreground: dict[str, dict] = {}
    jobs = [(split, i) for split in SPLITS
            for i in range(scale.n_videos_train if split == "train" else scale.n_videos_valid)]
    keys = [f"{params.source}/{split}/v{i:04d}" for split, i in jobs]
    # anno_ids: a fixed block of max_objects ids per video, so ids do not depend on processing order
    tasks = [(out_dir, key, derive_seed(params.seed, "synth", key), scale, 1 + n * scale.max_objects)
             for n, key in enumerate(keys)]
    results = map_ordered(_write_video_task, tasks, runner or RunnerParams(kind="serial"), desc="synth videos")
    for (split, _), key, (entry, masks, fg) in zip(jobs, keys, results, strict=True):
        meta[split][key] = entry
        mask_dict.update(masks)
        foreground[key] = fg
    return meta, mask_dict, foreground


LAYOUT_SPLITS = {  # (split, with masks) written per layout: the published splits a synthetic root can stand for
    "mevis": (("train", True), ("valid_u", True), ("valid", False)),
    "reasonvos": (("valid", True),),
    "refytvos": (("train", True), ("valid", False)),
    "refdavis": (("train", True), ("valid", True)),
}


def _rewrite_layout(layout: str, out_dir: Path) -> None:
    """Replace the ReVOS files in `out_dir` by `layout`'s (stages/synth/layouts.py), split by split."""
    from stages.synth.layouts import write_layout

    staging = out_dir.with_name(out_dir.name + ".revos")
    shutil.rmtree(staging, ignore_errors=True)
    out_dir.rename(staging)
    for split, with_masks in LAYOUT_SPLITS[layout]:
        write_layout(layout, staging, out_dir, split, with_masks)
    shutil.rmtree(staging)


def _instances(expression: dict) -> str:
    n = len(expression["anno_id"])
    return "none" if n == 0 else "single" if n == 1 else "multi"


def _counts(meta: dict[str, dict]) -> dict[str, int]:
    """Per split: videos, frames, expressions, expressions per type × instances; plus totals over both splits
    (`videos`, `frames`, `expressions`, `type.<type>`, `instances.<single|multi|none>`)."""
    counts: Counter[str] = Counter()
    for split, videos in meta.items():
        counts[f"{split}.videos"] += len(videos)
        counts["videos"] += len(videos)
        for video in videos.values():
            counts[f"{split}.frames"] += len(video["frames"])
            counts["frames"] += len(video["frames"])
            for e in video["expressions"].values():
                counts[f"{split}.expressions"] += 1
                counts["expressions"] += 1
                counts[f"{split}.{TYPE_NAMES[e['type_id']]}.{_instances(e)}"] += 1
                counts[f"type.{TYPE_NAMES[e['type_id']]}"] += 1
                counts[f"instances.{_instances(e)}"] += 1
    return dict(sorted(counts.items()))


def _write_compact_json(path: Path, obj: dict) -> None:
    # mask_dict files are large: no indentation, but sorted keys so the bytes are deterministic
    path.write_text(json.dumps(obj, sort_keys=True, separators=(",", ":")))
