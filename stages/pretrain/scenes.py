"""Grounding samples of synth frames for pre-training: the synth stage's simulator and renderer (moving textured
shapes, their colours, kinds, sizes and positions; expressions true by construction), each clip drawn from the
generator its caller gives (the pre-training's own seed stream), so no evaluation video is ever shown to it.

A sample is one expression with a target, drawn from one simulated clip, in the evaluation's question format: N
frames spread uniformly over the clip at the train size, the expression, and an answer naming the shown frame where
the targets' visible area is largest and the targets' boxes there, in pixels of the train size. The think part is
short (the phase's `think`): one sentence, or the template teacher's compact three steps, the thought the default's
SFT traces then keep (a grounding base writes no box after a thought it never saw).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from PIL import Image

from stages.core.frame_spread import nearest_shown, spread_frames
from stages.params.synth import SynthScale
from stages.synth.expressions import NO_TARGET, Facts, generate_expressions
from stages.synth.render import background, full_shape_area, render_frame
from stages.synth.scene import SimVideo, simulate_video
from stages.tasks import answer_text
from stages.teacher.template_teacher import compact_trace


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
    distractors: list[list[int]]  # the boxes of the other objects visible at the keyframe (is a box on the target?)
    think: str = "sentence"  # the thought of its answer: its curriculum phase's `think`
    # per shown frame, in `timestamps` order: (the targets' boxes visible there, the other objects' boxes there), so
    # that an answer naming another shown frame is scored there, as the evaluation scores it; () = the keyframe's only
    frame_boxes: tuple[tuple[list[list[int]], list[list[int]]], ...] = ()

    def boxes_at(self, timestamp: float) -> tuple[list[list[int]], list[list[int]]]:
        """(targets, other objects) at the shown frame an answer's keyframe names: the nearest shown one, the
        earlier on a tie (the evaluation's rule for a keyframe that was not shown)."""
        if not self.frame_boxes:
            return self.boxes, self.distractors
        return self.frame_boxes[self.timestamps.index(nearest_shown(self.timestamps, timestamp))]

    @property
    def response(self) -> str:
        """The target completion: a short thought (one sentence, or the template teacher's compact three steps),
        then the evaluation's answer JSON."""
        if self.think == "compact":
            thought = compact_trace(self.timestamps, self.keyframe, self.boxes, self.images[0].width, len(self.boxes))
        else:
            thought = f"The target is clearest at {self.keyframe}s."
        return answer_text(thought, {"keyframe_timestamp": self.keyframe, "bbox_2d_list": self.boxes})


def synth_sample(rng: np.random.Generator, name: str, n_frames: int, size: int, scale: SynthScale) -> GroundingSample:
    """One sample: a clip simulated from `rng`, one of its expressions with a target drawn from `rng` (clips
    without one are drawn again from the same generator)."""
    while True:
        samples = _clip_samples(rng, name, n_frames, size, scale)
        if samples:
            return samples[int(rng.integers(len(samples)))]


def shape_sample(rng: np.random.Generator, name: str, n_frames: int, size: int, scale: SynthScale,
                 objects: tuple[int, ...], colours: tuple[str, ...]) -> GroundingSample:
    """One clip of `rng.choice(objects)` synth shapes at `scale` (its look and object size), asked by its appearance
    ("the red star", as the synth stage words it; unique in a clip by construction) for one object whose colour is
    one of `colours` and at least half of which is in view at the keyframe: the colour-and-kind scenes under which
    the tiny model learns to find the default's shapes (decision 021). Clips without such an object are drawn again
    from the same generator. Only the shown frames are rendered (an appearance needs no motion facts)."""
    count = int(rng.choice(objects))
    clip_scale = replace(scale, min_objects=count, max_objects=count)
    while True:
        video = simulate_video(rng, clip_scale)
        bg = background(video)
        shown = spread_frames(video.n_frames, n_frames)
        rendered = [render_frame(video, bg, t) for t in shown]
        # per object: the shown frame where most of it is visible (the first of equal), if half of it is in view there
        keys = {}
        for o in video.objects:
            areas = [visible[o.obj_id].area for _, visible in rendered]
            k = int(np.argmax(areas))
            if areas[k] > 0 and 2 * areas[k] >= rendered[k][1][o.obj_id].full_area:
                keys[o.obj_id] = k
        askable = [o for o in video.objects if o.colour in colours and o.obj_id in keys]
        if askable:
            break
    target = askable[int(rng.integers(len(askable)))]
    k = keys[target.obj_id]
    per_frame = [{o: _train_size_box(box, video, size) for o, seen in visible.items()
                  if (box := seen.box()) is not None} for _, visible in rendered]
    frame_boxes = tuple(([boxes[target.obj_id]] if target.obj_id in boxes else [],
                         [box for o, box in sorted(boxes.items()) if o != target.obj_id]) for boxes in per_frame)
    images = [Image.fromarray(image).resize((size, size), Image.Resampling.BICUBIC) for image, _ in rendered]
    return GroundingSample(name, f"the {target.name}", 0, list(shown), images, shown[k], *frame_boxes[k],
                           frame_boxes=frame_boxes)


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
            if (box := seen.box()) is not None:
                boxes[(t, o)] = box
    shape_area = np.array([full_shape_area(o.kind, o.radius) for o in video.objects], dtype=np.int64)
    expressions = generate_expressions(video, Facts(visible_area, full_area, centroids, shape_area, hidden_by), rng)
    shown = spread_frames(n_t, n_frames)
    images = [Image.fromarray(frames[t]).resize((size, size), Image.Resampling.BICUBIC) for t in shown]
    scaled = {t: {o: _train_size_box(box, video, size) for (at, o), box in sorted(boxes.items()) if at == t}
              for t in shown}
    out = []
    for expression in expressions:
        if expression.type_id == NO_TARGET:
            continue
        areas = [int(visible_area[t, list(expression.obj_ids)].sum()) for t in shown]
        if max(areas) == 0:
            continue
        key = int(np.argmax(areas))  # the first of equal areas
        frame_boxes = tuple(([at[o] for o in expression.obj_ids if o in at],
                             [box for o, box in sorted(at.items()) if o not in expression.obj_ids])
                            for at in (scaled[t] for t in shown))
        out.append(GroundingSample(name, expression.text, expression.type_id, list(shown), images, shown[key],
                                   *frame_boxes[key], frame_boxes=frame_boxes))
    return out


def _train_size_box(box: tuple[int, int, int, int], video: SimVideo, size: int) -> list[int]:
    """A frame-pixel box [x1, y1, x2, y2] in pixels of the size × size frames shown."""
    sx, sy = size / video.width, size / video.height
    return [round(box[0] * sx), round(box[1] * sy), round(box[2] * sx), round(box[3] * sy)]
