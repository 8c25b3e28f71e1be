"""COCO RLE geometry without decoding masks: area, box, union, and RLE text ↔ pycocotools objects.

pycocotools computes `area` and `toBbox` directly on the run-length counts, so the index of a whole
dataset never materialises a mask. Boxes follow the project convention ([x1, y1, x2, y2], exclusive
right/bottom edges: `x2 = x + w` of `toBbox`'s [x, y, w, h]).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
from pycocotools import mask as mask_utils


class RLEError(ValueError):
    """An RLE that pycocotools cannot read (bad counts string, bad size)."""


def to_coco(rle: dict) -> dict:
    """A ReVOS RLE (`counts` as str) as the object pycocotools wants (`counts` as bytes)."""
    counts = rle["counts"]
    return {"size": [int(rle["size"][0]), int(rle["size"][1])],
            "counts": counts.encode("ascii") if isinstance(counts, str) else counts}


def to_json(rle: dict) -> dict:
    """A pycocotools RLE as JSON-able ReVOS RLE (`counts` as str)."""
    counts = rle["counts"]
    return {"size": [int(rle["size"][0]), int(rle["size"][1])],
            "counts": counts.decode("ascii") if isinstance(counts, bytes) else counts}


def areas_and_boxes(rles: Sequence[dict | None]) -> tuple[np.ndarray, np.ndarray]:
    """Areas (int64, n) and boxes (float64, n×4, NaN when empty) of a list of RLEs (None = absent).

    All present RLEs go to pycocotools in one call each for area and toBbox (no decoding).
    """
    n = len(rles)
    areas = np.zeros(n, dtype=np.int64)
    boxes = np.full((n, 4), np.nan)
    present = [i for i, r in enumerate(rles) if r is not None]
    if not present:
        return areas, boxes
    objs = [to_coco(rles[i]) for i in present]
    try:
        got_areas = np.asarray(mask_utils.area(objs), dtype=np.int64).reshape(-1)
        xywh = np.asarray(mask_utils.toBbox(objs), dtype=np.float64).reshape(-1, 4)
    except (TypeError, ValueError, KeyError) as err:
        raise RLEError(f"unreadable RLE: {err}") from err
    areas[present] = got_areas
    nonempty = got_areas > 0
    idx = np.asarray(present)[nonempty]
    boxes[idx, 0] = xywh[nonempty, 0]
    boxes[idx, 1] = xywh[nonempty, 1]
    boxes[idx, 2] = xywh[nonempty, 0] + xywh[nonempty, 2]
    boxes[idx, 3] = xywh[nonempty, 1] + xywh[nonempty, 3]
    return areas, boxes


@functools.lru_cache(maxsize=64)
def _empty(height: int, width: int) -> tuple[tuple[int, int], bytes]:
    rle = mask_utils.encode(np.zeros((height, width), dtype=np.uint8, order="F"))
    return (int(rle["size"][0]), int(rle["size"][1])), rle["counts"]


def empty(height: int, width: int) -> dict:
    """The RLE of an all-empty mask (encoded once per size)."""
    size, counts = _empty(height, width)
    return {"size": list(size), "counts": counts}


def union(rles: Sequence[dict | None], height: int, width: int) -> dict:
    """The union of RLEs (None skipped) as a pycocotools RLE; an empty RLE when none is present."""
    present = [to_coco(r) for r in rles if r is not None]
    if not present:
        return empty(height, width)
    if len(present) == 1:
        return present[0]
    return mask_utils.merge(present, intersect=False)


def decode(rle: dict | None, height: int, width: int) -> np.ndarray:
    """A boolean (H, W) mask; all False for None."""
    if rle is None:
        return np.zeros((height, width), dtype=bool)
    return mask_utils.decode(to_coco(rle)).astype(bool)


def encode(mask: np.ndarray) -> dict:
    """A boolean/uint8 (H, W) mask as a JSON-able ReVOS RLE (counts as str)."""
    return to_json(mask_utils.encode(np.asfortranarray(mask, dtype=np.uint8)))
