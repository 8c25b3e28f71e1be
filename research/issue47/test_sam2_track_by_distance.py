"""sam2_track_by_distance.py: where a tracked mask lands (empty, on the object, on another one, elsewhere)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sam2_track_by_distance import landings, lands


def square(y0: int, x0: int, side: int = 4, size: int = 16) -> np.ndarray:
    mask = np.zeros((size, size), dtype=bool)
    mask[y0:y0 + side, x0:x0 + side] = True
    return mask


def test_a_mask_lands_where_most_of_its_pixels_are() -> None:
    target, other = square(0, 0), square(8, 8)
    assert lands(np.zeros_like(target), target, other) == "empty"
    assert lands(target, target, other) == "on the object"
    assert lands(other, target, other) == "on another object"
    assert lands(square(0, 10), target, other) == "elsewhere"  # background only
    # 16 pixels: 8 on the target, 8 on the background: not more than half on the target
    assert lands(square(0, 2), target, other) == "elsewhere"
    # 16 pixels: 12 on the target, 4 on the background
    assert lands(square(0, 1), target, other) == "on the object"
    # a mask straddling both: 4 pixels on the target, 9 on the other, 3 on neither (16): another object
    straddle = np.zeros((16, 16), dtype=bool)
    straddle[3, 0:4] = True
    straddle[8:11, 8:11] = True
    straddle[12, 0:3] = True
    assert lands(straddle, target, other) == "on another object"


def test_landings_count_tracked_frames_with_the_object_visible_only() -> None:
    rows = [{"offset": 0, "present": True, "lands": "on the object", "iou": 0.9},  # the prompted frame
            {"offset": 1, "present": True, "lands": "on another object", "iou": 0.0},
            {"offset": -1, "present": True, "lands": "on the object", "iou": 0.6},
            {"offset": 2, "present": True, "lands": "on the object", "iou": 0.8},
            {"offset": 3, "present": False, "lands": "empty", "iou": 1.0}]  # absent: not a miss or a hit
    out = landings(rows)
    assert out["frames"] == 3
    assert out["on the object"] == {"share": round(2 / 3, 4), "mean_iou": 0.7}
    assert out["on another object"] == {"share": round(1 / 3, 4), "mean_iou": 0.0}
    assert out["empty"] == {"share": 0.0, "mean_iou": None}


def test_the_kept_candidate_is_the_mask_sam2_gave() -> None:
    """The decoder hook reads the mask SAM2 kept on each tracked frame: its IoU is the tracked mask's (within the
    upsampling paths' difference), and no better than the best candidate's."""
    import torch
    from sam2_track_by_distance import candidate_ious, tracked_ious

    from stages.params.synth import SynthScale
    from stages.pretrain_sam2.clips import check_videos
    from stages.sam2_wrapper import load_video_predictor

    torch.set_num_threads(1)
    committed = Path(__file__).resolve().parents[2] / "models" / "pretrain_sam2"  # whatever the worker's cwd
    predictor = load_video_predictor(str(committed / "model.pt"), str(committed / "config.yaml"), "cpu")
    videos = check_videos(0, 2, SynthScale())
    all_rows = tracked_ious(predictor, videos)
    out = candidate_ious(all_rows)
    rows = [r for r in all_rows if r["offset"] != 0 and r["present"]]
    assert out["frames"] == len(rows) > 0
    assert abs(out["kept_mask_iou"] - np.mean([r["iou"] for r in rows])) < 0.02
    assert out["kept_mask_iou"] <= out["best_candidate_iou"]
    assert 0 <= out["kept_misses_with_the_object_among_candidates"] <= out["kept_misses"] <= out["frames"]
