"""Simulated scenes: objects with kinds, colours, textures and trajectories with events.

Everything the expressions say is decided from these trajectories (and from what the renderer measured
of them), so every expression is true by construction. Positions are object centres in pixels; an object
is "present" in a frame when its shape overlaps the frame (it may still be fully hidden behind others).
Objects that enter slide in across the left or right edge; objects that leave slide out across one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from stages.params.synth import SynthScale

KINDS = ("circle", "square", "triangle", "diamond", "star")
COLOURS = {  # name → RGB; "purple" and "hexagon" never occur (used by no-target expressions)
    "red": (220, 40, 40),
    "green": (40, 180, 60),
    "blue": (40, 80, 220),
    "yellow": (235, 210, 40),
    "orange": (240, 130, 20),
    "white": (240, 240, 240),
}
TEXTURES = ("plain", "striped", "dotted")
BACKGROUNDS = ("gradient", "noise", "stripes", "checker")
SPEED_UP_FACTOR = 2.5  # velocity multiplier of a "speeds_up" event
LEAVE_TRIES = 12  # trajectories tried when looking for a frame from which an object can leave
OVERTAKE_PROB = 0.2  # probability that an object is set up to overtake an earlier one
OVERTAKE_SPEED = (1.8, 2.6)  # its speed as a multiple of the overtaken object's
HIDE_PROB = 0.25  # probability that an object ends the video (mostly) hidden behind an earlier, front one
LANE_PROB = 0.5  # probability that an object shares the horizontal lane of an earlier one (occlusion, overtaking)


@dataclass(frozen=True)
class SimObject:
    """One object of a video: appearance and its centre / presence per frame."""

    obj_id: int
    kind: str
    colour: str
    texture: str
    radius: float
    z: int  # drawing order: higher z is drawn later, i.e. in front
    centres: np.ndarray  # (T, 2) float, x and y
    velocities: np.ndarray  # (T, 2) float: displacement from frame t to t + 1 (last row repeats)
    present: np.ndarray  # (T,) bool: the shape overlaps the frame
    events: tuple[str, ...]  # of "enters", "leaves", "stops", "speeds_up"
    event_frame: dict  # event name → frame index where it happens

    @property
    def name(self) -> str:
        """'red striped circle' style description (texture omitted when plain)."""
        texture = "" if self.texture == "plain" else f"{self.texture} "
        return f"{self.colour} {texture}{self.kind}"

    def speeds(self) -> np.ndarray:
        """Per-step displacement length over frames where the object is present in both frames."""
        steps = np.linalg.norm(np.diff(self.centres, axis=0), axis=1)
        both = self.present[1:] & self.present[:-1]
        return np.where(both, steps, np.nan)


@dataclass(frozen=True)
class SimVideo:
    """A simulated video: size, frame count, background and its objects."""

    height: int
    width: int
    n_frames: int
    background: str
    background_colour: tuple[int, int, int]
    background_angle: float  # direction of gradients and stripes, radians
    objects: tuple[SimObject, ...]
    noise_seed: int


def simulate_video(rng: np.random.Generator, scale: SynthScale) -> SimVideo:
    """Draw one video's scene: objects with distinct (colour, kind), trajectories and events."""
    T = int(rng.integers(scale.min_frames, scale.max_frames + 1))
    H, W = scale.height, scale.width
    n_obj = int(rng.integers(scale.min_objects, scale.max_objects + 1))
    combos = [(c, k) for c in COLOURS for k in KINDS]
    picks = rng.choice(len(combos), size=n_obj, replace=False)
    z_order = rng.permutation(n_obj)
    objects: list[SimObject] = []
    for obj_id, pick in enumerate(picks):
        colour, kind = combos[int(pick)]
        z = int(z_order[obj_id])
        objects.append(_simulate_role(rng, obj_id, kind, colour, z, T, H, W, objects, scale.object_scale))
    background = BACKGROUNDS[int(rng.integers(len(BACKGROUNDS)))]
    bg_colour = tuple(int(v) for v in rng.integers(20, 120, size=3))
    angle = float(rng.uniform(0, np.pi))
    if scale.look == "plain":  # the same draws, so a scene keeps its objects and paths; only its look is plainer
        background = "plain"
        objects = [replace(o, texture="plain") for o in objects]
    return SimVideo(H, W, T, background, bg_colour, angle, tuple(objects), int(rng.integers(2**31)))


