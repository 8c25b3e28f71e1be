"""VideoSeg-R1: the target frame → a box, a positive (centre) point and negative points per target.

Training shows the keyframe alone (the target frame HTFS finds at inference) at the keyframe size.
Reward: VisionReasoner format + accuracy (the thresholded IoU / box-L1 / point match) + non-repeat,
the negative-point reward (1/K per negative point within τ_neg of the target, outside it) and, when
`reward.length_penalty` is on, the soft length penalty from the difficulty budget. `consistency` may be
enabled too: its SAM2 prompt is the box with the positive and negative points.
The ground truth renders one negative point per target just outside its mask (within τ_neg).
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from schemas.answer import BOXES_POINTS_NEGATIVE, GroundTruth
from stages.core import rle
from stages.tasks.base import Task, boxes_at_keyframe, points_at_keyframe

NEGATIVE_RING = 2  # pixels around the target mask the rendered negative point is taken from


def negative_points(gt: GroundTruth) -> list[list[float]]:
    """One negative point per present target: the pixel of the 2-px ring around the target mask (binary
    dilation minus the mask) nearest to the target's box centre, as integer pixel coordinates."""
    position = gt.frame_position(gt.keyframe_timestamp)
    height, width = gt.image_size
    mask = rle.decode(gt.masks[position], height, width)
    ring = ndimage.binary_dilation(mask, iterations=NEGATIVE_RING) & ~mask
    ys, xs = np.nonzero(ring)
    out = []
    if not len(xs):
        return out
    for x1, y1, x2, y2 in boxes_at_keyframe(gt):
        d = (xs + 0.5 - (x1 + x2) / 2) ** 2 + (ys + 0.5 - (y1 + y2) / 2) ** 2
        i = int(np.argmin(d))
        out.append([int(xs[i]), int(ys[i])])  # the ring pixel itself (integer pixel coordinates)
    return out


def render(gt: GroundTruth) -> dict:
    return {"bbox_2d_list": boxes_at_keyframe(gt), "point_2d_list": points_at_keyframe(gt),
            "negative_point_2d_list": negative_points(gt)}


TASK = Task(
    name="videoseg", system="videoseg-r1", template_set="rcot_ktg", schema=BOXES_POINTS_NEGATIVE,
    components=("format", "rcot_match", "non_repeat", "negative_point", "consistency"), render_answer=render,
    view="keyframe", inference="htfs", filter_rules=("keyframe_named", "location"),
    doc="boxes + positive and negative points on the target frame",
)
