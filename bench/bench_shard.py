"""Benchmark: the shard stage at 720p sources with hundreds of samples, today's code vs the
per-sample path it replaced, in the same run.

Upstream (untimed): a synthetic ReVOS root at 1280 × 720 (`synth` with the `large` preset's frame size,
fewer videos) run through ingest → sample → keyframes → cot → filter → difficulty. Timed, each in its own
process (so peak memory is the variant's own), exports on, serial runner:

- `per_sample` (the baseline: the stage before this change): every record decodes its own frames at
  full size (no DCT scaling), all records of a pool are built before the first is written.
- `ours`: the stage as it is (one unit of work per video across pools, each distinct frame decoded once,
  DCT-scaled decode where the target is smaller, records streamed to the writers).
- `ours_threads`: the same with the threads runner (2 workers).

Checks before any figure: the same keys and JSON members in every tar; where DCT scaling cannot apply
(the target is over half the source's short side, e.g. 560 from 720p) the tars are byte-identical.

    python bench/bench_shard.py [--videos 24] [--train-size 112 560]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results_io import write_result  # noqa: E402

VARIANTS = ("per_sample", "ours", "ours_threads")


def upstream(base: Path, n_videos: int, train_size: int) -> None:
    """Synthetic 720p root and every stage before shard, under `base`."""
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
    from stages.params.synth import SynthParams, SynthScale
    from stages.params.teacher import TeacherParams
    from stages.sample import sample_pools
    from stages.synth import generate_synthetic

    threads = RunnerParams(kind="threads", workers=2)
    if not (base / "root").is_dir():
        scale = SynthScale(n_videos_train=n_videos, n_videos_valid=max(2, n_videos // 8), min_frames=24,
                           max_frames=40, height=720, width=1280)
        generate_synthetic(SynthParams(size="large", large=scale), base / "root", threads)
        ingest(IngestParams(check_jpeg="header"), base / "root", base / "index", threads)
        sample_pools(SampleParams(grpo_size=10 * n_videos), 0, base / "index", base / "sample")
    for name in ("keyframes", "cot", "filter", "difficulty"):
        shutil.rmtree(base / name, ignore_errors=True)
    select_keyframes(KeyframesParams(train_size=train_size), 0, base / "root", base / "index", base / "sample",
                     base / "keyframes", threads)
    teacher = TeacherParams()
    generate_cot(teacher, CotParams(cache_dir=str(base / "cot_cache")), 0, base / "root", base / "keyframes",
                 base / "cot")
    filter_traces(FilterParams(), base / "cot", base / "keyframes", base / "filter")
    score_difficulty(DifficultyParams(cache_dir=str(base / "difficulty_cache")), teacher, base / "root",
                     base / "index", base / "keyframes", base / "difficulty")


def _full_decode_jpeg(root: Path, video: str, frame: str, size: int, quality: int) -> bytes:
    """The frame function before this change: full-size decode, bicubic, JPEG."""
    from PIL import Image

    from stages.core import revos

    with Image.open(revos.frame_path(root, video, frame)) as img:
        img = img.convert("RGB").resize((size, size), Image.Resampling.BICUBIC)
    buffer = io.BytesIO()
    img.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def child(variant: str, base: Path, out: Path) -> dict:
    """Run one variant in this process; returns seconds, samples and peak RSS."""
    import stages.shard as shard
    from stages.core.runner import RunnerParams
    from stages.params.shard import ShardParams

    if variant == "per_sample":  # the stage before: per-record decode at full size, pools built whole
        shard.frame_jpeg = _full_decode_jpeg
        shard.merged_units = lambda jobs_by_pool: [[(pool, job)] for pool, jobs in jobs_by_pool.items()
                                                   for job in jobs]
        streaming = shard._imap_units
        shard._imap_units = lambda units, runner: iter(list(streaming(units, runner)))
    runner = RunnerParams(kind="threads", workers=2) if variant == "ours_threads" else RunnerParams(kind="serial")
    start = time.perf_counter()
    report = shard.write_shards(ShardParams(), base / "root", base / "keyframes", base / "filter",
                                base / "difficulty", out, runner)
    seconds = time.perf_counter() - start
    samples = sum(v for k, v in report.metrics.items() if k.endswith(".samples"))
    return {"seconds": round(seconds, 3), "samples": samples, "samples_per_s": round(samples / seconds, 2),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def _members(folder: Path) -> dict[str, dict[str, str]]:
    """pool/tar → member name → sha256 of its bytes."""
    out = {}
    for path in sorted(folder.glob("*/shard-*.tar")):
        with tarfile.open(path) as tar:
            out[f"{path.parent.name}/{path.name}"] = {
                m.name: hashlib.sha256(tar.extractfile(m).read()).hexdigest() for m in tar.getmembers()}
    return out


def compare(a: Path, b: Path, frames_identical: bool) -> dict:
    """Assert same keys and JSON members (and frames where they must be identical)."""
    ma, mb = _members(a), _members(b)
    if ma.keys() != mb.keys():
        raise AssertionError(f"different tars: {sorted(ma)} vs {sorted(mb)}")
    same_frames = True
    for tar, members in ma.items():
        if members.keys() != mb[tar].keys():
            raise AssertionError(f"{tar}: different members")
        for name, digest in members.items():
            if name.endswith(".json") and digest != mb[tar][name]:
                raise AssertionError(f"{tar}/{name}: JSON differs")
            if name.endswith(".jpg") and digest != mb[tar][name]:
                same_frames = False
    if frames_identical and not same_frames:
        raise AssertionError("frames differ where DCT scaling cannot apply")
    return {"members": sum(len(m) for m in ma.values()), "frames_identical": same_frames,
            "tars_identical": all((a / t).read_bytes() == (b / t).read_bytes() for t in ma)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--videos", type=int, default=24, help="synthetic training videos (720p)")
    parser.add_argument("--train-size", type=int, nargs="+", default=[112, 560])
    parser.add_argument("--work", type=Path, default=None, help="reuse this folder's synthetic root")
    parser.add_argument("--out", type=Path, default=None, help="default: bench/results/shard.json")
    parser.add_argument("--child", nargs=3, metavar=("VARIANT", "BASE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        variant, base, out = args.child
        sys.stdout.write(json.dumps(child(variant, Path(base), Path(out))) + "\n")
        return
    base = args.work or Path(tempfile.mkdtemp(prefix="vrsflow-bench-shard-"))
    results = {}
    for size in args.train_size:
        upstream(base, args.videos, size)
        runs = {}
        for variant in VARIANTS:
            out = base / f"shards-{size}-{variant}"
            shutil.rmtree(out, ignore_errors=True)
            done = subprocess.run([sys.executable, __file__, "--child", variant, str(base), str(out)],
                                  capture_output=True, text=True, check=True)
            runs[variant] = json.loads(done.stdout.strip().splitlines()[-1])
            sys.stderr.write(f"train_size {size} {variant}: {runs[variant]}\n")
        dct_applies = size * 2 <= 720  # libjpeg scales by 1/2 at least only when the target fits twice
        checks = {v: compare(base / f"shards-{size}-per_sample", base / f"shards-{size}-{v}",
                             frames_identical=not dct_applies) for v in ("ours", "ours_threads")}
        checks["threads_vs_serial"] = compare(base / f"shards-{size}-ours", base / f"shards-{size}-ours_threads",
                                              frames_identical=True)
        results[f"train_size_{size}"] = {
            **runs, "checks": checks, "dct_scaled_decode": dct_applies,
            "speedup": round(runs["per_sample"]["seconds"] / runs["ours"]["seconds"], 2),
            "speedup_threads": round(runs["per_sample"]["seconds"] / runs["ours_threads"]["seconds"], 2)}
    frames = sum(1 for _ in (base / "root").rglob("*.jpg"))
    figures = {"source": "synthetic ReVOS layout, 1280x720 JPEG frames", "videos": args.videos,
               "source_frames": frames, **results, "target_speedup": 4.0}
    if args.work is None:
        shutil.rmtree(base, ignore_errors=True)
    write_result("shard", figures, "per_sample: the shard stage before this change (each record decodes its own "
                 "frames at full size; pools built whole, then written)", code=("stages/shard", "bench/bench_shard.py"),
                 out=args.out)


if __name__ == "__main__":
    main()
