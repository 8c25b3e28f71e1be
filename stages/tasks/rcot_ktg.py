"""RCoT-Seg KTG (keyframe target grounding): the keyframe alone at the keyframe size (840²) with the
video description → a box and a point inside each target (the centre of the maximum inscribed circle).

Reward: format (tags, well-formed boxes each with its point) + the VisionReasoner match (IoU > 0.5,
mean box-corner L1 < 10 px, point distance < 30 px with the point inside the box; 840² scale; Hungarian).
"""

from __future__ import annotations

from schemas.answer import BOXES_POINTS, GroundTruth
from stages.tasks.base import Task, boxes_at_keyframe, points_at_keyframe


def render(gt: GroundTruth) -> dict:
    return {"bbox_2d_list": boxes_at_keyframe(gt), "point_2d_list": points_at_keyframe(gt)}


TASK = Task(
    name="rcot_ktg", system="rcot-seg", template_set="rcot_ktg", schema=BOXES_POINTS,
    components=("format", "rcot_match"), render_answer=render, view="keyframe", inference="agentic",
    filter_rules=("keyframe_named", "location"), uses_description=True, needs_tasks=("rcot_vdg",),
    doc="boxes + inscribed-circle points on the keyframe",
)
