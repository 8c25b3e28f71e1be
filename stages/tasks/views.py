"""What a task shows of a keyframes row, and the ground truth at that view.

- `sampled`: the N sampled frames at `train_size` (Veason-R1; RCoT-Seg KFG and VDG, whose "full video" is
  every frame when `keyframes.n_frames` reaches the video length);
- `keyframe`: the keyframe alone at `keyframe_size` (RCoT-Seg KTG, VideoSeg-R1's target frame);
- `candidate`: the AKS candidate frame alone at `keyframe_size` (RCoT-Seg AKS).

Boxes, areas and KTG points are stored at train size in the keyframes table and scaled here; masks are
resized from the original resolution with nearest neighbour.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
from PIL import Image

from schemas.answer import GroundTruth
from stages.core import rle
from stages.tasks.base import Task


@dataclass(frozen=True)
class FrameView:
    """The frames a task shows: their files, timestamps, and the square side they are shown at."""

    frame_names: list[str]
    timestamps: list[int]
    size: int


def frame_view(sample: dict, task: Task) -> FrameView:
    """The frames `task` shows of a keyframes row."""
    if task.view == "sampled":
        return FrameView([str(n) for n in sample["frame_names"]], [int(t) for t in sample["timestamps"]],
                         int(sample["train_size"]))
    size = int(sample["keyframe_size"])
    if task.view == "keyframe":
        position = int(sample["keyframe_pos"])
        return FrameView([str(sample["frame_names"][position])], [int(sample["keyframe_timestamp"])], size)
    return FrameView([str(sample["aks_frame_name"])], [int(sample["aks_frame_idx"])], size)


def _resize_mask(text: str, height: int, width: int, size: int) -> dict:
    mask = rle.decode(json.loads(text), height, width)
    small = np.asarray(Image.fromarray(mask.astype(np.uint8) * 255).resize((size, size), Image.Resampling.NEAREST))
    return rle.encode(small > 127)


def _scaled(values, factor: float):
    if values is None:
        return None
    return [float(v) * factor for v in values]


def task_ground_truth(sample: dict, task: Task, difficulty: dict | None = None,
                      description: str | None = None) -> GroundTruth:
    """The ground truth of a keyframes row for `task`, at the task's view.

    Args:
        sample: a keyframes row (KeyframesSchema).
        task: the task asked.
        difficulty: the difficulty row (difficulty, token_budget) or None.
        description: the accepted VDG description of the sample (RCoT-Seg), or None.
    """
    height, width = int(sample["height"]), int(sample["width"])
    view = frame_view(sample, task)
    factor = view.size / int(sample["train_size"])
    area_factor = factor * factor
    if task.view == "sampled":
        positions = list(range(len(view.timestamps)))
        boxes = [[_scaled(b, factor) for b in sample["boxes"][i]] for i in positions]
        areas = [[float(a) * area_factor for a in sample["areas"][i]] for i in positions]
        unions = [float(sample["union_areas"][i]) * area_factor for i in positions]
        masks = [_resize_mask(sample["union_masks"][i], height, width, view.size) for i in positions]
        keyframe = int(sample["keyframe_timestamp"])
    elif task.view == "keyframe":
        i = int(sample["keyframe_pos"])
        boxes = [[_scaled(b, factor) for b in sample["boxes"][i]]]
        areas = [[float(a) * area_factor for a in sample["areas"][i]]]
        unions = [float(sample["union_areas"][i]) * area_factor]
        masks = [_resize_mask(sample["union_masks"][i], height, width, view.size)]
        keyframe = int(sample["keyframe_timestamp"])
    else:
        boxes = [[_scaled(b, factor) for b in sample["aks_boxes"]]]
        areas = [[float(a) * area_factor for a in sample["aks_areas"]]]
        unions = [float(sum(areas[0]))]
        masks = [_resize_mask(sample["aks_union_mask"], height, width, view.size)]
        keyframe = int(sample["aks_frame_idx"])
    points = [_scaled(p, factor) for p in sample["ktg_points"]]
    return GroundTruth(
        timestamps=view.timestamps, image_size=[view.size, view.size], boxes=boxes, areas=areas,
        union_areas=unions, masks=masks, keyframe_timestamp=keyframe, points=points,
        aks_option=str(sample["aks_option"]),
        difficulty=None if difficulty is None else float(difficulty["difficulty"]),
        token_budget=None if difficulty is None else int(difficulty["token_budget"]),
        task=task.name, description=description or None,
    )
