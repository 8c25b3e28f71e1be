"""Plain grounding scenes: flat, untextured rectangles of distinct colours on a plain background, one named by its
colour ("the red rectangle"), as a clip of N frames in the evaluation's question format.

The simplest frames the tiny model learns to localise in (`research/issue24/probe_grounding.py`: one rectangle, held-out
box IoU 0.64 at 2,250 steps; three with the colour curriculum, the colour word bound in one seed of four), the first
rung of the pre-training curriculum before the synth frames. Rectangles are drawn at the train size directly (no
resampling, so every pixel of a rectangle has its colour exactly), in the synth palette's RGB values (a colour word
names the same pixels as in the synth frames), 1/8 to 1/3 of the frame a side; with `move` > 0 each drifts in a straight
line, at most `move` pixels per clip frame, and stays inside the frame. Their paths are placed apart where a few tries
allow, so a rectangle is rarely hidden; the answer's box is the bounding box of the target's visible pixels at the
keyframe, the shown frame where that area is largest (the first of equal ones), as for the synth frames.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from stages.core.frame_spread import spread_frames
from stages.pretrain.scenes import GroundingSample
from stages.synth.scene import COLOURS

PLACE_TRIES = 50  # tries at a path apart from the others' before one that overlaps is kept
CLIP_FRAMES = (8, 14)  # clip length in frames (the synth default preset's min_frames, max_frames)


def plain_sample(rng: np.random.Generator, name: str, frames: int, size: int, objects: tuple[int, ...],
                 colours: tuple[str, ...], move: int) -> GroundingSample:
    """One plain scene: `rng.choice(objects)` rectangles, one of them in a colour drawn from `colours` and named.

    Args:
        rng: the sample's generator (every draw comes from it).
        name: the sample's id (recorded as its video).
        frames: frames shown, spread over a clip of 8-14 frames (all of a shorter clip).
        size: the frames' side and the answer's pixel scale (keyframes.train_size).
        objects: rectangle counts to draw from.
        colours: the colours that may be asked for; the other rectangles take the palette's other colours.
        move: largest speed, pixels per clip frame (0: still).
    """
    while True:  # drawn again from the same generator while the target is hidden in every shown frame (rare)
        sample = _draw(rng, name, frames, size, objects, colours, move)
        if sample is not None:
            return sample


def _draw(rng: np.random.Generator, name: str, frames: int, size: int, objects: tuple[int, ...],
          colours: tuple[str, ...], move: int) -> GroundingSample | None:
    n_objects = int(rng.choice(objects))
    asked = str(rng.choice(colours))
    others = [c for c in COLOURS if c != asked]
    rng.shuffle(others)
    target = int(rng.integers(n_objects))
    names = others[:n_objects - 1]
    names.insert(target, asked)
    n_clip = int(rng.integers(CLIP_FRAMES[0], CLIP_FRAMES[1] + 1))
    shown = spread_frames(n_clip, frames)
    paths = _place(rng, n_objects, size, n_clip, move)  # per rectangle: (x, y) per clip frame, w, h
    background = np.array(rng.integers(20, 120, 3), dtype=np.uint8)  # as the synth scenes' plain colour
    images, labels = [], []
    for t in shown:
        image = np.broadcast_to(background, (size, size, 3)).copy()
        label = np.full((size, size), -1, dtype=np.int64)
        for k, (xy, w, h) in enumerate(paths):  # later rectangles in front
            x, y = xy[t]
            image[y:y + h, x:x + w] = COLOURS[names[k]]
            label[y:y + h, x:x + w] = k
        images.append(Image.fromarray(image))
        labels.append(label)
    areas = [int((label == target).sum()) for label in labels]
    key = int(np.argmax(areas))  # the first of equal areas
    if areas[key] == 0:  # hidden in every shown frame: the few tries found no free path
        return None
    per_frame = [{k: _box(label == k) for k in range(n_objects) if (label == k).any()} for label in labels]
    frame_boxes = tuple(([boxes[target]] if target in boxes else [],
                         [box for k, box in boxes.items() if k != target]) for boxes in per_frame)
    return GroundingSample(name, f"the {asked} rectangle", 0, list(shown), images, shown[key], *frame_boxes[key],
                           frame_boxes=frame_boxes)


def _place(rng: np.random.Generator, n: int, size: int, n_clip: int,
           move: int) -> list[tuple[list[tuple[int, int]], int, int]]:
    """Each rectangle's path (top-left per clip frame) and size; paths' swept boxes apart where tries allow."""
    lo, hi = max(2, round(size / 8)), max(3, round(size / 3))  # the probe's 14-39 px at 112
    swept: list[tuple[int, int, int, int]] = []
    paths = []
    for _ in range(n):
        for _ in range(PLACE_TRIES):
            w, h = (int(v) for v in rng.integers(lo, hi + 1, 2))
            vx, vy = (int(v) for v in rng.integers(-move, move + 1, 2))
            span_x, span_y = vx * (n_clip - 1), vy * (n_clip - 1)
            if abs(span_x) > size - w:
                vx, span_x = 0, 0
            if abs(span_y) > size - h:
                vy, span_y = 0, 0
            x0 = int(rng.integers(max(0, -span_x), size - w - max(0, span_x) + 1))
            y0 = int(rng.integers(max(0, -span_y), size - h - max(0, span_y) + 1))
            box = (min(x0, x0 + span_x), min(y0, y0 + span_y), max(x0, x0 + span_x) + w, max(y0, y0 + span_y) + h)
            if all(box[2] <= o[0] or o[2] <= box[0] or box[3] <= o[1] or o[3] <= box[1] for o in swept):
                break
        swept.append(box)
        paths.append(([(x0 + vx * t, y0 + vy * t) for t in range(n_clip)], w, h))
    return paths


def _box(mask: np.ndarray) -> list[int]:
    """[x1, y1, x2, y2] of a mask's pixels, exclusive ends."""
    ys, xs = np.nonzero(mask)
    return [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1]
