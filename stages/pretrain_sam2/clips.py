"""Clips generated for the tiny SAM2: the synth stage's simulator and renderer (moving, occluding, textured shapes)
with a seed stream of their own, so no evaluation video is ever shown to the pre-training.

A training clip is a run of consecutive frames that starts on a frame where at least one object is visible,
forward or backward in time (the evaluation tracks both ways from its keyframe); its targets are the objects
visible on that first frame, prompted there with their boxes. A check clip is a whole video: each object is
prompted on the frame where its visible area is largest (as the evaluation picks its keyframe) and tracked over
every frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stages.core.io import derive_seed
from stages.params.synth import SynthScale
from stages.synth.render import background, render_frame
from stages.synth.scene import SimVideo, simulate_video


@dataclass(frozen=True)
class Clip:
    """Frames (T, H, W, 3 uint8), their target masks (T, N, H, W bool), and the boxes prompted on frame 0."""

    frames: np.ndarray
    masks: np.ndarray
    boxes: np.ndarray  # (N, 4) x1, y1, x2, y2 in frame pixels, exclusive ends

    @property
    def n_targets(self) -> int:
        return int(self.masks.shape[1])


def render(video: SimVideo, times: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The frames at `times` and every object's visible mask on them: (T, H, W, 3), (T, O, H, W)."""
    bg = background(video)
    frames, masks = [], []
    for t in times:
        image, visible = render_frame(video, bg, t)
        frame_masks = np.zeros((len(video.objects), video.height, video.width), dtype=bool)
        for o, obj in enumerate(video.objects):
            seen = visible[obj.obj_id]
            if seen.area:
                y0, y1, x0, x1 = seen.window
                frame_masks[o, y0:y1, x0:x1] = seen.patch
        frames.append(image)
        masks.append(frame_masks)
    return np.stack(frames), np.stack(masks)


def mask_box(mask: np.ndarray) -> list[int]:
    """[x1, y1, x2, y2] of a non-empty mask, exclusive ends."""
    ys, xs = np.nonzero(mask)
    return [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1]


def training_clip(seed: int, step: int, n_frames: int, scale: SynthScale, full_length: bool = False,
                  max_targets: int = 0) -> Clip:
    """Training clip number `step` (with one clip per optimizer step, the step's): its own seed,
    derive_seed(seed, "pretrain_sam2", "train", step, attempt) (a clip depends on its number only, so a resumed run
    sees the clips an uninterrupted one sees). A clip that meets a video's end is shorter than `n_frames` (at least
    2), unless `full_length`, which draws again until it is not (clips batched together share their frame count).
    Its targets are the objects visible on its first frame; with `max_targets` > 0, at most that many of them,
    drawn after everything else the clip draws (so a clip with no more visible objects is the clip it always was)."""
    for attempt in range(1000):
        rng = np.random.default_rng(derive_seed(seed, "pretrain_sam2", "train", step, attempt))
        video = simulate_video(rng, scale)
        start = int(rng.integers(0, video.n_frames))
        step_t = -1 if rng.integers(0, 2) else 1
        times = [t for t in range(start, start + step_t * n_frames, step_t) if 0 <= t < video.n_frames]
        if len(times) < (n_frames if full_length else 2):
            continue
        frames, masks = render(video, times)
        targets = [o for o in range(masks.shape[1]) if masks[0, o].any()]
        if not targets:
            continue
        if 0 < max_targets < len(targets):
            targets = sorted(int(o) for o in rng.choice(targets, size=max_targets, replace=False))
        boxes = np.array([mask_box(masks[0, o]) for o in targets], dtype=np.float32)
        return Clip(frames, masks[:, targets], boxes)
    raise ValueError(f"pretrain_sam2: no clip with a visible object in 1000 draws at step {step} (synth scale)")


def check_videos(seed: int, n_videos: int, scale: SynthScale) -> list[tuple[np.ndarray, np.ndarray]]:
    """Whole held-out videos (stream "check"): frames (T, H, W, 3) and masks (T, O, H, W)."""
    out = []
    for i in range(n_videos):
        video = simulate_video(np.random.default_rng(derive_seed(seed, "pretrain_sam2", "check", i)), scale)
        out.append(render(video, list(range(video.n_frames))))
    return out
