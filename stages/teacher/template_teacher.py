"""The offline `template` teacher: three-step reasoning written from the annotations.

It states only what the ground truth supports — how the target moves across the sampled frames, why
the keyframe is best (largest visible area among the frames shown), and where the target is at the
keyframe (left / right / top / bottom / centre from its box). Traces are labelled backend="template".
Location words come from `location_of`, which the filter's faithfulness check uses too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from stages.teacher.client import ChatRequest

TEACHER_NAME = "template-teacher-v1"


def location_of(box: Sequence[float], width: float, height: float) -> tuple[str, str]:
    """(horizontal, vertical) thirds of a box centre: ("left"|"centre"|"right", "top"|"middle"|"bottom")."""
    cx = (box[0] + box[2]) / 2 / width
    cy = (box[1] + box[3]) / 2 / height
    horizontal = "left" if cx < 1 / 3 else "right" if cx > 2 / 3 else "centre"
    vertical = "top" if cy < 1 / 3 else "bottom" if cy > 2 / 3 else "middle"
    return horizontal, vertical


def location_phrase(box: Sequence[float], width: float, height: float) -> str:
    """'the top left', 'the centre', 'the bottom' … of a frame."""
    horizontal, vertical = location_of(box, width, height)
    if horizontal == "centre" and vertical == "middle":
        return "the centre"
    if horizontal == "centre":
        return f"the {vertical}"
    if vertical == "middle":
        return f"the {horizontal}"
    return f"the {vertical} {horizontal}"


def union_box(boxes: Sequence[Sequence[float] | None]) -> list[float] | None:
    """Smallest box holding every present box."""
    present = [b for b in boxes if b is not None]
    if not present:
        return None
    arr = np.asarray(present, dtype=float)
    return [float(arr[:, 0].min()), float(arr[:, 1].min()), float(arr[:, 2].max()), float(arr[:, 3].max())]


def _motion_phrase(first: list[float], last: list[float], size: float) -> str:
    dx = (last[0] + last[2] - first[0] - first[2]) / 2 / size
    dy = (last[1] + last[3] - first[1] - first[3]) / 2 / size
    parts = []
    if abs(dx) > 0.08:
        parts.append("right" if dx > 0 else "left")
    if abs(dy) > 0.08:
        parts.append("down" if dy > 0 else "up")
    return "moves " + " and ".join(parts) if parts else "stays roughly in place"


def write_trace(context: dict[str, Any]) -> str:
    """Three steps from a sample's annotations (keys: expression, timestamps, keyframe_timestamp, boxes
    (per frame, per object, train size), union_areas, train_size, n_instances)."""
    timestamps = list(context["timestamps"])
    size = float(context["train_size"])
    per_frame = [union_box(objs) for objs in context["boxes"]]
    key_pos = timestamps.index(context["keyframe_timestamp"])
    visible = [i for i, b in enumerate(per_frame) if b is not None]
    n = int(context["n_instances"])
    noun = "target" if n == 1 else f"{n} targets"
    first, last = visible[0], visible[-1]
    motion = _motion_phrase(per_frame[first], per_frame[last], size)
    step1 = (f"Step 1: The video is shown through {len(timestamps)} frames from {timestamps[0]}s to {timestamps[-1]}s. "
             f"The {noun} first appear{'s' if n == 1 else ''} near {location_phrase(per_frame[first], size, size)} "
             f"at {timestamps[first]}s and {motion} until {timestamps[last]}s, where "
             f"{'it is' if n == 1 else 'they are'} near {location_phrase(per_frame[last], size, size)}.")
    hidden = [f"{timestamps[i]}s" for i in range(len(timestamps)) if per_frame[i] is None]
    if hidden:
        step1 += f" {'It is' if n == 1 else 'They are'} not visible at {', '.join(hidden)}."
    areas = np.asarray(context["union_areas"], dtype=float)
    share = 100.0 * areas[key_pos] / (size * size)
    rank = int((areas > areas[key_pos]).sum())
    why = "the largest visible extent of all the frames shown" if rank == 0 else \
        "one of the largest visible extents among the frames shown"
    step2 = (f"Step 2: Looking for \"{context['expression']}\", the frame at {context['keyframe_timestamp']}s is the "
             f"keyframe: there the {noun} {'has' if n == 1 else 'have'} {why} (about {share:.0f}% of the image), "
             f"so the match with the description is clearest at that moment.")
    key_boxes = [b for b in context["boxes"][key_pos] if b is not None]
    places = ", ".join(location_phrase(b, size, size) for b in key_boxes)
    step3 = (f"Step 3: At {context['keyframe_timestamp']}s the {noun} {'is' if n == 1 else 'are'} in {places} of "
             f"the frame, which is what \"{context['expression']}\" refers to.")
    return "\n".join([step1, step2, step3])


def template_writer(request: ChatRequest) -> str:
    """`TeacherClient` hook for the template backend."""
    return write_trace(request.context)
