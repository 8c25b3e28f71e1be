"""Simulated scenes: objects with kinds, colours, textures and trajectories with events.

Everything the expressions say is decided from these trajectories, so every expression is true by
construction. Positions are object centres in pixels; an object is "present" in a frame when it is
inside the scene (it may still be fully hidden behind others).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stages.core.params import SynthScale

KINDS = ("circle", "square", "triangle", "diamond")
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
    present: np.ndarray  # (T,) bool: inside the scene (entered and not yet left)
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
    objects = []
    for obj_id, pick in enumerate(picks):
        colour, kind = combos[int(pick)]
        objects.append(_simulate_object(rng, obj_id, kind, colour, int(z_order[obj_id]), T, H, W))
    background = BACKGROUNDS[int(rng.integers(len(BACKGROUNDS)))]
    bg_colour = tuple(int(v) for v in rng.integers(20, 120, size=3))
    return SimVideo(H, W, T, background, bg_colour, tuple(objects), int(rng.integers(2**31)))


def _simulate_object(rng: np.random.Generator, obj_id: int, kind: str, colour: str, z: int,
                     T: int, H: int, W: int) -> SimObject:
    radius = float(rng.uniform(0.07, 0.13) * min(H, W))
    texture = TEXTURES[int(rng.integers(len(TEXTURES)))]
    speed = float(rng.uniform(0.2, 1.6)) * min(H, W) / max(T, 1) * 0.9
    angle = float(rng.uniform(-0.5, 0.5)) + (0.0 if rng.random() < 0.5 else np.pi)  # mostly horizontal
    velocity = np.array([np.cos(angle), np.sin(angle)]) * speed
    start = np.array([rng.uniform(radius, W - radius), rng.uniform(radius, H - radius)])
    events: list[str] = []
    event_frame: dict[str, int] = {}
    # Each object gets at most one velocity event and maybe an enter/leave event.
    roll = rng.random()
    if roll < 0.25 and T >= 6:
        events.append("stops")
        event_frame["stops"] = int(rng.integers(T // 3, 2 * T // 3 + 1))
    elif roll < 0.45 and T >= 6:
        events.append("speeds_up")
        event_frame["speeds_up"] = int(rng.integers(T // 3, 2 * T // 3 + 1))
    centres = np.zeros((T, 2))
    position = start.copy()
    v = velocity.copy()
    for t in range(T):
        if "stops" in event_frame and t == event_frame["stops"]:
            v = np.zeros(2)
        if "speeds_up" in event_frame and t == event_frame["speeds_up"]:
            v = v * 2.5
        centres[t] = position
        position = position + v
        # bounce inside the frame so objects stay in view unless they leave on purpose
        for axis, size in ((0, W), (1, H)):
            if position[axis] < radius or position[axis] > size - radius:
                v[axis] = -v[axis]
                position[axis] = float(np.clip(position[axis], radius, size - radius))
    present = np.ones(T, dtype=bool)
    roll = rng.random()
    if roll < 0.2 and T >= 6:
        events.append("enters")
        event_frame["enters"] = int(rng.integers(2, T // 2 + 1))
        present[: event_frame["enters"]] = False
    elif roll < 0.35 and T >= 6:
        events.append("leaves")
        event_frame["leaves"] = int(rng.integers(T // 2, T - 1))
        present[event_frame["leaves"]:] = False
    return SimObject(obj_id, kind, colour, texture, radius, z, centres, present, tuple(events), event_frame)
