"""Expressions that are true of their video by construction.

Each generator looks at the simulated trajectories and at what the renderer measured of them (visible
area and centroid per object and frame) and emits an expression only when its predicate picks out
exactly its target set, with a margin, so that the statement is unambiguous to a viewer, not just to
floating point. Statements about motion are checked on both the simulated centres and the visible
pixels (occlusion and the frame border can make the two disagree; then nothing is said).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from stages.synth.scene import COLOURS, KINDS, TEXTURES, SimObject, SimVideo

REFERRING, REASONING, NO_TARGET = 0, 1, 2
COUNT_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}
SPEED_RATIO = 1.5  # "fastest"/"slowest": simulated mean speed at least this factor apart from every other
VISIBLE_SPEED_RATIO = 1.2  # ... and the visible centroids must agree with at least this factor
SIZE_RATIO = 1.5  # "largest"/"smallest": shape area factor to every other object
POSITION_MARGIN = 0.06  # extreme-position statements: centroid lead as a fraction of the frame side
SPEED_UP_RATIO = 2.0  # measured "speeds up": mean step after / mean step before
OCCLUSION_MIN = 0.15  # "passes in front of": covered fraction of the back object's pixels
STILL_PX = 0.5  # centroid change (px) below which a visible object counts as standing still


@dataclass(frozen=True)
class Expression:
    """One expression: text, type_id (0 referring, 1 reasoning, 2 no target) and target object ids."""

    text: str
    type_id: int
    obj_ids: tuple[int, ...]


@dataclass(frozen=True)
class Facts:
    """What the renderer measured, per frame and object (T, n_objects): visible and unoccluded pixel
    counts, visible centroids (T, n_objects, 2; NaN when not visible), whole-shape areas (n_objects), and
    which objects cover which."""

    visible_area: np.ndarray
    full_area: np.ndarray
    centroids: np.ndarray
    shape_area: np.ndarray
    hidden_by: list[list[tuple[int, ...]]]  # [t][obj_id]: objects in front covering some of its pixels

    def visible_frames(self, obj: SimObject) -> np.ndarray:
        """Frame indices where some of `obj` is visible."""
        return np.flatnonzero(self.visible_area[:, obj.obj_id] > 0)

    def seen(self, video: SimVideo) -> list[SimObject]:
        """Objects visible in at least one frame."""
        return [o for o in video.objects if self.visible_frames(o).size]

    def visible_speed(self, obj: SimObject) -> float:
        """Mean centroid displacement over consecutive frames where the object is visible in both."""
        c = self.centroids[:, obj.obj_id]
        steps = np.linalg.norm(np.diff(c, axis=0), axis=1)
        steps = steps[np.isfinite(steps)]
        return float(steps.mean()) if steps.size else float("nan")


def _plural(ids: tuple[int, ...], single: str, multi: str) -> str:
    return single if len(ids) == 1 else multi.format(n=COUNT_WORDS.get(len(ids), str(len(ids))))


# -- referring (type 0): appearance and position ------------------------------------------------------


def appearance(video: SimVideo, facts: Facts) -> list[Expression]:
    """'the red striped circle' — (colour, kind) is unique per video by construction."""
    return [Expression(f"the {o.name}", REFERRING, (o.obj_id,)) for o in facts.seen(video)]


def unique_attribute(video: SimVideo, facts: Facts) -> list[Expression]:
    """'the star', 'the green shape' when that kind / colour occurs once in the video."""
    out = []
    for o in facts.seen(video):
        if sum(p.kind == o.kind for p in video.objects) == 1:
            out.append(Expression(f"the {o.kind}", REFERRING, (o.obj_id,)))
        if sum(p.colour == o.colour for p in video.objects) == 1:
            out.append(Expression(f"the {o.colour} shape", REFERRING, (o.obj_id,)))
    return out


def groups(video: SimVideo, facts: Facts) -> list[Expression]:
    """'all the circles', 'all the red shapes', 'all the striped shapes' (multi-instance, two or more)."""
    out = []
    seen = facts.seen(video)
    attributes = [("kind", k, f"all the {k}s in the video") for k in KINDS]
    attributes += [("colour", c, f"all the {c} shapes") for c in COLOURS]
    attributes += [("texture", t, f"all the {t} shapes") for t in TEXTURES if t != "plain"]
    for attr, value, text in attributes:
        ids = tuple(o.obj_id for o in seen if getattr(o, attr) == value)
        everyone = [o for o in video.objects if getattr(o, attr) == value]
        if len(ids) >= 2 and len(ids) == len(everyone):
            out.append(Expression(text, REFERRING, ids))
    return out


_SIDES = {  # side → (axis of the centroid, sign: +1 = smallest coordinate wins, text)
    "left": (0, 1, "furthest to the left"),
    "right": (0, -1, "furthest to the right"),
    "top": (1, 1, "closest to the top"),
    "bottom": (1, -1, "closest to the bottom"),
}


def _extreme(facts: Facts, candidates: list[SimObject], t: int, side: str, size: int) -> SimObject | None:
    """The candidate whose visible centroid leads every other one towards `side` at frame t by the margin."""
    axis, sign, _ = _SIDES[side]
    visible = [o for o in candidates if facts.visible_area[t, o.obj_id] > 0]
    if len(visible) < 2:
        return None
    ranked = sorted(visible, key=lambda o: sign * facts.centroids[t, o.obj_id, axis])
    lead = sign * (facts.centroids[t, ranked[1].obj_id, axis] - facts.centroids[t, ranked[0].obj_id, axis])
    return ranked[0] if lead >= POSITION_MARGIN * size else None


def position(video: SimVideo, facts: Facts) -> list[Expression]:
    """'the object furthest to the left in the first frame'; 'the square on the left at the start' among
    two or more squares. Decided on the visible centroids, i.e. on what a viewer sees."""
    out = []
    last = video.n_frames - 1
    for t, frame_word, moment in ((0, "first", "start"), (last, "last", "end")):
        for side, (axis, _, phrase) in _SIDES.items():
            size = video.width if axis == 0 else video.height
            winner = _extreme(facts, list(video.objects), t, side, size)
            if winner is not None:
                out.append(Expression(f"the object {phrase} in the {frame_word} frame", REFERRING, (winner.obj_id,)))
            if axis != 0:
                continue
            for kind in KINDS:
                same = [o for o in video.objects if o.kind == kind]
                winner = _extreme(facts, same, t, side, size) if len(same) >= 2 else None
                if winner is not None:
                    out.append(Expression(f"the {kind} on the {side} at the {moment}", REFERRING, (winner.obj_id,)))
    return out


# -- reasoning (type 1): motion, order in time, relations, comparison ---------------------------------


def _mean_speed(obj: SimObject) -> float:
    speeds = obj.speeds()
    return float(np.nanmean(speeds)) if np.isfinite(speeds).any() else float("nan")


def speed_extremes(video: SimVideo, facts: Facts) -> list[Expression]:
    """'which object moves the fastest across the video?' / '... the slowest ...': the simulated mean
    speed is SPEED_RATIO apart from every other object's, and the visible centroids agree."""
    seen = facts.seen(video)
    sim = {o.obj_id: _mean_speed(o) for o in seen}
    vis = {o.obj_id: facts.visible_speed(o) for o in seen}
    if len(seen) < 2 or not all(np.isfinite(v) for v in [*sim.values(), *vis.values()]):
        return []
    out = []
    for word, sign in (("fastest", 1), ("slowest", -1)):
        ranked = sorted(seen, key=lambda o: -sign * sim[o.obj_id])
        best, others = ranked[0].obj_id, [o.obj_id for o in ranked[1:]]
        if sign > 0:
            ok = all(sim[best] >= SPEED_RATIO * sim[o] and vis[best] >= VISIBLE_SPEED_RATIO * vis[o] for o in others)
        else:
            ok = all(SPEED_RATIO * sim[best] <= sim[o] and VISIBLE_SPEED_RATIO * vis[best] <= vis[o] for o in others)
        if ok:
            out.append(Expression(f"which object moves the {word} across the video?", REASONING, (best,)))
    return out