def _simulate_role(rng: np.random.Generator, obj_id: int, kind: str, colour: str, z: int, T: int, H: int,
                   W: int, earlier: list[SimObject], grow: float = 1.0) -> SimObject:
    """One object, possibly choreographed against an earlier one so that the interesting relations
    happen often enough: it overtakes it, hides behind it at the end, or shares its lane."""
    roll = rng.random()
    if earlier and roll < OVERTAKE_PROB:
        leaders = [o for o in earlier if not o.events and abs(o.velocities[0, 0]) > 0.5]
        if leaders:
            obj = _overtaker(rng, obj_id, kind, colour, z, T, H, W, leaders[int(rng.integers(len(leaders)))], grow)
            if obj is not None:
                return obj
    elif earlier and roll < OVERTAKE_PROB + HIDE_PROB and T >= 8:
        fronts = [o for o in earlier if o.z > z and o.present[-1]]
        if fronts:
            return _hider(rng, obj_id, kind, colour, z, T, H, W, fronts[int(rng.integers(len(fronts)))], grow)
    lane = None
    if earlier and rng.random() < LANE_PROB:
        # share (roughly) the starting height of an earlier object so that the two cross or overtake
        other = earlier[int(rng.integers(len(earlier)))]
        lane = float(other.centres[0, 1] if other.present[0] else other.centres[-1, 1])
    return _simulate_object(rng, obj_id, kind, colour, z, T, H, W, lane, grow)


def _overtaker(rng: np.random.Generator, obj_id: int, kind: str, colour: str, z: int, T: int, H: int, W: int,
               leader: SimObject, grow: float = 1.0) -> SimObject | None:
    """Starts behind `leader` in its lane, moves the same way OVERTAKE_SPEED times faster and catches up
    around mid-video; None when that start would lie outside the frame."""
    radius = float(rng.uniform(0.07, 0.14) * min(H, W)) * grow
    texture = TEXTURES[int(rng.integers(len(TEXTURES)))]
    lead_v = leader.velocities[0]
    factor = float(rng.uniform(*OVERTAKE_SPEED))
    meet = float(rng.uniform(0.35, 0.6)) * T
    direction = 1.0 if lead_v[0] > 0 else -1.0
    start_x = leader.centres[0, 0] - direction * (factor - 1) * abs(lead_v[0]) * meet
    if not radius <= start_x <= W - radius:
        return None
    y = float(np.clip(leader.centres[0, 1] + rng.uniform(-0.3, 0.3) * radius, radius, H - radius))
    velocity = np.array([lead_v[0] * factor, lead_v[1]])
    centres, velocities = _run(np.array([start_x, y]), velocity, radius, T, H, W, {}, 0, None)
    return SimObject(obj_id, kind, colour, texture, radius, z, centres, velocities,
                     _present(centres, radius, H, W), (), {})


