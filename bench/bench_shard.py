"""Benchmark: shard stage write throughput (samples/s, MB/s of tar written).

Upstream tables come from a tiny synthetic ReVOS root run through ingest → sample → keyframes → cot →
filter → difficulty (untimed). Timed: `write_shards` with the serial runner (the baseline) and with the
thread runner, at the paper's train size (560) and the CPU default (112). Exports are switched off so
the figure is the tar writing itself (frame resize + JPEG encode + GT masks + tar).

    python bench/bench_shard.py [--videos 12] [--frames 10] [--out bench/out/shard.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stages.core.params import (  # noqa: E402
    CotParams,
    DifficultyParams,
    FilterParams,
    IngestParams,
    KeyframesParams,
    SampleParams,
    ShardParams,
    TeacherParams,
)
from stages.core.runner import RunnerParams  # noqa: E402
from stages.cot import generate_cot  # noqa: E402
from stages.difficulty import score_difficulty  # noqa: E402
from stages.filter import filter_traces  # noqa: E402
from stages.ingest import ingest  # noqa: E402
from stages.keyframes import select_keyframes  # noqa: E402
from stages.sample import sample_pools  # noqa: E402
from stages.shard import write_shards  # noqa: E402
from tests.revos_factory import VideoSpec, simple_video, write_root  # noqa: E402


def upstream(base: Path, n_videos: int, n_frames: int, train_size: int) -> None:
    """Synthetic root (frames 240 × 320, like a small ReVOS video) and every stage before shard."""
    videos = []
    for i in range(n_videos):
        spec = simple_video(f"B/train/v{i}", n_frames=n_frames)
        scale = 10  # 24 × 32 factory frames scaled up so resizing and JPEG work is realistic
        objects = {a: [None if b is None else tuple(v * scale for v in b) for b in boxes]
                   for a, boxes in spec.objects.items()}
        videos.append(VideoSpec(spec.key, height=24 * scale, width=32 * scale, n_frames=n_frames, objects=objects,
                                expressions=spec.expressions))
    write_root(base / "root", videos)
    ingest(IngestParams(check_jpeg="header"), base / "root", base / "index", RunnerParams(kind="threads"))
    sample_pools(SampleParams(sft_first_k=1, grpo_size=n_videos), 0, base / "index", base / "sample")
    select_keyframes(KeyframesParams(train_size=train_size), 0, base / "root", base / "index", base / "sample",
                     base / "keyframes")
    teacher = TeacherParams()
    generate_cot(teacher, CotParams(cache_dir=str(base / "cot_cache")), 0, base / "root", base / "keyframes",
                 base / "cot")
    filter_traces(FilterParams(), base / "cot", base / "keyframes", base / "filter")
    score_difficulty(DifficultyParams(cache_dir=str(base / "difficulty_cache")), teacher, base / "root",
                     base / "index", base / "keyframes", base / "difficulty")


def timed(base: Path, runner: RunnerParams) -> dict:
    out = base / f"shards-{runner.kind}"
    shutil.rmtree(out, ignore_errors=True)
    params = ShardParams(export_sharegpt=False, export_verl=False)
    started = time.perf_counter()
    report = write_shards(params, base / "root", base / "keyframes", base / "filter", base / "difficulty", out, runner)
    seconds = time.perf_counter() - started
    samples = sum(v for k, v in report.metrics.items() if k.endswith(".samples"))
    size = sum(p.stat().st_size for p in out.rglob("*.tar"))
    return {"samples": samples, "seconds": round(seconds, 3), "samples_per_s": round(samples / seconds, 2),
            "mb_per_s": round(size / seconds / 1e6, 2), "tar_mb": round(size / 1e6, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--videos", type=int, default=12, help="synthetic training videos")
    parser.add_argument("--frames", type=int, default=10, help="frames per video")
    parser.add_argument("--workers", type=int, default=2, help="thread runner workers")
    parser.add_argument("--out", type=Path, default=Path("bench/out/shard.json"))
    args = parser.parse_args()
    results = {}
    for size in (112, 560):
        base = Path(tempfile.mkdtemp(prefix="vrsflow-bench-shard-"))
        upstream(base, args.videos, args.frames, size)
        serial = timed(base, RunnerParams(kind="serial"))
        threads = timed(base, RunnerParams(kind="threads", workers=args.workers))
        results[f"train_size_{size}"] = {"serial": serial, "threads": threads,
                                         "threads_vs_serial": round(threads["samples_per_s"]
                                                                    / serial["samples_per_s"], 3)}
        shutil.rmtree(base, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    sys.stdout.write(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