def _stops(facts: Facts, obj: SimObject) -> bool:
    """Measured: moved while visible, then stood still (same centroid and area) over its last visible steps."""
    frames = facts.visible_frames(obj)
    if frames.size < 4 or frames[-1] != len(facts.visible_area) - 1:
        return False
    c = facts.centroids[frames, obj.obj_id]
    a = facts.visible_area[frames, obj.obj_id]
    steps = np.linalg.norm(np.diff(c, axis=0), axis=1)
    consecutive = np.diff(frames) == 1
    still_end = consecutive[-2:].all() and (steps[-2:] < STILL_PX).all() and a[-1] == a[-2] == a[-3]
    return bool(still_end and (steps > 1.0).any())


def _speeds_up(obj: SimObject) -> bool:
    """Measured on the simulated centres: mean step after some frame ≥ SPEED_UP_RATIO × mean step before,
    both over at least two steps while present."""
    speeds = obj.speeds()
    ok = np.isfinite(speeds)
    for t in range(2, len(speeds) - 1):
        before, after = speeds[:t][ok[:t]], speeds[t:][ok[t:]]
        if before.size < 2 or after.size < 2 or before.mean() <= 0:
            continue
        if after.mean() >= SPEED_UP_RATIO * before.mean():
            return True
    return False


