"""The offline `template` teacher: three-step reasoning written from the annotations.

It states only what the ground truth supports — how the target moves across the sampled frames, why
the keyframe is best (largest visible area among the frames shown), and where the target is at the
keyframe (left / right / top / bottom / centre from its box). Traces are labelled backend="template".
One writer per template set (`WRITERS`): Veason-R1's three steps, and RCoT-Seg's KTG (plus a point
inside each target), AKS (candidate valid or not, ending in `Answer: A|B`) and video description.
Location words come from `location_of` (the filter checks them with its own, independent rule).
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


def _noun(n: int) -> str:
    return "target" if n == 1 else f"{n} targets"


def _summary(context: dict[str, Any], per_frame: list, label: str = "Step 1") -> str:
    """What moves where across the sampled frames (and where the target is not visible)."""
    timestamps = list(context["timestamps"])
    size = float(context["train_size"])
    n = int(context["n_instances"])
    visible = [i for i, b in enumerate(per_frame) if b is not None]
    if not visible:
        return (f"{label}: The video is shown through {len(timestamps)} frames from {timestamps[0]}s to "
                f"{timestamps[-1]}s; nothing in them matches the description.")
    first, last = visible[0], visible[-1]
    motion = _motion_phrase(per_frame[first], per_frame[last], size)
    text = (f"{label}: The video is shown through {len(timestamps)} frames from {timestamps[0]}s to "
            f"{timestamps[-1]}s. The {_noun(n)} first appear{'s' if n == 1 else ''} near "
            f"{location_phrase(per_frame[first], size, size)} at {timestamps[first]}s and {motion} until "
            f"{timestamps[last]}s, where {'it is' if n == 1 else 'they are'} near "
            f"{location_phrase(per_frame[last], size, size)}.")
    hidden = [f"{timestamps[i]}s" for i in range(len(timestamps)) if per_frame[i] is None]
    if hidden:
        text += f" {'It is' if n == 1 else 'They are'} not visible at {', '.join(hidden)}."
    return text


def _why_keyframe(context: dict[str, Any]) -> str:
    """Why the given keyframe matches best: the largest visible extent among the frames shown."""
    timestamps = list(context["timestamps"])
    size = float(context["train_size"])
    n = int(context["n_instances"])
    key_pos = timestamps.index(context["keyframe_timestamp"])
    areas = np.asarray(context["union_areas"], dtype=float)
    share = 100.0 * areas[key_pos] / (size * size)
    rank = int((areas > areas[key_pos]).sum())
    why = "the largest visible extent of all the frames shown" if rank == 0 else \
        "one of the largest visible extents among the frames shown"
    return (f"Step 2: Looking for \"{context['expression']}\", the frame at {context['keyframe_timestamp']}s is the "
            f"keyframe: there the {_noun(n)} {'has' if n == 1 else 'have'} {why} (about {share:.0f}% of the image), "
            f"so the match with the description is clearest at that moment.")


def _where_at_keyframe(context: dict[str, Any]) -> str:
    timestamps = list(context["timestamps"])
    size = float(context["train_size"])
    n = int(context["n_instances"])
    key_pos = timestamps.index(context["keyframe_timestamp"])
    key_boxes = [b for b in context["boxes"][key_pos] if b is not None]
    places = ", ".join(location_phrase(b, size, size) for b in key_boxes)
    return (f"Step 3: At {context['keyframe_timestamp']}s the {_noun(n)} {'is' if n == 1 else 'are'} in {places} of "
            f"the frame, which is what \"{context['expression']}\" refers to.")


def write_trace(context: dict[str, Any]) -> str:
    """Veason-R1's three steps from a sample's annotations (keys: expression, timestamps, keyframe_timestamp,
    boxes (per frame, per object, train size), union_areas, train_size, n_instances)."""
    per_frame = [union_box(objs) for objs in context["boxes"]]
    return "\n".join([_summary(context, per_frame), _why_keyframe(context), _where_at_keyframe(context)])


def compact_trace(timestamps: Sequence[int], keyframe: int, key_boxes: Sequence[Sequence[float] | None], size: float,
                  n_instances: int) -> str:
    """Veason-R1's three steps in a few words each: the frames shown, the keyframe, where the target(s) are there.

    The default's tiny model answers after what it was pre-trained to think; a grounding base writes no box after a
    thought it never saw (research/issue61 `think_length.py`). So the pre-training and the default's template
    teacher write this one form: short enough for CPU training, and still the filter's three steps, the keyframe
    named in step 2 and step 3's location words true to the box."""
    n = int(n_instances)
    place = union_box(key_boxes)
    step3 = (f"Step 3: {'It is' if n == 1 else 'They are'} near {location_phrase(place, size, size)}." if place
             else "Step 3: Nothing there matches the description.")
    return "\n".join([f"Step 1: {len(timestamps)} frames from {timestamps[0]}s to {timestamps[-1]}s.",
                      f"Step 2: The {_noun(n)} {'is' if n == 1 else 'are'} clearest at {keyframe}s.", step3])


