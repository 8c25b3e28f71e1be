"""RCoT-Seg VDG (video description generation): the whole video → a description of the scene, the events
in order and the relations the expression needs. Its accepted traces are the descriptions that AKS, KTG
and inference are given; its training response is that trace as the answer's `description` (the thinking
is a fixed sentence, so the text is not repeated). Reward: format only (a description has no verifiable
ground truth).
"""

from __future__ import annotations

from schemas.answer import DESCRIPTION, GroundTruth
from stages.tasks.base import Task


def render(gt: GroundTruth) -> dict:
    if not gt.description:
        raise ValueError("a VDG ground truth needs the accepted description")
    return {"description": gt.description}


TASK = Task(
    name="rcot_vdg", system="rcot-seg", template_set="rcot_description", schema=DESCRIPTION, components=("format",),
    render_answer=render, view="sampled", inference="description",
    response_think="I describe the scene and its objects, the events in order and the relations the question needs.",
    doc="video description",
)