def _hider(rng: np.random.Generator, obj_id: int, kind: str, colour: str, z: int, T: int, H: int, W: int,
           front: SimObject, grow: float = 1.0) -> SimObject:
    """Travels in a straight line to a spot just behind where `front` (drawn in front of it) ends up,
    and stops there: it ends the video mostly or completely hidden behind `front`."""
    radius = float(min(rng.uniform(0.07, 0.14) * min(H, W) * grow, 0.7 * front.radius))
    texture = TEXTURES[int(rng.integers(len(TEXTURES)))]
    angle = float(rng.uniform(0, 2 * np.pi))
    offset = float(rng.uniform(0.0, 0.25)) * front.radius * np.array([np.cos(angle), np.sin(angle)])
    target = np.clip(front.centres[-1] + offset, [radius, radius], [W - radius, H - radius])
    stop = int(rng.integers(max(T // 2, 3), T - 2))
    start = np.array([rng.uniform(radius, W - radius), rng.uniform(radius, H - radius)])
    velocity = (target - start) / stop
    centres, velocities = _run(start, velocity, radius, T, H, W, {"stops": stop}, 0, None)
    return SimObject(obj_id, kind, colour, texture, radius, z, centres, velocities,
                     _present(centres, radius, H, W), ("stops",), {"stops": stop})


def _run(start: np.ndarray, velocity: np.ndarray, radius: float, T: int, H: int, W: int,
         velocity_events: dict[str, int], bounce_x_from: int, leave_at: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Integrate one trajectory: (T, 2) centres and (T, 2) per-step velocities.

    The object bounces off the frame borders, except horizontally before `bounce_x_from` (it is still
    sliding in) and from `leave_at` on (it slides out along its current horizontal direction).
    """
    centres = np.zeros((T, 2))
    velocities = np.zeros((T, 2))
    position = start.astype(float).copy()
    v = velocity.astype(float).copy()
    for t in range(T):
        if velocity_events.get("stops") == t:
            v = np.zeros(2)
        if velocity_events.get("speeds_up") == t:
            v = v * SPEED_UP_FACTOR
        if leave_at is not None and t == leave_at:
            v = np.array([v[0], 0.0])
        centres[t] = position
        velocities[t] = v
        position = position + v
        bounce_x = t + 1 >= bounce_x_from and (leave_at is None or t + 1 < leave_at)
        for axis, size, bounce in ((0, W, bounce_x), (1, H, True)):
            if bounce and (position[axis] < radius or position[axis] > size - radius):
                v[axis] = -v[axis]
                position[axis] = float(np.clip(position[axis], radius, size - radius))
    return centres, velocities


def _present(centres: np.ndarray, radius: float, H: int, W: int) -> np.ndarray:
    x, y = centres[:, 0], centres[:, 1]
    return (x + radius > 1) & (x - radius < W - 1) & (y + radius > 1) & (y - radius < H - 1)


def _simulate_object(rng: np.random.Generator, obj_id: int, kind: str, colour: str, z: int,
                     T: int, H: int, W: int, lane: float | None, grow: float = 1.0) -> SimObject:
    radius = float(rng.uniform(0.07, 0.14) * min(H, W)) * grow
    texture = TEXTURES[int(rng.integers(len(TEXTURES)))]
    speed = max(float(rng.uniform(0.2, 1.6)) * min(H, W) / max(T, 1) * 0.9, 1.0)
    angle = float(rng.uniform(-0.4, 0.4)) + (0.0 if rng.random() < 0.5 else np.pi)  # mostly horizontal
    velocity = np.array([np.cos(angle), np.sin(angle)]) * speed
    y = lane + float(rng.uniform(-0.3, 0.3)) * radius if lane is not None else float(rng.uniform(radius, H - radius))
    start = np.array([rng.uniform(radius, W - radius), float(np.clip(y, radius, H - radius))])
    events: list[str] = []
    event_frame: dict[str, int] = {}
    bounce_x_from, leave_at = 0, None
    roll = rng.random()
    if roll < 0.2 and T >= 6:
        # enter across the edge it moves away from, fully outside the frame until just before `enters`
        enter = int(rng.integers(2, max(T // 2, 2) + 1))
        vx = max(abs(velocity[0]), 3.0)
        velocity[0] = vx if velocity[0] >= 0 else -vx
        outside = radius + 2 + vx * (enter - 1)
        start[0] = -outside if velocity[0] > 0 else W + outside
        bounce_x_from = enter + int(np.ceil(2 * radius / vx)) + 1
        events.append("enters")
    velocity_events: dict[str, int] = {}
    roll = rng.random()
    first_free = bounce_x_from + 1
    if T - first_free >= 6:
        if roll < 0.25:
            velocity_events["stops"] = int(rng.integers(first_free + 2, T - 2))
        elif roll < 0.45:
            velocity_events["speeds_up"] = int(rng.integers(first_free + 2, T - 2))
    if "enters" not in events and "stops" not in velocity_events and rng.random() < 0.3 and T >= 6:
        leave_at = _pick_leave_frame(rng, start, velocity, radius, T, H, W, velocity_events)
        if leave_at is not None:
            events.append("leaves")
            velocity_events = {k: f for k, f in velocity_events.items() if f < leave_at - 2}
    centres, velocities = _run(start, velocity, radius, T, H, W, velocity_events, bounce_x_from, leave_at)
    present = _present(centres, radius, H, W)
    if "enters" in events:
        event_frame["enters"] = int(np.flatnonzero(present)[0]) if present.any() else T
    if "leaves" in events:
        event_frame["leaves"] = int(np.flatnonzero(present)[-1]) + 1
    for name, frame in velocity_events.items():
        events.append(name)
        event_frame[name] = frame
    return SimObject(obj_id, kind, colour, texture, radius, z, centres, velocities, present, tuple(events),
                     event_frame)


def _pick_leave_frame(rng: np.random.Generator, start: np.ndarray, velocity: np.ndarray, radius: float,
                      T: int, H: int, W: int, velocity_events: dict[str, int]) -> int | None:
    """A frame from which the object, keeping its speed, slides fully out before the last frame; or None."""
    candidates = np.arange(max(T // 3, 2), T - 2)
    # a few random tries (each is a whole trajectory integration), not an exhaustive search
    for leave_at in rng.permutation(candidates)[:LEAVE_TRIES]:
        events = {k: f for k, f in velocity_events.items() if f < leave_at - 2}
        centres, _ = _run(start, velocity, radius, T, H, W, events, 0, int(leave_at))
        present = _present(centres, radius, H, W)
        if present[: leave_at + 1].all() and not present[-2:].any():
            return int(leave_at)
    return None
