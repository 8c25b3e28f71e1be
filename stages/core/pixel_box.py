"""Boxes → whole pixels: the one conversion every box drawer and box rasteriser uses.

A box is `[x1, y1, x2, y2]` with exclusive right/bottom edges (docs/contracts.md), in some frame's
coordinates; `scale` takes it to the picture's (`(sx, sy)`, or one factor for both). Each edge `v` goes to the
nearest whole pixel edge, half-way rounding up (never Python's round-half-to-even): a pixel is covered when
its centre lies in (lo, hi]. Both edges are then clamped into `[0, size]`. Corners are not reordered: an
inverted box is empty. `min_size=1` (drawing) widens an empty or sub-pixel span to one pixel inside the
frame, at its left/top edge (a sliver at the right border keeps the last column); `min_size=0`
(rasterising masks) keeps an empty span empty, so a box that covers no pixel centre makes no mask.

`answer_box` is the integer form of a ground-truth box in a training answer: Python's `round` per coordinate
(the rule every shard was written with), except that a box with width (height) collapsing to zero pixels keeps
one, the pixel under its centre — a sliver is taught as a one-pixel box, never as a degenerate one."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

Scale = float | tuple[float, float]


def pixel_edge(value: float) -> int:
    """The whole number nearest to `value`, half-way rounding up (exact: `floor(v + 0.5)` in floating point
    rounds 0.49999999999999994 up to 1)."""
    whole = math.floor(value)
    return whole + 1 if value - whole >= 0.5 else whole


def pixel_span(lo: float, hi: float, size: int, min_size: int = 1) -> tuple[int, int]:
    """[start, stop) pixel columns (or rows) of an edge pair already at the picture's scale.

    Args:
        lo, hi: the box's edges (exclusive hi), at picture scale; not reordered.
        size: the picture's width (or height), ≥ 1.
        min_size: 1 = at least one pixel inside [0, size); 0 = empty stays empty.

    Raises:
        ValueError: size < 1, min_size not 0 or 1, or an edge that is NaN.
    """
    if size < 1:
        raise ValueError(f"picture size must be at least 1 pixel, got {size}")
    if min_size not in (0, 1):
        raise ValueError(f"min_size must be 0 or 1, got {min_size}")
    if math.isnan(lo) or math.isnan(hi):
        raise ValueError(f"box edge is not a number: [{lo}, {hi}]")
    start = _inside(lo, size)
    stop = max(_inside(hi, size), start)
    if stop - start < min_size:
        start = min(start, size - 1)
        stop = start + 1
    return start, stop


def _inside(edge: float, size: int) -> int:
    # bounded before rounding: an infinite or huge edge (1e308 × a scale) lands on the border, not in floor()
    return min(max(pixel_edge(min(max(edge, -1.0), size + 1.0)), 0), size)


def pixel_box(box: Sequence[float], scale: Scale, width: int, height: int, min_size: int = 1
              ) -> tuple[int, int, int, int]:
    """`box` scaled by `scale` into a `width × height` picture, as whole pixels (x0, y0, x1, y1), exclusive
    right/bottom edges, inside the picture; at least one pixel each way with `min_size=1` (the module's rule).

    Raises:
        ValueError: a box of other than four numbers, a NaN edge, or a picture under one pixel.
    """
    if len(box) != 4:
        raise ValueError(f"a box is [x1, y1, x2, y2], got {list(box)}")
    sx, sy = (scale, scale) if isinstance(scale, int | float) else scale
    x0, x1 = pixel_span(float(box[0]) * sx, float(box[2]) * sx, width, min_size)
    y0, y1 = pixel_span(float(box[1]) * sy, float(box[3]) * sy, height, min_size)
    return x0, y0, x1, y1


def outline_rect(box: Sequence[float], scale: Scale, width: int, height: int) -> list[int]:
    """PIL `ImageDraw.rectangle` corners (inclusive) of `box` in a `width × height` picture: always at least
    one pixel, inside the picture, x0 ≤ x1 and y0 ≤ y1 (so PIL never refuses it)."""
    x0, y0, x1, y1 = pixel_box(box, scale, width, height, min_size=1)
    return [x0, y0, x1 - 1, y1 - 1]


def boxes_mask(boxes: Iterable[Sequence[float]], height: int, width: int, scale: Scale = 1.0) -> np.ndarray:
    """(height, width) bool union of the boxes' pixels (pixel centres inside a box; empty boxes add nothing)."""
    mask = np.zeros((height, width), dtype=bool)
    for box in boxes:
        x0, y0, x1, y1 = pixel_box(box, scale, width, height, min_size=0)
        mask[y0:y1, x0:x1] = True
    return mask


def answer_box(box: Sequence[float]) -> list[int]:
    """Integer [x1, y1, x2, y2] of a ground-truth box for an answer (see the module docstring); a box that is
    empty or inverted as given stays as `round` makes it."""
    out = [int(round(float(v))) for v in box]
    for lo, hi in ((0, 2), (1, 3)):
        if out[hi] <= out[lo] and float(box[hi]) > float(box[lo]):
            out[lo] = math.floor((float(box[lo]) + float(box[hi])) / 2)
            out[hi] = out[lo] + 1
    return out
