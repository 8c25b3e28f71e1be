"""Benchmark: the keyframes stage (with the area computation it relies on) vs the released Veason-R1
GRPO dataset approach, on the same samples, asserting that both pick from the same frames.

Baseline (same samples, same process): for each sample decode every frame's mask of every target
object with pycocotools, take the union, count pixels, sort the areas, top-k. Ours: the per-frame areas
and boxes computed on the RLEs as ingest does (`rle.areas_and_boxes`, one streaming pass over mask_dict
for the sampled anno_ids — timed here, although ingest pays it once for every stage), plus the whole
keyframes stage (tables in, parquet out, incl. union RLEs, KTG points, AKS candidates). Before any
figure: per sample, the stage's per-frame union areas equal the decoded ones exactly, the top-k frames
from both are the same list, and the stage's keyframe is among them.

    python bench/bench_keyframes.py --root data/raw/synth-large [--index data/index-large] [--samples 400]

`--root` is a ReVOS-layout root (e.g. `vrsflow` synth with `synth.size: large`); `--index` reuses an
existing ingest output of that root (otherwise ingest runs first, untimed). The pools are drawn with
`sample` (untimed). Writes bench/results/keyframes.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from pycocotools import mask as mask_utils

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results_io import write_result  # noqa: E402
from stages.core import revos, rle  # noqa: E402
from stages.core.runner import RunnerParams  # noqa: E402
from stages.ingest import ingest  # noqa: E402
from stages.keyframes import select_keyframes  # noqa: E402
from stages.params.ingest import IngestParams  # noqa: E402
from stages.params.keyframes import KeyframesParams  # noqa: E402
from stages.params.sample import SampleParams  # noqa: E402
from stages.sample import sample_pools  # noqa: E402


def baseline(root: Path, samples: pd.DataFrame, videos: pd.DataFrame, top_k: int) -> dict[str, tuple]:
    """Decode every frame of every target; sample id → (union areas per frame, top-k frames)."""
    wanted = {int(a) for ids in samples["anno_ids"] for a in ids}
    masks = {int(k): v for k, v in revos.iter_json_object(root / revos.MASK_DICT) if k.isdigit() and int(k) in wanted}
    out = {}
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
        order = sorted((t for t in range(len(areas)) if areas[t] > 0), key=lambda t: (-areas[t], t))[:top_k]
        out[row.sample_id] = (areas, order)
    return out


def area_pass(root: Path, samples: pd.DataFrame) -> int:
    """What ingest computes for these samples: areas and boxes of each sampled anno_id on its RLE."""
    wanted = {int(a) for ids in samples["anno_ids"] for a in ids}
    done = 0
    for key, masks in revos.iter_json_object(root / revos.MASK_DICT):
        if key.isdigit() and int(key) in wanted:
            rle.areas_and_boxes(masks)
            done += 1
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, required=True, help="ReVOS-layout root")
    parser.add_argument("--index", type=Path, default=None, help="ingest output of --root (default: ingest it)")
    parser.add_argument("--samples", type=int, default=400, help="GRPO pool size timed")
    parser.add_argument("--out", type=Path, default=None, help="default: bench/results/keyframes.json")
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

    top_k = KeyframesParams().top_k
    t0 = time.perf_counter()
    n_annos = area_pass(args.root, samples)
    report = select_keyframes(KeyframesParams(train_size=560), 0, args.root, index, work / "sample", work / "kf",
                              RunnerParams(kind="serial"))
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    decoded = baseline(args.root, samples, videos, top_k)
    t_base = time.perf_counter() - t0
    rows = pd.read_parquet(work / "kf" / "grpo.parquet")
    for row in rows.itertuples(index=False):  # the same frames, or no figure
        areas, order = decoded[row.sample_id]
        ours_areas = [float(a) for a in row.video_union_areas]
        if ours_areas != [float(a) for a in areas]:
            raise AssertionError(f"{row.sample_id}: union areas differ from the decoded masks")
        ours_order = sorted((t for t in range(len(ours_areas)) if ours_areas[t] > 0),
                            key=lambda t: (-ours_areas[t], t))[:top_k]
        if ours_order != order or int(row.keyframe_idx) not in order:
            raise AssertionError(f"{row.sample_id}: keyframe {row.keyframe_idx} / top-k {ours_order} vs {order}")
    n = len(samples)
    frames = samples["video"].map(videos["n_frames"])
    figures = {
        "samples": n, "samples_checked": len(rows), "anno_ids": n_annos, "top_k": top_k,
        "mean_frames_per_video": float(frames.mean()),
        "mean_objects_per_sample": float(samples["n_instances"].mean()),
        "frame_size": sorted({f"{h}x{w}" for h, w in zip(videos["height"], videos["width"], strict=True)}),
        "mask_dict_mib": round((args.root / revos.MASK_DICT).stat().st_size / 2**20, 2),
        "ours_s": round(t_ours, 3), "baseline_s": round(t_base, 3),
        "ours_samples_per_s": round(n / t_ours, 2), "baseline_samples_per_s": round(n / t_base, 2),
        "speedup": round(t_base / t_ours, 2), "same_frames_asserted": True,
        "ours_rows": report.metrics.get("grpo", 0), "quarantined": report.metrics.get("quarantined", 0),
    }
    write_result("keyframes", figures, "released Veason-R1 GRPO data: decode every frame's masks of every target "
                 "(pycocotools), union, count, sort; ours includes the RLE area pass ingest does",
                 code=("stages/keyframes", "stages/core/rle.py", "bench/bench_keyframes.py"), out=args.out)


if __name__ == "__main__":
    main()