def motion_events(video: SimVideo, facts: Facts) -> list[Expression]:
    """'the object that stops moving', 'which object suddenly speeds up?', 'the object that leaves the
    scene', 'the objects that come into view partway through' — emitted when the objects the simulator
    gave the event are exactly the objects that show it."""
    out = []
    seen = facts.seen(video)
    last = video.n_frames - 1
    checks: list[tuple[str, Callable[[SimObject], bool], str, str]] = [
        ("stops", lambda o: _stops(facts, o), "the object that stops moving", "the {n} objects that stop moving"),
        ("speeds_up", _speeds_up, "which object suddenly speeds up?", "the {n} objects that suddenly speed up"),
        # a non-target fully hidden in the last frame could look as if it had left, hence `visible_area`
        ("leaves", lambda o: not o.present[-2:].any() or facts.visible_area[last, o.obj_id] == 0,
         "the object that leaves the scene", "the {n} objects that leave the scene"),
        ("enters", lambda o: not o.present[0] or facts.visible_area[0, o.obj_id] == 0,
         "the object that comes into view partway through the video",
         "the {n} objects that come into view partway through the video"),
    ]
    for event, shows, single, multi in checks:
        ids = tuple(o.obj_id for o in seen if event in o.events)
        if not ids or len(ids) == len(seen):
            continue
        targets_show = all(shows(video.objects[i]) for i in ids)
        others_do_not = not any(shows(o) for o in video.objects if o.obj_id not in ids)
        if targets_show and others_do_not:
            out.append(Expression(_plural(ids, single, multi), REASONING, ids))
    return out


def enters_last(video: SimVideo, facts: Facts) -> list[Expression]:
    """'the object that shows up last' — its first visible frame is strictly after every other's."""
    firsts = sorted((int(facts.visible_frames(o)[0]), o.obj_id) for o in facts.seen(video))
    if len(firsts) < 2 or firsts[-1][0] == firsts[-2][0] or firsts[-1][0] == 0:
        return []
    return [Expression("the object that shows up last in the video", REASONING, (firsts[-1][1],))]


def hidden_behind_at_end(video: SimVideo, facts: Facts) -> list[Expression]:
    """'the shape partly hidden behind the blue square at the end' (less than half visible) or '...
    completely hidden ...' (in the frame, nothing visible), when exactly one object covers it."""
    t = video.n_frames - 1
    out = []
    for obj in facts.seen(video):
        area, seen_area = facts.full_area[t, obj.obj_id], facts.visible_area[t, obj.obj_id]
        occluders = facts.hidden_by[t][obj.obj_id]
        if area == 0 or seen_area > 0.5 * area or len(occluders) != 1:
            continue
        how = "partly" if seen_area > 0 else "completely"
        front = video.objects[occluders[0]]
        out.append(Expression(f"the shape {how} hidden behind the {front.name} at the end", REASONING, (obj.obj_id,)))
    return out


