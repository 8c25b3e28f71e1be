"""Does a tiny SAM2 segment what its box points at? Per object of the `pretrain_sam2` stage's held-out videos: the
mask SAM2 returns on the frame its box prompts (each object alone, through the evaluation's SAM2 path), against
the prompted object and against every other object on that frame.

For each checkpoint (`--model NAME=PATH`, config `--config`): the mean IoU with the prompted object, the share of
objects whose mask overlaps another object more than the prompted one ("elsewhere"), the share with an empty mask,
and the same with SAM2's inference fallback switched off (`dynamic_multimask_via_stability`: a box whose single mask
is unstable takes the best of the three candidates SAM2 gives a click). The box itself filled as the mask is the
baseline. IoU is written here from its definition, not taken from the stage.

    python research/issue47/sam2_prompt_check.py --model committed=models/pretrain_sam2/model.pt \
        --out research/issue47/results/sam2-prompt-check.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.results_io import portable_path, write_result  # noqa: E402
from stages.params.synth import SynthScale  # noqa: E402
from stages.pretrain_sam2 import CHECK_SEED  # noqa: E402
from stages.pretrain_sam2.clips import check_videos, mask_box  # noqa: E402
from stages.sam2_wrapper import BoxGroup, load_video_predictor, propagate_groups  # noqa: E402


def iou(a: np.ndarray, b: np.ndarray) -> float:
    """|a ∩ b| / |a ∪ b|; 1 when both are empty."""
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 1.0


def prompted_masks(predictor, videos) -> list[dict]:
    """Per object: its mask on its prompted frame (where it is largest) from its box alone, scored."""
    rows = []
    for frames, masks in videos:
        areas = masks.reshape(masks.shape[0], masks.shape[1], -1).sum(-1)
        for o in (o for o in range(masks.shape[1]) if areas[:, o].any()):
            k = int(np.argmax(areas[:, o]))
            x1, y1, x2, y2 = mask_box(masks[k, o])
            predicted = propagate_groups(predictor, [frames[k]], [BoxGroup(0, [[x1, y1, x2, y2]])])[0][0][0]
            box = np.zeros_like(masks[k, o])
            box[y1:y2, x1:x2] = True
            others = [iou(masks[k, q], predicted) for q in range(masks.shape[1]) if q != o and masks[k, q].any()]
            rows.append({"iou": iou(masks[k, o], predicted), "box_iou": iou(masks[k, o], box),
                         "elsewhere": bool(others) and max(others) > iou(masks[k, o], predicted),
                         "empty": not predicted.any(), "area": float(masks[k, o].mean())})
    return rows


def summary(rows: list[dict]) -> dict:
    return {"objects": len(rows), "prompted_iou": round(float(np.mean([r["iou"] for r in rows])), 4),
            "elsewhere": round(float(np.mean([r["elsewhere"] for r in rows])), 4),
            "empty": round(float(np.mean([r["empty"] for r in rows])), 4),
            "box_as_mask_iou": round(float(np.mean([r["box_iou"] for r in rows])), 4),
            "object_area_share": round(float(np.mean([r["area"] for r in rows])), 4)}


def held_out_command(description: str) -> tuple[argparse.Namespace, list]:
    """The command line of a script that checks SAM2 checkpoints (`--model NAME=PATH` …) on the stage's held-out
    videos, parsed, and those videos; torch on one thread, as the stage's check runs."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", action="append", required=True, help="NAME=PATH of a SAM2 checkpoint")
    parser.add_argument("--config", default="models/pretrain_sam2/config.yaml",
                        help="the SAM2 config of a checkpoint without a config.yaml beside it")
    parser.add_argument("--videos", type=int, default=8, help="held-out videos (the stage checks 8)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    return args, check_videos(CHECK_SEED, args.videos, SynthScale())


def checkpoint_config(checkpoint: str, default: str) -> str:
    """The config a checkpoint was saved with: the config.yaml beside it (a stage's out_dir), else `default`."""
    beside = Path(checkpoint).with_name("config.yaml")
    return str(beside) if beside.is_file() else default


def main() -> None:
    args, videos = held_out_command(__doc__.splitlines()[0])
    figures = {"videos": args.videos, "models": {}}
    for item in args.model:
        name, path = item.split("=", 1)
        predictor = load_video_predictor(path, checkpoint_config(path, args.config), "cpu")
        with_fallback = summary(prompted_masks(predictor, videos))
        predictor.sam_mask_decoder.dynamic_multimask_via_stability = False
        figures["models"][name] = {"checkpoint": portable_path(str(Path(path).resolve())),
                                   "with_fallback": with_fallback,
                                   "single_mask_only": summary(prompted_masks(predictor, videos))}
        print(name, figures["models"][name], flush=True)
    write_result(args.out.stem, figures, "the box filled as the mask (box_as_mask_iou)", out=args.out)


if __name__ == "__main__":
    main()
