"""Benchmark: the keyframes stage vs the released Veason-R1 GRPO dataset approach.

Baseline (same samples, same process): for each sample decode every frame's mask of every target
object with pycocotools, take the union, count pixels, sort the areas and draw among the top-k.
Ours: areas from ingest's RLE-derived tracks + one streaming pass over mask_dict for the union RLEs;
only each object's keyframe mask is decoded (for its KTG point). Ratio of samples per second.

    python bench/bench_keyframes.py --root /path/to/revos-layout-root [--samples 400]
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
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--samples", type=int, default=400, help="GRPO pool size timed")
    parser.add_argument("--out", type=Path, default=Path("bench/out/keyframes.json"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vrsflow-bench-kf-"))
    ingest(IngestParams(check_jpeg="header"), args.root, work / "index", RunnerParams(kind="threads"))
    sample_pools(SampleParams(grpo_size=args.samples, sft_first_k=1), 0, work / "index", work / "sample")
    pools = [pd.read_parquet(work / "sample" / f"{p}.parquet") for p in ("sft", "grpo", "eval")]
    samples = pd.concat(pools)
    samples = samples[samples["n_instances"] > 0]
    videos = pd.read_parquet(work / "index" / "videos.parquet").set_index("video")

    t0 = time.perf_counter()
    select_keyframes(KeyframesParams(), 0, args.root, work / "index", work / "sample", work / "kf",
                     RunnerParams(kind="serial"))
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    n = baseline(args.root, samples, videos, 5)
    t_base = time.perf_counter() - t0
    figures = {"samples": n, "ours_samples_per_s": n / t_ours, "baseline_samples_per_s": n / t_base,
               "speedup": t_base / t_ours, "note": "ours includes KTG points, AKS candidates and union RLEs"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=1))
    sys.stdout.write(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