def passes_in_front(video: SimVideo, facts: Facts) -> list[Expression]:
    """'the shape that passes in front of the green star': the one moving object that, at some frame,
    covers at least OCCLUSION_MIN of that object's pixels (which is seen uncovered at another frame)."""
    out = []
    for back in facts.seen(video):
        passers = set()
        for t in range(video.n_frames):
            hidden = facts.full_area[t, back.obj_id] - facts.visible_area[t, back.obj_id]
            if hidden < OCCLUSION_MIN * max(facts.full_area[t, back.obj_id], 1):
                continue
            if facts.visible_area[:, back.obj_id].max() < facts.full_area[t, back.obj_id]:
                continue  # never seen whole at that size elsewhere: a viewer could not tell it is covered
            for front in facts.hidden_by[t][back.obj_id]:
                if np.abs(video.objects[front].velocities[max(t - 1, 0)]).max() > 0.5:
                    passers.add(front)
        if len(passers) == 1:
            out.append(Expression(f"the shape that passes in front of the {back.name}", REASONING, tuple(passers)))
    return out


def keeps_moving(video: SimVideo, facts: Facts) -> list[Expression]:
    """'the two objects that keep moving until the end', when every other object stops (and each object
    is one or the other)."""
    last = video.n_frames - 1
    seen = facts.seen(video)
    stopped = [o for o in seen if _stops(facts, o)]
    moving = []
    for o in seen:
        c = facts.centroids[last - 1:, o.obj_id]
        if facts.visible_area[last - 1:, o.obj_id].all() and np.linalg.norm(c[1] - c[0]) > 1.0:
            moving.append(o)
    if not stopped or not moving or len(stopped) + len(moving) != len(video.objects):
        return []
    ids = tuple(o.obj_id for o in moving)
    return [Expression(_plural(ids, "the object that keeps moving until the end",
                               "the {n} objects that keep moving until the end"), REASONING, ids)]


def _overtakes(facts: Facts, a: SimObject, b: SimObject) -> bool:
    """a passes b while both move the same horizontal way: a is behind b by a margin at one frame and
    ahead by a margin at a later one (visible centroids), both moving that way throughout."""
    both = np.flatnonzero((facts.visible_area[:, a.obj_id] > 0) & (facts.visible_area[:, b.obj_id] > 0))
    if both.size < 2:
        return False
    margin = 0.5 * (a.radius + b.radius)
    for direction in (1.0, -1.0):
        lead = direction * (facts.centroids[both, a.obj_id, 0] - facts.centroids[both, b.obj_id, 0])
        behind, ahead = np.flatnonzero(lead < -margin), np.flatnonzero(lead > margin)
        if not behind.size or not ahead.size or ahead[-1] <= behind[0]:
            continue
        i, j = int(both[behind[0]]), int(both[ahead[ahead > behind[0]][0]])
        window = slice(i, j)
        if (direction * a.velocities[window, 0] > 0).all() and (direction * b.velocities[window, 0] > 0).all():
            return True
    return False


def overtakes(video: SimVideo, facts: Facts) -> list[Expression]:
    """'which shape overtakes another one moving the same way?' — exactly one object passes any other."""
    seen = facts.seen(video)
    passers = tuple(sorted({a.obj_id for a in seen for b in seen if a is not b and _overtakes(facts, a, b)}))
    if len(passers) != 1:
        return []
    return [Expression("which shape overtakes another one moving the same way?", REASONING, passers)]


