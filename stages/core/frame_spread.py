"""The frames the evaluation shows: N spread evenly over a video, and which of them a named keyframe means. One rule
for the evaluation, the pre-training's clips and checks and `keyframes.frames: uniform`, kept in `core` so that the
stages using it depend on nothing but it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def spread_frames(n_video_frames: int, n_frames: int) -> list[int]:
    """N frame indices spread evenly over the video, first and last included (all frames when T ≤ N): the frames
    the evaluation shows, the pre-training's clips and `keyframes.frames: uniform`.

    Raises:
        ValueError: non-positive sizes.
    """
    if n_video_frames <= 0 or n_frames <= 0:
        raise ValueError(f"need positive frame counts, got T={n_video_frames}, N={n_frames}")
    if n_video_frames <= n_frames:
        return list(range(n_video_frames))
    # T > N makes the spacing (T−1)/(N−1) > 1, so the rounded points are distinct: N of them
    return [int(i) for i in np.round(np.linspace(0, n_video_frames - 1, n_frames)).astype(int)]


def nearest_shown(shown: Sequence[int], timestamp: float) -> int:
    """The shown timestamp an answer's keyframe means: itself when shown, else the nearest shown one, the earlier on a
    tie (the model's choice kept as close as possible)."""
    return min(shown, key=lambda t: (abs(t - timestamp), t))
