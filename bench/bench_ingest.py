"""Benchmark the ingest stage (not a test).

(a) Throughput of per-frame area + box from COCO RLE without decoding (`stages.core.rle.areas_and_boxes`:
    pycocotools `area`/`toBbox` on the run-length counts, one batched call per anno_id) against the released
    Veason-R1 approach — decode every mask of every frame with pycocotools `mask.decode`, count the pixels and
    take the min/max of `np.where` for the box — on the same masks in the same process. Both results are
    compared for equality before any figure is reported. Target: ≥ 20×.
(b) Peak memory (ru_maxrss) of a full ingest of the root, in a fresh child process, next to the RSS of that
    process right after its imports and of a child that merely `json.load`s mask_dict.json (what streaming
    avoids). `--inflate-mib N` repeats (b) on a copy whose mask_dict.json is padded with unused anno_ids to
    N MiB: with streaming, ingest's peak memory does not grow with the file.

    python bench/bench_ingest.py --root data/raw/synth-large           # any ReVOS-layout root (or real ReVOS)
    python bench/bench_ingest.py --make-root /tmp/revos-720p           # build a 720p factory root first
    python bench/bench_ingest.py --root /tmp/revos-720p --inflate-mib 500

`--make-root` writes a ReVOS-layout root with tests/revos_factory.py (moving rectangles, 1280×720 JPEGs);
the `large` synthetic preset (`dvc exp run -S synth.size=large synth`) is the intended input once generated.
Figures are printed and written as JSON (`--out`, default bench/out/ingest.json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from pycocotools import mask as mask_utils

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from stages.core import revos, rle  # noqa: E402


def rss_mib() -> float:
    """Peak resident set size of this process so far (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load_masks(root: Path, limit: int) -> list[list[dict | None]]:
    """The first `limit` anno_ids' mask lists (streamed; 0 = all)."""
    masks = []
    for _, value in revos.iter_json_object(root / revos.MASK_DICT):
        masks.append(value)
        if limit and len(masks) >= limit:
            break
    return masks


def ours(all_masks: list[list[dict | None]]) -> tuple[np.ndarray, np.ndarray]:
    """Areas and boxes from the RLE, no decoding (the ingest code path)."""
    results = [rle.areas_and_boxes(masks) for masks in all_masks]
    return np.concatenate([a for a, _ in results]), np.concatenate([b for _, b in results])


def baseline(all_masks: list[list[dict | None]]) -> tuple[np.ndarray, np.ndarray]:
    """Veason-R1's way: decode each mask, count pixels, min/max of the nonzero coordinates."""
    areas, boxes = [], []
    for masks in all_masks:
        for m in masks:
            if m is None:
                areas.append(0)
                boxes.append([np.nan] * 4)
                continue
            decoded = mask_utils.decode(rle.to_coco(m))
            areas.append(int(decoded.sum()))
            ys, xs = np.where(decoded > 0)
            boxes.append([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1] if ys.size else [np.nan] * 4)
    return np.asarray(areas, dtype=np.int64), np.asarray(boxes, dtype=np.float64)


def best_of(fn, arg, repeats: int) -> tuple[float, object]:
    """Fastest wall time of `repeats` runs (and the last result)."""
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn(arg)
        times.append(time.perf_counter() - t0)
    return min(times), result


def make_root(path: Path, n_videos: int, n_frames: int, n_objects: int, height: int, width: int) -> Path:
    """A 720p ReVOS-layout root from the test factory: rectangles moving across the frame."""
    sys.path.insert(0, str(PROJECT))
    from tests.revos_factory import VideoSpec, write_root

    specs = []
    for v in range(n_videos):
        objects = {}
        for k in range(n_objects):
            anno = 1000 * v + k
            w, h = width // (4 + k), height // (3 + k)
            track = []
            for t in range(n_frames):
                if (t + k) % 11 == 10:  # absent now and then, as real objects leave the frame
                    track.append(None)
                    continue
                x = (37 * k + 9 * t) % (width - w)
                y = (53 * k + 5 * t) % (height - h)
                track.append((x, y, x + w, y + h))
            objects[anno] = track
        annos = list(objects)
        expressions = [{"exp": f"object {k}", "obj_id": [k], "anno_id": [a], "type_id": k % 2}
                       for k, a in enumerate(annos)]
        expressions.append({"exp": "all of them", "obj_id": list(range(len(annos))), "anno_id": annos, "type_id": 1})
        split = "valid" if v % 5 == 4 else "train"
        specs.append(VideoSpec(f"BENCH/{split}/v{v:04d}", split=split, height=height, width=width,
                               frames=[f"{5 * t:05d}" for t in range(n_frames)], objects=objects,
                               expressions=expressions))
    return write_root(path, specs)


def inflate_root(root: Path, path: Path, mib: int) -> Path:
    """A copy of `root` (symlinks) whose mask_dict.json also holds unused anno_ids up to ~`mib` MiB, as the real
    ReVOS mask_dict is shared by both splits and large; written piecewise, never held whole."""
    path.mkdir(parents=True, exist_ok=True)
    for name in ["JPEGImages", revos.FOREGROUND] + [revos.meta_path(root, s).name for s in revos.SPLITS]:
        link = path / name
        if not link.exists():
            link.symlink_to((root / name).resolve())
    source = list(revos.iter_json_object(root / revos.MASK_DICT))
    with open(path / revos.MASK_DICT, "w") as out:
        out.write("{")
        for i, (key, masks) in enumerate(source):
            out.write(("" if i == 0 else ", ") + json.dumps(key) + ": " + json.dumps(masks))
        filler, target = 0, mib * 2**20
        while out.tell() < target:
            out.write(f', "{90_000_000 + filler}": ' + json.dumps(source[filler % len(source)][1]))
            filler += 1
        out.write("}")
    return path


def ingest_child(root: Path, check_jpeg: str, workers: int) -> None:
    """Run one full ingest in this (fresh) process and print its figures as JSON."""
    from stages.core.params import IngestParams
    from stages.core.runner import RunnerParams
    from stages.ingest import ingest

    after_imports = rss_mib()
    t0 = time.perf_counter()
    report = ingest(IngestParams(strict=True, check_jpeg=check_jpeg), root, Path("/tmp/vrsflow-bench-index"),
                    RunnerParams(kind="threads", workers=workers))
    figures = {"ingest_s": time.perf_counter() - t0, "ingest_peak_rss_mib": rss_mib(),
               "rss_after_imports_mib": after_imports,
               "counts": {k: report.metrics[k] for k in ("videos", "expressions", "tracks", "quarantined")}}
    sys.stdout.write(json.dumps(figures) + "\n")


def json_load_child(root: Path) -> None:
    """Peak RSS of loading mask_dict.json whole (what the released loaders do)."""
    before = rss_mib()
    with open(root / revos.MASK_DICT) as handle:
        data = json.load(handle)
    sys.stdout.write(json.dumps({"json_load_peak_rss_mib": rss_mib(), "rss_before_mib": before,
                                 "anno_ids": len(data)}) + "\n")


def child(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, help="a ReVOS-layout root")
    parser.add_argument("--make-root", type=Path, help="write a 720p factory root here first and use it")
    parser.add_argument("--videos", type=int, default=20, help="--make-root: videos")
    parser.add_argument("--frames", type=int, default=40, help="--make-root: frames per video")
    parser.add_argument("--objects", type=int, default=4, help="--make-root: objects per video")
    parser.add_argument("--annos", type=int, default=0, help="anno_ids timed in (a); 0 = all")
    parser.add_argument("--repeats", type=int, default=3, help="timing repeats (best of) for (a)")
    parser.add_argument("--check-jpeg", choices=["header", "decode"], default="decode")
    parser.add_argument("--workers", type=int, default=2, help="threads for the JPEG checks")
    parser.add_argument("--inflate-mib", type=int, default=0,
                        help="also ingest a copy whose mask_dict holds unused anno_ids up to this size (MiB)")
    parser.add_argument("--out", type=Path, default=PROJECT / "bench/out/ingest.json")
    parser.add_argument("--child", choices=["ingest", "json_load"], help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.make_root:
        args.root = make_root(args.make_root, args.videos, args.frames, args.objects, 720, 1280)
    if args.root is None:
        parser.error("give --root or --make-root")
    if args.child == "ingest":
        return ingest_child(args.root, args.check_jpeg, args.workers)
    if args.child == "json_load":
        return json_load_child(args.root)

    all_masks = load_masks(args.root, args.annos)
    n_masks = sum(len(masks) for masks in all_masks)
    n_present = sum(m is not None for masks in all_masks for m in masks)
    t_ours, (a_ours, b_ours) = best_of(ours, all_masks, args.repeats)
    t_base, (a_base, b_base) = best_of(baseline, all_masks, max(1, args.repeats - 2))
    np.testing.assert_array_equal(a_ours, a_base)
    np.testing.assert_array_equal(b_ours, b_base)
    sizes = {tuple(m["size"]) for masks in all_masks for m in masks if m is not None}

    common = ["--root", str(args.root), "--check-jpeg", args.check_jpeg, "--workers", str(args.workers)]
    figures = {
        "root": str(args.root),
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs",
        "mask_sizes_hw": sorted(sizes)[:5],
        "anno_ids_timed": len(all_masks),
        "masks_timed": n_masks,
        "masks_present": n_present,
        "ours_s": t_ours,
        "baseline_s": t_base,
        "ours_masks_per_s": n_masks / t_ours,
        "baseline_masks_per_s": n_masks / t_base,
        "speedup": t_base / t_ours,
        "mask_dict_mib": (args.root / revos.MASK_DICT).stat().st_size / 2**20,
        "full_ingest": child("--child", "ingest", *common),
        "json_load_mask_dict": child("--child", "json_load", *common),
    }
    if args.inflate_mib:
        big = inflate_root(args.root, args.root.with_name(args.root.name + "-inflated"), args.inflate_mib)
        common[1] = str(big)
        figures["inflated"] = {
            "mask_dict_mib": (big / revos.MASK_DICT).stat().st_size / 2**20,
            "full_ingest": child("--child", "ingest", *common),
            "json_load_mask_dict": child("--child", "json_load", *common),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=1) + "\n")
    sys.stdout.write(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
