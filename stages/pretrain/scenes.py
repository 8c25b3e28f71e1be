"""Grounding scenes generated for pre-training: the synth stage's simulator and renderer (moving textured
shapes, their colours, kinds, sizes and positions; expressions true by construction), with a seed stream of
their own, so no evaluation video is ever shown to the pre-training.

Each expression with a target becomes one sample in the evaluation's question format: N frames spread
uniformly over the clip at the train size, the expression, and an answer naming the shown frame where the
target's visible area is largest and the targets' boxes there, in pixels of the train size. The think part is
one short sentence: pre-training teaches where things are; the SFT stage teaches the reasoning.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image

from stages.core.io import derive_seed
from stages.core.params import SynthScale
from stages.synth.expressions import NO_TARGET, Facts, generate_expressions
from stages.synth.render import background, full_shape_area, render_frame
from stages.synth.scene import simulate_video
from stages.tasks import answer_text


@dataclass(frozen=True)
class GroundingSample:
    """One pre-training sample: the expression, the shown frames (train size) and the answer."""

    video: str
    expression: str
    type_id: int
    timestamps: list[int]
    images: list[Image.Image]
    keyframe: int
    boxes: list[list[int]]  # [x1, y1, x2, y2] per target at the keyframe, train-size pixels, exclusive ends

    @property
    def response(self) -> str:
        """The target completion: one short sentence of thought, then the evaluation's answer JSON."""
        return answer_text(f"The target is clearest at {self.keyframe}s.",
                           {"keyframe_timestamp": self.keyframe, "bbox_2d_list": self.boxes})


def scene_samples(seed: int, stream: str, n_videos: int, n_frames: int, size: int,
                  scale: SynthScale) -> list[GroundingSample]:
    """The samples of `n_videos` simulated clips; clip i's seed is derive_seed(seed, "pretrain", stream, i).

    `stream` keeps the training and held-out scenes apart ("train", "check"); the synth stage seeds its
    videos with derive_seed(synth.seed, "synth", key), a different stream.
    """
    out: list[GroundingSample] = []
    for i in range(n_videos):
        rng = np.random.default_rng(derive_seed(seed, "pretrain", stream, i))
        out += _clip_samples(rng, f"{stream}/{i:05d}", n_frames, size, scale)
    return out


def spread_frames(n_video_frames: int, n_frames: int) -> list[int]:
    """N frame indices spread evenly over the clip, first and last included (all when the clip is shorter): the
    rule the evaluation uses to pick the frames it shows."""
    if n_video_frames <= n_frames:
        return list(range(n_video_frames))
    return [int(i) for i in np.unique(np.round(np.linspace(0, n_video_frames - 1, n_frames)).astype(int))]


def _clip_samples(rng: np.random.Generator, name: str, n_frames: int, size: int,
                  scale: SynthScale) -> list[GroundingSample]:
    video = simulate_video(rng, scale)
    bg = background(video)
    n_obj, n_t = len(video.objects), video.n_frames
    visible_area = np.zeros((n_t, n_obj), dtype=np.int64)
    full_area = np.zeros((n_t, n_obj), dtype=np.int64)
    centroids = np.full((n_t, n_obj, 2), np.nan)
    hidden_by: list[list[tuple[int, ...]]] = []
    boxes: dict[tuple[int, int], tuple[int, int, int, int]] = {}
    frames = []
    for t in range(n_t):
        image, visible = render_frame(video, bg, t)
        frames.append(image)
        hidden_by.append([visible[o].hidden_by for o in range(n_obj)])
        for o in range(n_obj):
            seen = visible[o]
            visible_area[t, o], full_area[t, o] = seen.area, seen.full_area
            centroids[t, o] = seen.centroid()
            if seen.area:
                ys, xs = np.nonzero(seen.patch)
                y0, x0 = seen.window[0], seen.window[2]
                boxes[(t, o)] = (x0 + int(xs.min()), y0 + int(ys.min()), x0 + int(xs.max()) + 1, y0 + int(ys.max()) + 1)
    shape_area = np.array([full_shape_area(o.kind, o.radius) for o in video.objects], dtype=np.int64)
    expressions = generate_expressions(video, Facts(visible_area, full_area, centroids, shape_area, hidden_by), rng)
    shown = spread_frames(n_t, n_frames)
    images = [Image.fromarray(frames[t]).resize((size, size), Image.Resampling.BICUBIC) for t in shown]
    sx, sy = size / video.width, size / video.height
    out = []
    for expression in expressions:
        if expression.type_id == NO_TARGET:
            continue
        areas = [int(visible_area[t, list(expression.obj_ids)].sum()) for t in shown]
        if max(areas) == 0:
            continue
        key = shown[int(np.argmax(areas))]  # the first of equal areas
        targets = [[round(x1 * sx), round(y1 * sy), round(x2 * sx), round(y2 * sy)]
                   for o in expression.obj_ids if (box := boxes.get((key, o))) for x1, y1, x2, y2 in [box]]
        out.append(GroundingSample(name, expression.text, expression.type_id, list(shown), images, key, targets))
    return out