def write_compact_trace(context: dict[str, Any]) -> str:
    """`compact_trace` from a sample's annotations (the keys of `write_trace`)."""
    timestamps = list(context["timestamps"])
    key_pos = timestamps.index(context["keyframe_timestamp"])
    return compact_trace(timestamps, int(context["keyframe_timestamp"]), context["boxes"][key_pos],
                         float(context["train_size"]), int(context["n_instances"]))


def write_ktg_trace(context: dict[str, Any]) -> str:
    """RCoT-Seg KTG: the three steps plus a point inside each target at the keyframe (`ktg_points`)."""
    points = [p for p in context.get("ktg_points") or [] if p is not None]
    text = write_trace(context)
    if points:
        listed = ", ".join(f"({round(p[0])}, {round(p[1])})" for p in points)
        text += f" A point clearly inside {'it' if len(points) == 1 else 'each of them'} is {listed}."
    return text


def write_aks_trace(context: dict[str, Any]) -> str:
    """RCoT-Seg AKS: is the candidate frame a valid keyframe? Ends with `Answer: A|B` from the annotations."""
    per_frame = [union_box(objs) for objs in context["boxes"]]
    n = int(context["n_instances"])
    t = int(context["aks_timestamp"])
    valid = context["aks_option"] == "A"
    step2 = (f"Step 2: In the candidate frame at {t}s the {_noun(n)} "
             + ("is clearly visible and large, among the frames where it is seen best."
                if valid else "cannot be seen: nothing there matches the description."))
    step3 = (f"Step 3: So the candidate at {t}s " + ("is" if valid else "is not")
             + f" a valid keyframe for \"{context['expression']}\". Answer: {'A' if valid else 'B'}")
    return "\n".join([_summary(context, per_frame), step2, step3])


def write_description(context: dict[str, Any]) -> str:
    """RCoT-Seg video description: scene and objects, events in order, relations — from the annotations."""
    timestamps = list(context["timestamps"])
    size = float(context["train_size"])
    per_frame = [union_box(objs) for objs in context["boxes"]]
    events = "; ".join(f"at {t}s " + (f"near {location_phrase(b, size, size)}" if b is not None else "not visible")
                       for t, b in zip(timestamps, per_frame, strict=True))
    n = int(context["n_instances"])
    step2 = f"Step 2: In temporal order, the {_noun(n)} {'is' if n == 1 else 'are'} {events}."
    step3 = (f"Step 3: The object{'s' if n > 1 else ''} that \"{context['expression']}\" refers to "
             f"{'is' if n == 1 else 'are'} the {_noun(n)} followed above.")
    return "\n".join([_summary(context, per_frame), step2, step3])


WRITERS = {"veason": write_trace, "rcot_ktg": write_ktg_trace, "rcot_aks": write_aks_trace,
           "rcot_description": write_description}


def template_writer(request: ChatRequest) -> str:
    """`TeacherClient` hook for the template backend: the writer of the request's template set (Veason-R1's in its
    compact form when the request's context asks for it: `teacher.template_style`)."""
    template_set = request.context.get("template_set", "veason")
    if template_set == "veason" and request.context.get("template_style", "full") == "compact":
        return write_compact_trace(request.context)
    if template_set not in WRITERS:
        raise ValueError(f"template backend: no writer for template set {template_set!r} (known: {sorted(WRITERS)})")
    return WRITERS[template_set](request.context)
