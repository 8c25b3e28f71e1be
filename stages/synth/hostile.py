"""`synth.size: hostile`: the geometry the real datasets hold and the default synthetic data almost never does.

One video per case, each at an odd frame size, in both splits (training samples, cot, filter, shard, SFT
and GRPO meet it; evaluation meets it again): slivers one pixel wide at each border (sub-pixel at the
train size), single-pixel objects (masks whose RLE covers one pixel, one in the last pixel of the frame),
an object that leaves the frame and re-enters, a target absent from every frame, a target visible only in a
frame that uniform sampling skips, touching and overlapping boxes, and a frame of 11 × 7 pixels. Every
expression starts with its case name (`sliver-left: …`), so a failure names the case it met.

The frames are plain: a grey background with a little seeded noise and flat-coloured objects. Same seed →
byte-identical files (the layout and the masks do not depend on the seed; the noise does).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image
from pycocotools import mask as mask_utils

from stages.core.io import derive_seed

N_FRAMES = 12  # evaluation's uniform 4 of 12 frames are 0, 4, 7, 11 (absent-in-sampled-frames hides in 2)
COLOURS = [(230, 30, 30), (30, 200, 40), (40, 60, 230), (240, 220, 20), (250, 140, 0), (255, 255, 255)]


@dataclass
class Case:
    """One video: its size, its objects' masks per frame (None = absent) and its expressions."""

    name: str
    height: int
    width: int
    objects: list[list[np.ndarray | None]] = field(default_factory=list)  # per object, per frame
    expressions: list[tuple[str, list[int], int]] = field(default_factory=list)  # (text, object indices, type_id)


def _rect(height: int, width: int, y0: int, y1: int, x0: int, x1: int) -> np.ndarray | None:
    """A (height, width) mask of the rectangle's part inside the frame; None when none of it is."""
    mask = np.zeros((height, width), dtype=bool)
    mask[max(y0, 0):max(min(y1, height), 0), max(x0, 0):max(min(x1, width), 0)] = True
    return mask if mask.any() else None


def _still(height: int, width: int, y0: int, y1: int, x0: int, x1: int) -> list[np.ndarray | None]:
    return [_rect(height, width, y0, y1, x0, x1)] * N_FRAMES


def slivers() -> Case:
    # 641 px wide: one pixel is 0.087 px at train size 56, under one pixel at teacher.image_size 448 (the crash)
    h, w = 47, 641
    case = Case("slivers", h, w, [_still(h, w, 8, 39, 0, 1), _still(h, w, 8, 39, w - 1, w),
                                  _still(h, w, 0, 1, 100, 540), _still(h, w, h - 1, h, 100, 540)])
    case.expressions = [("sliver-left: the one-pixel-wide sliver at the left border", [0], 0),
                        ("sliver-right: the one-pixel-wide sliver at the right border", [1], 0),
                        ("sliver-top: the one-pixel-high sliver at the top border", [2], 0),
                        ("sliver-bottom: the one-pixel-high sliver at the bottom border", [3], 0),
                        ("slivers-all: every sliver along the borders", [0, 1, 2, 3], 1)]
    return case


def one_pixel() -> Case:
    h, w = 61, 97
    dot = [_rect(h, w, 10 + t, 11 + t, 5 + 7 * t, 6 + 7 * t) for t in range(N_FRAMES)]
    case = Case("one-pixel", h, w, [dot, _still(h, w, h - 1, h, w - 1, w), _still(h, w, 20, 40, 30, 60)])
    case.expressions = [("one-pixel: the single-pixel dot that moves down and right", [0], 1),
                        ("one-pixel-corner: the single pixel in the bottom-right corner", [1], 0),
                        ("one-pixel-pair: both single-pixel objects", [0, 1], 1),
                        ("no-target: the purple elephant", [], 2)]
    return case


def leave_reenter() -> Case:
    h, w = 41, 75
    xs = [50, 62, 70, 76, 90, 90, 76, 70, 62, 50, 40, 30]  # crosses the right edge, absent in frames 3-6, back
    case = Case("leave-reenter", h, w, [[_rect(h, w, 15, 26, x, x + 11) for x in xs], _still(h, w, 5, 15, 3, 13)])
    case.expressions = [("leave-reenter: the square that leaves the frame on the right and comes back", [0], 1),
                        ("leave-reenter-still: the square that stays in the top-left corner", [1], 0),
                        ("leave-reenter-both: the two squares", [0, 1], 0)]
    return case


