"""Benchmark: the keyframes stage vs the released Veason-R1 GRPO dataset approach.

Baseline (same samples, same process): for each sample decode every frame's mask of every target
object with pycocotools, take the union, count pixels, sort the areas and draw among the top-k.
Ours: areas from ingest's RLE-derived tracks + one streaming pass over mask_dict for the union RLEs;
only each object's keyframe mask is decoded (for its KTG point). Ratio of samples per second.

    python bench/bench_keyframes.py --root data/raw/synth-large [--index data/index-large] [--samples 400]

`--root` is a ReVOS-layout root (e.g. `vrsflow` synth with `synth.size: large`); `--index` reuses an
existing ingest output of that root (otherwise ingest runs first, untimed). The pools are drawn with
`sample` (untimed); the keyframes stage and the baseline are timed on the same samples, serially.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from pycocotools import mask as mask_utils

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stages.core import revos, rle  # noqa: E402
from stages.core.params import IngestParams, KeyframesParams, SampleParams  # noqa: E402
from stages.core.runner import RunnerParams  # noqa: E402
from stages.ingest import ingest  # noqa: E402
from stages.keyframes import select_keyframes  # noqa: E402
from stages.sample import sample_pools  # noqa: E402


def baseline(root: Path, samples: pd.DataFrame, videos: pd.DataFrame, top_k: int) -> int:
    """Decode every frame of every target; returns the number of samples processed."""
    wanted = {int(a) for ids in samples["anno_ids"] for a in ids}
    masks = {int(k): v for k, v in revos.iter_json_object(root / revos.MASK_DICT) if k.isdigit() and int(k) in wanted}
    rng = np.random.default_rng(0)
    for row in samples.itertuples(index=False):
        video = videos.loc[row.video]
        areas = []
        for t in range(int(video["n_frames"])):
            union = np.zeros((int(video["height"]), int(video["width"])), dtype=np.uint8)
            for anno in row.anno_ids:
                m = masks[int(anno)][t]
                if m is not None:
                    union |= mask_utils.decode(rle.to_coco(m))
            areas.append(int(union.sum()))
        order = np.argsort(areas)[::-1][:top_k]
        _ = int(order[rng.integers(len(order))])
    return len(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, required=True, help="ReVOS-layout root")
    parser.add_argument("--index", type=Path, default=None, help="ingest output of --root (default: ingest it)")
    parser.add_argument("--samples", type=int, default=400, help="GRPO pool size timed")
    parser.add_argument("--out", type=Path, default=Path("bench/out/keyframes.json"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vrsflow-bench-kf-"))
    index = args.index
    if index is None:
        index = work / "index"
        ingest(IngestParams(check_jpeg="header"), args.root, index, RunnerParams(kind="threads"))
    # SFT and evaluation empty so that exactly the GRPO pool is timed
    sample_pools(SampleParams(sft_first_k=1, sft_size=0, grpo_size=args.samples, include_no_target_eval=False),
                 0, index, work / "sample")
    for pool in ("sft", "eval"):
        empty = pd.read_parquet(work / "sample" / f"{pool}.parquet").iloc[:0]
        empty.to_parquet(work / "sample" / f"{pool}.parquet", index=False)
    samples = pd.read_parquet(work / "sample" / "grpo.parquet")
    videos = pd.read_parquet(index / "videos.parquet").set_index("video")

    t0 = time.perf_counter()
    report = select_keyframes(KeyframesParams(train_size=560), 0, args.root, index, work / "sample", work / "kf",
                              RunnerParams(kind="serial"))
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    n = baseline(args.root, samples, videos, 5)
    t_base = time.perf_counter() - t0
    frames = samples["video"].map(videos["n_frames"])
    figures = {
        "samples": n, "mean_frames_per_video": float(frames.mean()),
        "mean_objects_per_sample": float(samples["n_instances"].mean()),
        "frame_size": sorted({f"{h}x{w}" for h, w in zip(videos["height"], videos["width"], strict=True)}),
        "mask_dict_mib": (args.root / revos.MASK_DICT).stat().st_size / 2**20,
        "ours_s": t_ours, "baseline_s": t_base,
        "ours_samples_per_s": n / t_ours, "baseline_samples_per_s": n / t_base, "speedup": t_base / t_ours,
        "ours_rows": report.metrics.get("grpo", 0), "quarantined": report.metrics.get("quarantined", 0),
        "note": "both serial, one process; ours = the whole keyframes stage (tables in, parquet out, incl. "
                "KTG points, AKS candidates, union RLEs); baseline = decode every frame's masks, sort areas",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=1))
    sys.stdout.write(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
