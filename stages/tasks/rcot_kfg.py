"""RCoT-Seg KFG (keyframe generation): the whole video at the video size → the keyframe timestamp.

The first step of RCoT-Seg's temporal video reasoning: the frames shown are every frame the keyframes
stage sampled (`keyframes.n_frames` at or above the video length shows the full video) at `train_size`
(RCoT-Seg: 448²). Reward: format + keyframe (area ratio at the chosen frame). At inference its answer
feeds the AKS self-check (`inference="agentic"`).
"""

from __future__ import annotations

from schemas.answer import KEYFRAME, GroundTruth
from stages.tasks.base import Task


def render(gt: GroundTruth) -> dict:
    return {"keyframe_timestamp": int(gt.keyframe_timestamp)}


TASK = Task(
    name="rcot_kfg", system="rcot-seg", template_set="veason", schema=KEYFRAME, components=("format", "keyframe"),
    render_answer=render, view="sampled", inference="agentic", filter_rules=("keyframe_named", "location"),
    doc="keyframe timestamp over the full video",
)
