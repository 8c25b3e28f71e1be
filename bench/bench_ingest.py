"""Benchmark: index a ReVOS-layout root; area/box from RLE without decoding vs decoding every mask.

The baseline is the released Veason-R1 approach: decode every mask of every frame with pycocotools
and count pixels / take min-max of the nonzero pixels. Both run in the same process on the same
masks; the figure of merit is the throughput ratio. Also reports the peak memory of a full ingest.

    python bench/bench_ingest.py --root data/raw/synth-large [--out bench/out/ingest.json]

Generate the large synthetic data first, e.g.
    python -c "from stages.synth import generate_synthetic; ..."  or  dvc exp run -S synth.size=large synth
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
from pycocotools import mask as mask_utils

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stages.core import revos, rle  # noqa: E402
from stages.core.params import IngestParams  # noqa: E402
from stages.core.runner import RunnerParams  # noqa: E402
from stages.ingest import ingest  # noqa: E402


def load_masks(root: Path, limit: int) -> list[list[dict | None]]:
    masks = []
    for _, value in revos.iter_json_object(root / revos.MASK_DICT):
        masks.append(value)
        if len(masks) >= limit:
            break
    return masks


def ours(all_masks: list[list[dict | None]]) -> float:
    total = 0
    for masks in all_masks:
        areas, _ = rle.areas_and_boxes(masks)
        total += int(areas.sum())
    return total


def baseline(all_masks: list[list[dict | None]]) -> float:
    total = 0
    for masks in all_masks:
        for m in masks:
            if m is None:
                continue
            decoded = mask_utils.decode(rle.to_coco(m))
            total += int(decoded.sum())
            ys, xs = np.nonzero(decoded)
            if ys.size:
                _ = (xs.min(), ys.min(), xs.max(), ys.max())
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--annos", type=int, default=400, help="anno_ids timed in the area/box comparison")
    parser.add_argument("--out", type=Path, default=Path("bench/out/ingest.json"))
    args = parser.parse_args()

    all_masks = load_masks(args.root, args.annos)
    n_masks = sum(m is not None for masks in all_masks for m in masks)
    t0 = time.perf_counter()
    a = ours(all_masks)
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    b = baseline(all_masks)
    t_base = time.perf_counter() - t0
    assert a == b, "areas disagree"

    t0 = time.perf_counter()
    out = Path("/tmp/vrsflow-bench-index")
    report = ingest(IngestParams(check_jpeg="header"), args.root, out, RunnerParams(kind="threads", workers=2))
    t_ingest = time.perf_counter() - t0
    figures = {
        "masks_timed": n_masks,
        "ours_masks_per_s": n_masks / t_ours,
        "baseline_masks_per_s": n_masks / t_base,
        "speedup": t_base / t_ours,
        "full_ingest_s": t_ingest,
        "full_ingest_counts": {k: report.metrics[k] for k in ("videos", "expressions", "tracks")},
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "mask_dict_mib": (args.root / revos.MASK_DICT).stat().st_size / 2**20,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=1))
    sys.stdout.write(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
