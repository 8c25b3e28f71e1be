"""Benchmark the ingest stage (not a test): its frame check against a full decode of every frame, its RLE
areas against decoding every mask, its memory against loading mask_dict.json whole.

(c) The frame check, serial, best of `--repeats`, every frame of the root, interleaved per repeat:
    baseline `full` — the check as it was, a full-size Pillow decode of every frame (`Image.open` +
    `load()`) and the size compared; ours `header` (size from the header and the end-of-image marker after
    the image data: no pixel decoded) and `decode` (the same plus the data decoded at 1/8 scale). Before
    any figure: every mode passes every frame, and on broken copies of frames (cut at several points, the
    tail overwritten, emptied) every mode flags every copy the full decode flags. Target: cheaper than the
    full decode without missing a truncated file.
(d) The whole ingest stage per frame-check mode, each in a fresh child process (serial runner, a warm
    file-hash cache), with the time spent in the frame check: the `full` child runs today's ingest with the
    baseline check put in place of `check_jpeg`.
(a) Per-frame area + box from COCO RLE without decoding (`stages.core.rle.areas_and_boxes`) against the
    released Veason-R1 approach — decode every mask with pycocotools, count pixels, min/max of `np.where`
    for the box — on the same masks, same process; results asserted equal first. Target: ≥ 20×.
(b) Peak memory (ru_maxrss) of a full ingest next to that of a child that merely `json.load`s
    mask_dict.json (what streaming avoids); `--inflate-mib N` repeats it on a copy whose mask_dict.json is
    padded with unused anno_ids to N MiB.

    python bench/bench_ingest.py --make-root /tmp/revos-720p        # build a 720p factory root, then measure
    python bench/bench_ingest.py --root data/raw/synth-large        # any ReVOS-layout root (or real ReVOS)

`--make-root` writes a ReVOS-layout root with tests/revos_factory.py (moving rectangles on noise, 1280×720
JPEGs at quality 90). Writes bench/results/ingest.json (`--out` elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image
from pycocotools import mask as mask_utils

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from bench.results_io import write_result  # noqa: E402
from stages.core import revos, rle  # noqa: E402
from stages.ingest.checks import check_jpeg  # noqa: E402

CHECK_MODES = ("full", "header", "decode")  # full: the baseline (the check before this change)
TARGET = {
    "frame_check": "cheaper than a full decode of every frame, no truncated file missed",
    "rle_areas": "≥ 20× over decoding every mask",
}


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


def full_decode_check(path: Path, height: int, width: int) -> str | None:
    """The baseline: the frame check as it was — Pillow opens the file and decodes it at full size."""
    if not path.is_file():
        return "frame file missing"
    try:
        with Image.open(path) as img:
            size = img.size
            img.load()
    except (OSError, SyntaxError) as err:
        return f"unreadable or truncated JPEG: {err}"
    if size != (width, height):
        return f"JPEG is {size[0]}x{size[1]} but the video is {width}x{height}"
    return None


def frame_check(mode: str):
    """(path, height, width) → reason, for one mode of CHECK_MODES."""
    if mode == "full":
        return full_decode_check
    return lambda path, height, width: check_jpeg(path, height, width, mode)


def frame_jobs(root: Path) -> list[tuple[Path, int, int]]:
    """(path, height, width) of every frame the meta files list."""
    jobs = []
    for split in revos.SPLITS:
        path = revos.meta_path(root, split)
        if path.exists():
            for key, video in json.loads(path.read_text())["videos"].items():
                jobs += [(revos.frame_path(root, key, f), video["height"], video["width"]) for f in video["frames"]]
    return jobs


def time_frame_checks(jobs: list[tuple[Path, int, int]], repeats: int) -> dict:
    """Best-of seconds of each mode over all frames, the modes interleaved per repeat; all must pass."""
    runs: dict[str, list[float]] = {m: [] for m in CHECK_MODES}
    for _ in range(repeats):
        for mode in CHECK_MODES:
            check = frame_check(mode)
            t0 = time.perf_counter()
            reasons = [check(*job) for job in jobs]
            runs[mode].append(time.perf_counter() - t0)
            bad = [(str(job[0]), r) for job, r in zip(jobs, reasons, strict=True) if r]
            assert not bad, f"{mode} flags good frames: {bad[:3]}"
    best = {m: min(v) for m, v in runs.items()}
    return {"frames": len(jobs), "mean_frame_kib": round(np.mean([j[0].stat().st_size for j in jobs]) / 1024, 1),
            "repeats": repeats, "best_s": {m: round(s, 3) for m, s in best.items()},
            "ms_per_frame": {m: round(1000 * s / len(jobs), 3) for m, s in best.items()},
            "runs_s": {m: [round(s, 3) for s in v] for m, v in runs.items()},
            "speedup_header": round(best["full"] / best["header"], 2),
            "speedup_decode": round(best["full"] / best["decode"], 2)}


def broken_copies(jobs: list[tuple[Path, int, int]], n_frames: int) -> dict:
    """Broken copies of `n_frames` frames (cut at 1 %, 50 %, 99 % and 2 bytes short, the last KiB overwritten
    with zeros, emptied): every copy the full decode flags, header and decode must flag too."""
    flagged = {m: 0 for m in CHECK_MODES}
    missed: list[str] = []
    copies = 0
    with tempfile.TemporaryDirectory(prefix="vrsflow-bench-broken-") as tmp:
        for i, (path, height, width) in enumerate(jobs[:: max(1, len(jobs) // n_frames)][:n_frames]):
            data = path.read_bytes()
            variants = {"cut1": data[: len(data) // 100], "cut50": data[: len(data) // 2],
                        "cut99": data[: len(data) * 99 // 100], "short2": data[:-2],
                        "tail_zeros": data[:-1024] + bytes(1024), "empty": b""}
            for name, content in variants.items():
                copy = Path(tmp) / f"{i}-{name}.jpg"
                copy.write_bytes(content)
                copies += 1
                reasons = {m: frame_check(m)(copy, height, width) for m in CHECK_MODES}
                for mode, reason in reasons.items():
                    flagged[mode] += reason is not None
                    if reasons["full"] and not reason:
                        missed.append(f"{mode} {name}")
    assert not missed, f"missed what a full decode catches: {missed[:5]}"
    return {"copies": copies, "flagged": flagged, "missed_where_full_decode_fails": len(missed)}


def ingest_child(root: Path, mode: str) -> None:
    """Run one full ingest (serial runner) in this fresh process and print its figures as JSON; mode "full"
    puts the baseline check in place of `check_jpeg`. Also times the frame-check step inside it."""
    import stages.ingest as ingest_module
    from stages.core.runner import RunnerParams
    from stages.params.ingest import IngestParams

    if mode == "full":
        ingest_module.check_jpeg = lambda path, height, width, _mode: full_decode_check(path, height, width)
    inner = ingest_module._check_frames
    spent = []

    def timed_check_frames(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - t0)

    ingest_module._check_frames = timed_check_frames
    after_imports = rss_mib()
    with tempfile.TemporaryDirectory(prefix="vrsflow-bench-index-") as out:
        t0 = time.perf_counter()
        report = ingest_module.ingest(IngestParams(strict=True, check_jpeg="decode" if mode == "full" else mode),
                                      root, Path(out), RunnerParams(kind="serial"))
        total = time.perf_counter() - t0
    figures = {"ingest_s": round(total, 3), "frame_check_s": round(sum(spent), 3),
               "frame_check_share": round(sum(spent) / total, 3), "ingest_peak_rss_mib": round(rss_mib(), 1),
               "rss_after_imports_mib": round(after_imports, 1),
               "counts": {k: report.metrics[k] for k in ("videos", "expressions", "tracks", "quarantined")}}
    sys.stdout.write(json.dumps(figures) + "\n")


def json_load_child(root: Path) -> None:
    """Peak RSS of loading mask_dict.json whole (what the released loaders do)."""
    before = rss_mib()
    with open(root / revos.MASK_DICT) as handle:
        data = json.load(handle)
    sys.stdout.write(json.dumps({"json_load_peak_rss_mib": round(rss_mib(), 1), "rss_before_mib": round(before, 1),
                                 "anno_ids": len(data)}) + "\n")


def child(*args: str, env: dict | None = None) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True,
                         env={**os.environ, **(env or {})})
    return json.loads(out.stdout.strip().splitlines()[-1])


def ingest_per_mode(root: Path, repeats: int, hash_cache: Path) -> dict:
    """Each mode's whole ingest in fresh children (best of `repeats`, interleaved), after one untimed run
    that fills the file-hash cache (the lineage record hashes JPEGImages; a rerun finds the hashes cached)."""
    env = {"VRSFLOW_HASH_CACHE": str(hash_cache)}
    child("--root", str(root), "--child", "ingest", "--check-jpeg", "header", env=env)
    runs: dict[str, list[dict]] = {m: [] for m in CHECK_MODES}
    for _ in range(repeats):
        for mode in CHECK_MODES:
            runs[mode].append(child("--root", str(root), "--child", "ingest", "--check-jpeg", mode, env=env))
    best = {m: min(v, key=lambda r: r["ingest_s"]) for m, v in runs.items()}
    assert len({json.dumps(r["counts"], sort_keys=True) for r in best.values()}) == 1, "modes index differently"
    return {"best": best, "ingest_s_runs": {m: [r["ingest_s"] for r in v] for m, v in runs.items()},
            "speedup_header": round(best["full"]["ingest_s"] / best["header"]["ingest_s"], 2),
            "speedup_decode": round(best["full"]["ingest_s"] / best["decode"]["ingest_s"], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, help="a ReVOS-layout root")
    parser.add_argument("--make-root", type=Path, help="write a 720p factory root here first and use it")
    parser.add_argument("--videos", type=int, default=20, help="--make-root: videos")
    parser.add_argument("--frames", type=int, default=40, help="--make-root: frames per video")
    parser.add_argument("--objects", type=int, default=4, help="--make-root: objects per video")
    parser.add_argument("--annos", type=int, default=0, help="anno_ids timed in (a); 0 = all")
    parser.add_argument("--repeats", type=int, default=3, help="timing repeats (best of)")
    parser.add_argument("--check-jpeg", choices=CHECK_MODES, default="decode", help=argparse.SUPPRESS)
    parser.add_argument("--inflate-mib", type=int, default=0,
                        help="also ingest a copy whose mask_dict holds unused anno_ids up to this size (MiB)")
    parser.add_argument("--out", type=Path, default=None, help="default: bench/results/ingest.json")
    parser.add_argument("--child", choices=["ingest", "json_load"], help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child == "ingest":
        return ingest_child(args.root, args.check_jpeg)
    if args.child == "json_load":
        return json_load_child(args.root)
    if args.make_root:
        args.root = make_root(args.make_root, args.videos, args.frames, args.objects, 720, 1280)
    if args.root is None:
        parser.error("give --root or --make-root")

    jobs = frame_jobs(args.root)
    figures: dict = {"target": TARGET,
                     "root": (f"tests/revos_factory.py root: {args.videos} videos × {args.frames} frames × "
                              f"{args.objects} objects, 1280×720" if args.make_root else args.root.name)}
    figures["frame_check"] = {**time_frame_checks(jobs, args.repeats), "broken": broken_copies(jobs, 20)}
    with tempfile.TemporaryDirectory(prefix="vrsflow-bench-hashes-") as tmp:
        figures["ingest_per_mode"] = ingest_per_mode(args.root, args.repeats, Path(tmp) / "sha256.sqlite")

    all_masks = load_masks(args.root, args.annos)
    t_ours, (a_ours, b_ours) = best_of(ours, all_masks, args.repeats)
    t_base, (a_base, b_base) = best_of(baseline, all_masks, max(1, args.repeats - 2))
    np.testing.assert_array_equal(a_ours, a_base)
    np.testing.assert_array_equal(b_ours, b_base)
    n_masks = sum(len(masks) for masks in all_masks)
    figures["rle_areas"] = {
        "mask_sizes_hw": sorted({tuple(m["size"]) for masks in all_masks for m in masks if m is not None})[:5],
        "anno_ids": len(all_masks), "masks": n_masks,
        "masks_present": sum(m is not None for masks in all_masks for m in masks),
        "ours_s": round(t_ours, 4), "baseline_s": round(t_base, 3), "speedup": round(t_base / t_ours, 1),
        "equal_asserted": True}

    figures["memory"] = {"mask_dict_mib": round((args.root / revos.MASK_DICT).stat().st_size / 2**20, 2),
                         "ingest": figures["ingest_per_mode"]["best"]["header"]["ingest_peak_rss_mib"],
                         "json_load_mask_dict": child("--root", str(args.root), "--child", "json_load")}
    if args.inflate_mib:
        big = inflate_root(args.root, args.root.with_name(args.root.name + "-inflated"), args.inflate_mib)
        figures["memory"]["inflated"] = {
            "mask_dict_mib": round((big / revos.MASK_DICT).stat().st_size / 2**20, 1),
            "ingest": child("--root", str(big), "--child", "ingest", "--check-jpeg", "header"),
            "json_load_mask_dict": child("--root", str(big), "--child", "json_load")}
    write_result("ingest", figures,
                 "frame check: the check as it was, a full-size Pillow decode of every frame (Image.open + load), "
                 "same frames, same run; RLE areas: pycocotools decode of every mask (released Veason-R1)",
                 code=("stages/ingest", "stages/core", "bench/bench_ingest.py"), out=args.out)


if __name__ == "__main__":
    main()
