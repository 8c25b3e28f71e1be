"""Pure rules: keyframe choice, frame sampling (anchor-based, or the evaluation's uniform spread from
`stages.core.frame_spread`), box scaling, KTG point.

Anchor sampling rule (docs/sampling.md). Given T frames, N wanted and the keyframe (anchor) a:
- T ≤ N: all T frames (no duplicates; the model sees fewer than N frames).
- otherwise the stride is k = ⌊(T−1)/(N−1)⌋ (the widest even spacing that fits N frames in the video)
  and the phase is a mod k, so the grid {a mod k + i·k} contains the anchor; of that grid, the N
  consecutive points that keep the anchor as central as possible are taken. If the grid has fewer
  than N points (possible when the phase is large), k is reduced by one and the rule repeats; k = 1
  always works since T ≥ N.
This keeps the paper's anchor-phase idea (supplementary §B) while guaranteeing what the released code
does not: the anchor is included, all indices are valid and strictly increasing, and the count is N.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import ndimage

from stages.core.frame_spread import spread_frames


def sample_frames(n_video_frames: int, n_wanted: int, anchor: int) -> list[int]:
    """Frame indices for the model: strictly increasing, valid, containing `anchor`, N when T ≥ N.

    Raises:
        ValueError: anchor outside the video, or non-positive sizes.
    """
    T, N = n_video_frames, n_wanted
    if T <= 0 or N <= 0:
        raise ValueError(f"need positive frame counts, got T={T}, N={N}")
    if not 0 <= anchor < T:
        raise ValueError(f"anchor {anchor} outside a {T}-frame video")
    if T <= N:
        return list(range(T))
    stride = (T - 1) // (N - 1) if N > 1 else T
    while stride >= 1:
        grid = list(range(anchor % stride, T, stride))
        if len(grid) >= N:
            position = grid.index(anchor)
            start = min(max(position - (N - 1) // 2, 0), len(grid) - N)
            return grid[start:start + N]
        stride -= 1
    raise AssertionError("unreachable: stride 1 always fits")  # pragma: no cover


def top_k_frames(areas: Sequence[float], k: int) -> list[int]:
    """Indices of the k largest positive areas, largest first (ties: earlier frame first)."""
    areas = np.asarray(areas, dtype=float)
    order = sorted((i for i in range(len(areas)) if areas[i] > 0), key=lambda i: (-areas[i], i))
    return order[:k]


def choose_keyframe(areas: Sequence[float], k: int, mode: str, rng: np.random.Generator) -> tuple[int, list[int]]:
    """The keyframe index and the top-k candidates it was drawn from.

    mode "topk_random": uniform among the top-k frames by area (Veason-R1); "max_area": the largest
    (RCoT-Seg). Raises ValueError when the target is empty in every frame.
    """
    candidates = top_k_frames(areas, k)
    if not candidates:
        raise ValueError("target is empty in every frame")
    if mode == "max_area":
        return candidates[0], candidates
    return int(candidates[int(rng.integers(len(candidates)))]), candidates


def frames_and_keyframe(areas: Sequence[float], n_frames: int, k: int, mode: str, spread: str,
                        rng: np.random.Generator) -> tuple[list[int], int, list[int]]:
    """The shown frame indices, the keyframe and its top-k candidates, all video frame indices.

    spread "anchor": the keyframe is drawn over the whole video, the frames are `sample_frames` around it (the
    papers); "uniform": the frames are `spread_frames` (what the evaluation shows) and the keyframe is drawn by
    the same `mode` rule among them only. Raises ValueError when the target is empty in every (shown) frame.
    """
    areas = np.asarray(areas, dtype=float)
    if spread == "anchor":
        key, top = choose_keyframe(areas, k, mode, rng)
        return sample_frames(len(areas), n_frames, key), key, top
    shown = spread_frames(len(areas), n_frames)
    try:
        position, top = choose_keyframe(areas[shown], k, mode, rng)
    except ValueError:
        if areas.any():  # present in the video, but in none of the frames the spread shows
            raise ValueError(f"target is empty in every shown frame (uniform spread of {len(shown)})") from None
        raise
    return shown, shown[position], [shown[p] for p in top]


def scale_box(box: Sequence[float] | None, width: int, height: int, size: int) -> list[float] | None:
    """A box from the original frame to the square train resolution (None stays None)."""
    if box is None or any(np.isnan(v) for v in box):
        return None
    sx, sy = size / width, size / height
    x1, y1, x2, y2 = box
    return [x1 * sx, y1 * sy, x2 * sx, y2 * sy]


def inscribed_circle_centre(mask: np.ndarray, max_side: int = 96) -> tuple[float, float] | None:
    """Centre (x, y) in pixel coordinates (pixel centres at +0.5) of the largest circle inside the mask.

    It is the pixel farthest from the background (Euclidean distance transform); ties go to the
    first such pixel in row-major order. None for an empty mask.
    """
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    if rows.size == 0:
        return None
    # the transform only needs the mask's bounding box (much smaller than a 720p frame); padding makes
    # the box border and the image border count as background
    y0, x0 = rows[0], cols[0]
    crop = mask[y0:rows[-1] + 1, x0:cols[-1] + 1]
    # large masks: search on every `step`-th pixel (the result is still a mask pixel, within `step`
    # pixels of the exact centre — far below box precision at train size)
    step = max(1, max(crop.shape) // max_side)
    grid = crop[::step, ::step]
    distance = ndimage.distance_transform_edt(np.pad(grid, 1))[1:-1, 1:-1]
    y, x = np.unravel_index(int(np.argmax(distance)), distance.shape)
    return float(x * step + x0) + 0.5, float(y * step + y0) + 0.5
