"""Veason-R1: N sampled frames → the keyframe timestamp and a box per target (paper eq. 3–8).

Reward: format + keyframe (area ratio) + spatial (Hungarian box IoU) + consistency (SAM2 propagation mIoU).
The ground truth renders as the GT keyframe and the boxes of the objects present there; a no-target
expression renders as the keyframe and an empty box list.
"""

from __future__ import annotations

from schemas.answer import KEYFRAME_BOXES, GroundTruth
from stages.tasks.base import Task, boxes_at_keyframe


def render(gt: GroundTruth) -> dict:
    return {"keyframe_timestamp": int(gt.keyframe_timestamp), "bbox_2d_list": boxes_at_keyframe(gt)}


TASK = Task(
    name="veason", system="veason-r1", template_set="veason", schema=KEYFRAME_BOXES,
    components=("format", "keyframe", "spatial", "consistency"), render_answer=render, view="sampled",
    inference="single", filter_rules=("keyframe_named", "location"), supports_no_target=True,
    doc="keyframe timestamp + boxes over N sampled frames",
)
