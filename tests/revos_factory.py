"""Write tiny, valid ReVOS-layout roots from a Python description, for tests (and break them on purpose).

    root = write_root(tmp_path, [VideoSpec("SRC/train/a", n_frames=4, objects={7: boxes}, expressions=[...])])

Objects are rectangles per frame (None = absent); masks are real COCO RLEs; frames are real JPEGs.
`mask_dict_foreground.json` is the union of the anno_ids the video's expressions use. To break a root on
purpose: `break_frame`, `truncate_file`, `edit_json` (load, edit in place, write back).
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image
from pycocotools import mask as mask_utils

Box = tuple[int, int, int, int] | None  # x1, y1, x2, y2 (exclusive), None = absent


@dataclass
class VideoSpec:
    """One video: key, split, size, frame names, objects (anno_id → box per frame) and expressions."""

    key: str
    split: str = "train"
    height: int = 24
    width: int = 32
    frames: list[str] | None = None  # default: 00000, 00002, 00004, …
    n_frames: int = 4
    objects: dict[int, list[Box]] = field(default_factory=dict)
    expressions: list[dict] = field(default_factory=list)  # {"exp", "obj_id", "anno_id", "type_id"}

    def frame_names(self) -> list[str]:
        return self.frames if self.frames is not None else [f"{2 * i:05d}" for i in range(self.n_frames)]


def rect_mask(box: Box, height: int, width: int) -> np.ndarray:
    """Boolean mask of a rectangle (empty for None)."""
    mask = np.zeros((height, width), dtype=bool)
    if box is not None:
        x1, y1, x2, y2 = box
        mask[y1:y2, x1:x2] = True
    return mask


def encode(mask: np.ndarray) -> dict | None:
    """ReVOS RLE (counts as str), None for an empty mask."""
    if not mask.any():
        return None
    rle = mask_utils.encode(np.asfortranarray(mask, dtype=np.uint8))
    return {"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")}


def simple_video(key: str, split: str = "train", n_frames: int = 4) -> VideoSpec:
    """Two moving rectangles (anno ids derived from the key), a referring, a reasoning (multi) and a
    no-target expression."""
    base = 10 * (zlib.crc32(key.encode()) % 100_000) + 1  # stable across processes (not hash())
    a, b = base, base + 1
    return VideoSpec(
        key=key, split=split, n_frames=n_frames,
        objects={
            a: [(2 + i, 2, 10 + i, 8) for i in range(n_frames)],
            b: [(20, 10 + (i % 3), 28, 18) if i != 1 else None for i in range(n_frames)],
        },
        expressions=[
            {"exp": "the left box", "obj_id": [0], "anno_id": [a], "type_id": 0},
            {"exp": "both boxes", "obj_id": [0, 1], "anno_id": [a, b], "type_id": 1},
            {"exp": "the purple cat", "obj_id": [], "anno_id": [], "type_id": 2},
        ],
    )


def write_root(root: Path, videos: list[VideoSpec]) -> Path:
    """Write the ReVOS layout for `videos` under `root`; returns `root`."""
    root = Path(root)
    meta: dict[str, dict] = {"train": {}, "valid": {}}
    mask_dict: dict[str, list] = {}
    foreground: dict[str, dict] = {}
    for spec in videos:
        names = spec.frame_names()
        folder = root / "JPEGImages" / spec.key
        folder.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(zlib.crc32(spec.key.encode()))
        for t, name in enumerate(names):
            image = rng.integers(0, 60, (spec.height, spec.width, 3), dtype=np.uint8)
            for boxes in spec.objects.values():
                image[rect_mask(boxes[t], spec.height, spec.width)] = (200, 50, 50)
            Image.fromarray(image).save(folder / f"{name}.jpg", quality=90)
        for anno, boxes in spec.objects.items():
            mask_dict[str(anno)] = [encode(rect_mask(b, spec.height, spec.width)) for b in boxes]
        used = sorted({a for e in spec.expressions for a in e["anno_id"]})
        fg_masks, ratios = [], []
        for t in range(len(names)):
            union = np.zeros((spec.height, spec.width), dtype=bool)
            for anno in used:
                union |= rect_mask(spec.objects[anno][t], spec.height, spec.width)
            rle = mask_utils.encode(np.asfortranarray(union, dtype=np.uint8))
            fg_masks.append({"size": [spec.height, spec.width], "counts": rle["counts"].decode("ascii")})
            ratios.append(float(union.mean()))
        foreground[spec.key] = {"masks_rle": fg_masks, "foreground_ratio": ratios}
        meta[spec.split][spec.key] = {
            "vid_id": spec.key.rsplit("/", 1)[-1], "height": spec.height, "width": spec.width, "frames": names,
            "expressions": {str(i): e for i, e in enumerate(spec.expressions)},
        }
    for split, entries in meta.items():
        (root / f"meta_expressions_{split}_.json").write_text(json.dumps({"videos": entries}, indent=1))
    (root / "mask_dict.json").write_text(json.dumps(mask_dict))
    (root / "mask_dict_foreground.json").write_text(json.dumps(foreground))
    return root


def frame_file(root: Path, video: str, frame: str) -> Path:
    """Path of one JPEG frame of a written root."""
    return Path(root) / "JPEGImages" / video / f"{frame}.jpg"


def break_frame(root: Path, video: str, frame: str, how: str) -> Path:
    """Corrupt one frame: "missing" (deleted), "garbage" (not an image), "truncate" (first half of the
    bytes: the header survives, decoding fails) or "resize" (a valid JPEG of half the size)."""
    path = frame_file(root, video, frame)
    if how == "missing":
        path.unlink()
    elif how == "garbage":
        path.write_bytes(b"not a jpeg at all")
    elif how == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif how == "resize":
        with Image.open(path) as img:
            small = img.resize((img.width // 2, img.height // 2))
        small.save(path, quality=90)
    else:
        raise ValueError(f"unknown corruption {how!r}")
    return path


def truncate_file(path: Path, n_bytes: int = 10) -> None:
    """Drop the last `n_bytes` of a file (a malformed, truncated JSON)."""
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[:-n_bytes])


def edit_json(path: Path, edit) -> None:
    """Load a JSON file, apply `edit(data)` (in place), write it back."""
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def benchmark_videos() -> list[VideoSpec]:
    """Two validation videos for the benchmark fixtures: static and moving rectangles, one object absent from
    a frame, single- and multi-object expressions and a no-target one (dropped by the non-ReVOS layouts)."""
    return [
        VideoSpec(key="SRC/valid/a", split="valid", n_frames=5, objects={
            11: [(2, 2, 10, 8)] * 5,
            12: [(18 + i, 10, 26 + i, 18) if i != 2 else None for i in range(5)],
        }, expressions=[
            {"exp": "the small box", "obj_id": [0], "anno_id": [11], "type_id": 0},
            {"exp": "the box moving right", "obj_id": [1], "anno_id": [12], "type_id": 0},
            {"exp": "everything that is red", "obj_id": [0, 1], "anno_id": [11, 12], "type_id": 1},
        ]),
        VideoSpec(key="SRC/valid/b", split="valid", height=20, width=30, n_frames=4, objects={
            21: [(5, 5, 15, 15)] * 4,
            22: [(16, 2, 28, 9)] * 4,
        }, expressions=[
            {"exp": "the square", "obj_id": [0], "anno_id": [21], "type_id": 0},
            {"exp": "the flat box", "obj_id": [1], "anno_id": [22], "type_id": 0},
            {"exp": "the purple cat", "obj_id": [], "anno_id": [], "type_id": 2},
        ]),
        VideoSpec(key="SRC/train/c", split="train", n_frames=3, objects={
            51: [(1, 1, 9, 9)] * 3,
            52: [(12, 12, 30, 20), None, (14, 12, 30, 20)],
        }, expressions=[
            {"exp": "the top box", "obj_id": [0], "anno_id": [51], "type_id": 0},
            {"exp": "the box that leaves", "obj_id": [1], "anno_id": [52], "type_id": 1},
        ]),
    ]


PERTURBATIONS = ("same", "shift", "dilate", "empty", "full", "one_pixel", "low_value")


def perturb(mask: np.ndarray, kind: str) -> np.ndarray:
    """A prediction PNG (uint8) made from a ground-truth mask: "same" (0/255), "shift" (2 px right), "dilate"
    (1 px), "empty", "full" (every pixel), "one_pixel" (the mask plus one stray pixel), "low_value" (0/1)."""
    m = mask.astype(bool)
    if kind == "shift":
        m = np.roll(m, 2, axis=1)
    elif kind == "dilate":
        m = m | np.roll(m, 1, 0) | np.roll(m, -1, 0) | np.roll(m, 1, 1) | np.roll(m, -1, 1)
    elif kind == "empty":
        m = np.zeros_like(m)
    elif kind == "full":
        m = np.ones_like(m)
    elif kind == "one_pixel":
        m = m.copy()
        m[-1, -1] = True
    elif kind == "low_value":
        return m.astype(np.uint8)
    return m.astype(np.uint8) * 255
