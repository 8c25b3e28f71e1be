"""Expressions that are true of their video by construction.

Each generator looks at the simulated trajectories and the rendered visible areas and emits an
expression only when its predicate picks out exactly its target set (with a margin, so that the
statement is unambiguous to a viewer, not just to floating point).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from stages.synth.scene import COLOURS, KINDS, SimObject, SimVideo

REFERRING, REASONING, NO_TARGET = 0, 1, 2


@dataclass(frozen=True)
class Expression:
    """One expression: text, type_id (0 referring, 1 reasoning, 2 no target) and target object ids."""

    text: str
    type_id: int
    obj_ids: tuple[int, ...]


@dataclass(frozen=True)
class Facts:
    """What the renderer measured: visible area per object and frame (T, n_objects)."""

    visible_area: np.ndarray


def _visible_frames(facts: Facts, obj: SimObject) -> np.ndarray:
    return np.flatnonzero(facts.visible_area[:, obj.obj_id] > 0)


def appearance(video: SimVideo, facts: Facts) -> list[Expression]:
    """'the red striped circle' — (colour, kind) is unique per video by construction."""
    seen = [o for o in video.objects if _visible_frames(facts, o).size]
    return [Expression(f"the {o.name}", REFERRING, (o.obj_id,)) for o in seen]


def same_kind(video: SimVideo, facts: Facts) -> list[Expression]:
    """'all the circles' when two or more objects share a kind (multi-instance)."""
    out = []
    for kind in KINDS:
        ids = tuple(o.obj_id for o in video.objects if o.kind == kind and _visible_frames(facts, o).size)
        if len(ids) >= 2:
            out.append(Expression(f"all the {kind}s in the video", REFERRING, ids))
    return out


def leftmost_at_start(video: SimVideo, facts: Facts) -> list[Expression]:
    """'the object furthest to the left in the first frame' (position), with a margin of one radius."""
    visible = [o for o in video.objects if facts.visible_area[0, o.obj_id] > 0]
    if len(visible) < 2:
        return []
    xs = sorted((o.centres[0, 0], o) for o in visible)
    (x_first, first), (x_second, _) = xs[0], xs[1]
    if x_second - x_first < first.radius:
        return []
    return [Expression("the object furthest to the left in the first frame", REFERRING, (first.obj_id,))]


def fastest(video: SimVideo, facts: Facts) -> list[Expression]:
    """'which object moves fastest?' — mean speed at least 1.5x every other object's."""
    speeds = {o.obj_id: float(np.nanmean(o.speeds())) if np.isfinite(o.speeds()).any() else 0.0
              for o in video.objects}
    ranked = sorted(speeds.items(), key=lambda kv: -kv[1])
    if len(ranked) < 2 or ranked[0][1] < 1.5 * ranked[1][1] or ranked[0][1] <= 0:
        return []
    return [Expression("which object moves the fastest across the video?", REASONING, (ranked[0][0],))]


def event_objects(event: str, single: str, plural: str) -> Callable[[SimVideo, Facts], list[Expression]]:
    """Objects with a given event ('stops', 'speeds_up', 'enters', 'leaves'); one or several targets."""

    def generate(video: SimVideo, facts: Facts) -> list[Expression]:
        ids = tuple(o.obj_id for o in video.objects if event in o.events and _visible_frames(facts, o).size)
        if not ids:
            return []
        return [Expression(single if len(ids) == 1 else plural, REASONING, ids)]

    return generate


def enters_last(video: SimVideo, facts: Facts) -> list[Expression]:
    """'the object that appears last' — its first visible frame is strictly after every other's."""
    seen = [o for o in video.objects if _visible_frames(facts, o).size]
    firsts = sorted((int(_visible_frames(facts, o)[0]), o.obj_id) for o in seen)
    if len(firsts) < 2 or firsts[-1][0] == firsts[-2][0] or firsts[-1][0] == 0:
        return []
    return [Expression("the object that shows up last in the video", REASONING, (firsts[-1][1],))]


def hidden_behind_at_end(video: SimVideo, facts: Facts) -> list[Expression]:
    """'the shape hidden behind the blue square at the end': visible area in the last frame below half
    of its full area, with the occluder being one object in front that overlaps it."""
    from stages.synth.render import shape_mask

    t = video.n_frames - 1
    out = []
    full = {o.obj_id: shape_mask(o, t, video.height, video.width) for o in video.objects}
    for obj in video.objects:
        area = int(full[obj.obj_id].sum())
        if area == 0 or facts.visible_area[t, obj.obj_id] > 0.5 * area or facts.visible_area[t, obj.obj_id] == 0:
            continue
        occluders = [o for o in video.objects if o.z > obj.z and (full[o.obj_id] & full[obj.obj_id]).any()]
        if len(occluders) == 1:
            out.append(Expression(f"the shape partly hidden behind the {occluders[0].name} at the end",
                                  REASONING, (obj.obj_id,)))
    return out


def moving_direction(video: SimVideo, facts: Facts) -> list[Expression]:
    """'the objects that travel to the right' — net displacement right by more than one radius, while every
    other object moves left or stays (multi- or single-instance)."""
    right, other = [], []
    for o in video.objects:
        frames = np.flatnonzero(o.present)
        if frames.size < 2:
            continue
        dx = o.centres[frames[-1], 0] - o.centres[frames[0], 0]
        (right if dx > o.radius else other).append((o, dx))
    if not right or not other or any(dx > 0 for _, dx in other):
        return []
    ids = tuple(o.obj_id for o, _ in right if _visible_frames(facts, o).size)
    if not ids:
        return []
    text = "the object that ends up further right than it started" if len(ids) == 1 else \
        "the objects that end up further right than they started"
    return [Expression(text, REASONING, ids)]


def no_target(video: SimVideo, facts: Facts, rng: np.random.Generator) -> list[Expression]:
    """A description that matches nothing in the video (purple and hexagons never occur)."""
    colour = list(COLOURS)[int(rng.integers(len(COLOURS)))]
    options = [f"the purple {KINDS[int(rng.integers(len(KINDS)))]}", f"the {colour} hexagon",
               "the person riding a bicycle"]
    return [Expression(options[int(rng.integers(len(options)))], NO_TARGET, ())]


GENERATORS: tuple[Callable[[SimVideo, Facts], list[Expression]], ...] = (
    appearance,
    same_kind,
    leftmost_at_start,
    fastest,
    event_objects("stops", "the object that stops moving", "the objects that stop moving"),
    event_objects("speeds_up", "which object suddenly speeds up?", "the objects that suddenly speed up"),
    event_objects("leaves", "the object that leaves the scene", "the objects that leave the scene"),
    enters_last,
    hidden_behind_at_end,
    moving_direction,
)


def generate_expressions(video: SimVideo, facts: Facts, rng: np.random.Generator) -> list[Expression]:
    """All true expressions of a video, deduplicated by text, plus one no-target expression."""
    out: list[Expression] = []
    seen: set[str] = set()
    for generator in GENERATORS:
        for expression in generator(video, facts):
            if expression.text not in seen:
                seen.add(expression.text)
                out.append(expression)
    out.extend(no_target(video, facts, rng))
    # ReVOS lists a video's expressions in no particular order; a fixed generator order would make the
    # "first k per video" SFT rule pick one kind of expression only
    return [out[i] for i in rng.permutation(len(out))]
