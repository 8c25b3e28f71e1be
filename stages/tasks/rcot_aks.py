"""RCoT-Seg AKS (agentic keyframe selection): the candidate frame at the keyframe size (840²) with the
video description and the expression → option A (a valid keyframe) or B (the target is not there).

Option A candidates are the largest-area frame, option B candidates a zero-area frame, 1:1 per pool
(keyframes stage). Reward: λ_f · format + λ_a · exact option (RCoT-Seg: λ_f = 1, λ_a = 2; params
`reward.weights.format` / `reward.weights.aks_option`). Teacher traces are kept only when their final
option matches the ground truth.
"""

from __future__ import annotations

from schemas.answer import OPTION, GroundTruth
from stages.tasks.base import Task


def render(gt: GroundTruth) -> dict:
    if gt.aks_option is None:
        raise ValueError("an AKS ground truth needs aks_option")
    return {"option": gt.aks_option}


TASK = Task(
    name="rcot_aks", system="rcot-seg", template_set="rcot_aks", schema=OPTION, components=("format", "aks_option"),
    render_answer=render, view="candidate", inference="agentic", filter_rules=("aks_option",),
    uses_description=True, needs_tasks=("rcot_vdg",),
    doc="A/B judgment of a candidate keyframe",
)