def moving_direction(video: SimVideo, facts: Facts) -> list[Expression]:
    """'the two objects that end up further right than they started' — net displacement by more than one
    radius that way, while every other object ends up on the other side of where it started (or still)."""
    out = []
    moves = []
    for o in video.objects:
        frames = facts.visible_frames(o)
        if frames.size < 2:
            continue
        moves.append((o, o.centres[frames[-1], 0] - o.centres[frames[0], 0]))
    for side, sign in (("right", 1.0), ("left", -1.0)):
        ids = tuple(o.obj_id for o, dx in moves if sign * dx > o.radius)
        others = [(o, dx) for o, dx in moves if o.obj_id not in ids]
        if not ids or not others or any(sign * dx > 0 for _, dx in others) or len(moves) < len(video.objects):
            continue
        out.append(Expression(_plural(ids, f"the object that ends up further {side} than it started",
                                      f"the {{n}} objects that end up further {side} than they started"),
                              REASONING, ids))
    return out


def size_extremes(video: SimVideo, facts: Facts) -> list[Expression]:
    """'the largest shape' / 'the smallest shape' by whole-shape area (factor SIZE_RATIO), each object
    once seen nearly whole (so a viewer can compare sizes)."""
    seen = facts.seen(video)
    if len(seen) < 2 or len(seen) < len(video.objects):
        return []
    whole = all((facts.visible_area[:, o.obj_id] >= 0.8 * facts.shape_area[o.obj_id]).any() for o in seen)
    if not whole:
        return []
    ranked = sorted(seen, key=lambda o: facts.shape_area[o.obj_id])
    out = []
    area = facts.shape_area
    if area[ranked[-1].obj_id] >= SIZE_RATIO * area[ranked[-2].obj_id]:
        out.append(Expression("the largest shape in the video", REASONING, (ranked[-1].obj_id,)))
    if area[ranked[1].obj_id] >= SIZE_RATIO * area[ranked[0].obj_id]:
        out.append(Expression("the smallest shape in the video", REASONING, (ranked[0].obj_id,)))
    return out


# -- no target (type 2) -------------------------------------------------------------------------------


def no_target(video: SimVideo, facts: Facts, rng: np.random.Generator) -> list[Expression]:
    """A description that matches nothing in the video: purple and hexagons never occur, an absent
    (colour, kind) pair, or something that is not a shape at all."""
    present = {(o.colour, o.kind) for o in video.objects}
    absent = [(c, k) for c in COLOURS for k in KINDS if (c, k) not in present]
    colour, kind = absent[int(rng.integers(len(absent)))]
    options = [f"the purple {KINDS[int(rng.integers(len(KINDS)))]}",
               f"the {list(COLOURS)[int(rng.integers(len(COLOURS)))]} hexagon",
               f"the {colour} {kind}",
               "the person riding a bicycle"]
    return [Expression(options[int(rng.integers(len(options)))], NO_TARGET, ())]


GENERATORS: tuple[Callable[[SimVideo, Facts], list[Expression]], ...] = (
    appearance,
    unique_attribute,
    groups,
    position,
    speed_extremes,
    motion_events,
    enters_last,
    hidden_behind_at_end,
    passes_in_front,
    keeps_moving,
    overtakes,
    moving_direction,
    size_extremes,
)

# at most this many expressions per video from a generator
CAPS = {"position": 3, "unique_attribute": 2, "passes_in_front": 2}


def generate_expressions(video: SimVideo, facts: Facts, rng: np.random.Generator) -> list[Expression]:
    """All true expressions of a video, deduplicated by text, plus one no-target expression."""
    out: list[Expression] = []
    seen: set[str] = set()
    for generator in GENERATORS:
        found = generator(video, facts)
        cap = CAPS.get(generator.__name__, len(found))
        if len(found) > cap:  # keep type 0 from swamping the reasoning expressions
            found = [found[i] for i in sorted(rng.choice(len(found), size=cap, replace=False))]
        for expression in found:
            if expression.text not in seen:
                seen.add(expression.text)
                out.append(expression)
    out.extend(no_target(video, facts, rng))
    # ReVOS lists a video's expressions in no particular order; a fixed generator order would make the
    # "first k per video" SFT rule pick one kind of expression only
    return [out[i] for i in rng.permutation(len(out))]