def absent() -> Case:
    h, w = 33, 55
    hidden = [None] * N_FRAMES
    once = [_rect(h, w, 10, 20, 20, 30) if t == 2 else None for t in range(N_FRAMES)]
    case = Case("absent", h, w, [hidden, once, _still(h, w, 3, 9, 40, 50)])
    case.expressions = [("absent-everywhere: the object that never appears", [0], 0),
                        ("absent-in-sampled-frames: the square seen only in the third frame", [1], 1),
                        ("absent-visible: the square that is always there", [2], 0)]
    return case


def touching() -> Case:
    h, w = 45, 63
    case = Case("touching", h, w, [_still(h, w, 10, 30, 10, 25), _still(h, w, 10, 30, 25, 40)])
    case.expressions = [("touching-left: the left one of two touching rectangles", [0], 0),
                        ("touching-right: the right one of two touching rectangles", [1], 0),
                        ("touching-both: both touching rectangles", [0, 1], 0)]
    return case


def overlapping() -> Case:
    h, w = 39, 59
    case = Case("overlapping", h, w, [_still(h, w, 5, 25, 5, 30), _still(h, w, 15, 35, 20, 50)])
    case.expressions = [("overlapping-first: the upper-left of two overlapping squares", [0], 0),
                        ("overlapping-second: the lower-right of two overlapping squares", [1], 0),
                        ("overlapping-both: both overlapping squares", [0, 1], 0)]
    return case


def tiny_frame() -> Case:
    h, w = 7, 11
    case = Case("tiny-frame", h, w, [_still(h, w, 2, 5, 1, 4), _still(h, w, 0, 7, 10, 11)])
    case.expressions = [("tiny-frame: the square in an 11 by 7 pixel frame", [0], 0),
                        ("tiny-frame-edge: the column at the right edge of the tiny frame", [1], 0),
                        ("tiny-frame-both: everything in the tiny frame", [0, 1], 0)]
    return case


CASES: tuple[Callable[[], Case], ...] = (slivers, one_pixel, leave_reenter, absent, touching, overlapping,
                                         tiny_frame)


def _frame(case: Case, t: int, rng: np.random.Generator) -> np.ndarray:
    image = np.clip(rng.normal(110, 6, (case.height, case.width, 3)), 0, 255).astype(np.uint8)
    for k, track in enumerate(case.objects):
        if track[t] is not None:
            image[track[t]] = COLOURS[k % len(COLOURS)]
    return image


def _rle(mask: np.ndarray | None) -> dict | None:
    if mask is None:
        return None
    encoded = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": [int(mask.shape[0]), int(mask.shape[1])], "counts": encoded["counts"].decode("ascii")}


def write_hostile(out_dir: Path, source: str, seed: int, splits: tuple[str, ...], foreground
                  ) -> tuple[dict[str, dict], dict, dict]:
    """Write every case's frames into `out_dir/JPEGImages/<source>/<split>/<case>/`; return (meta per split,
    mask_dict items, mask_dict_foreground entries) for the ReVOS files the synth writer writes.

    `foreground(tracks, n_frames, height, width)`: the synth writer's foreground entry of the targets' RLEs.
    """
    meta: dict[str, dict] = {split: {} for split in splits}
    mask_dict: dict[str, list] = {}
    fg: dict[str, dict] = {}
    anno = 1
    for split in splits:
        for build in CASES:
            case = build()
            key = f"{source}/{split}/{case.name}"
            rng = np.random.default_rng(derive_seed(seed, "synth-hostile", key))
            folder = out_dir / "JPEGImages" / key
            folder.mkdir(parents=True, exist_ok=True)
            names = [f"{2 * t:05d}" for t in range(N_FRAMES)]
            for t, name in enumerate(names):
                buffer = io.BytesIO()
                Image.fromarray(_frame(case, t, rng)).save(buffer, format="JPEG", quality=95)
                (folder / f"{name}.jpg").write_bytes(buffer.getvalue())
            rles = [[_rle(m) for m in track] for track in case.objects]
            ids = list(range(anno, anno + len(rles)))
            anno += len(rles)
            mask_dict.update({str(a): r for a, r in zip(ids, rles, strict=True)})
            meta[split][key] = {
                "vid_id": case.name, "height": case.height, "width": case.width, "frames": names,
                "expressions": {str(i): {"exp": text, "obj_id": objs, "anno_id": [ids[o] for o in objs],
                                         "type_id": type_id}
                                for i, (text, objs, type_id) in enumerate(case.expressions)}}
            used = sorted({o for _, objs, _ in case.expressions for o in objs})
            fg[key] = foreground([rles[o] for o in used], N_FRAMES, case.height, case.width)
    return meta, mask_dict, fg
