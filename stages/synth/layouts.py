"""Write a ReVOS-layout root again in the on-disk layout of another benchmark (`synth.layout`).

The synthetic generator always renders the ReVOS layout; this module re-writes one split of it exactly as
the other benchmarks publish their data (docs/benchmarks.md), so every benchmark reader and scorer is
tested offline on the same scenes:

- `mevis`: `<split>/JPEGImages/<video>/<frame>.jpg`, `<split>/meta_expressions.json`
  (`{"videos": {video: {"expressions": {exp_id: {"exp", "obj_id", "anno_id"}}, "frames"}}}`) and, except for
  the server split `valid`, `<split>/mask_dict.json` (COCO RLE per anno_id and frame). Frames are renumbered
  00000, 00001, … (MeViS frames are consecutive; its evaluator opens `00000.png`).
- `reasonvos`: `JPEGImages/<video>/<frame>.jpg`, `meta_expressions.json`
  (`{"videos": {video: {"source", "expressions": [{"obj_id", "exp_id", "exp_text", "is_sent"}]}}}`) and one
  0/255 PNG per annotated frame in `Annotations/<source>_<video>_<obj_id>/`. One obj_id per distinct target
  (a multi-object target is one annotated mask).
- `refytvos`: `<split>/JPEGImages/<video>/<frame>.jpg`, `meta_expressions/<split>/meta_expressions.json`
  (`{"videos": {video: {"expressions": {exp_id: {"exp", "obj_id": "k"}}, "frames"}}}`), `<split>/meta.json`, and
  for `train` the palette PNGs `<split>/Annotations/<video>/<frame>.png` (pixel = object id). Single-object
  expressions only (the benchmark has no others).
- `refdavis` (as ReferFormer's conversion leaves it), per split (`train`, `valid`):
  `<split>/JPEGImages/<video>/<frame>.jpg`, `<split>/Annotations/<video>/<frame>.png` (palette, every frame),
  `meta_expressions/<split>/meta_expressions.json` with four expressions per object in the order annotator-1
  first-frame, annotator-1 full-video, annotator-2 first-frame, annotator-2 full-video
  (exp_id = 4·(object − 1) + annotator), `<split>/meta.json`. Frames renumbered.

No-target expressions (type 2) exist only in ReVOS and are dropped by every other layout.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from PIL import Image
from pycocotools import mask as mask_utils

LAYOUTS = ("revos", "mevis", "reasonvos", "refytvos", "refdavis")
PALETTE = [0, 0, 0, 128, 0, 0, 0, 128, 0, 128, 128, 0, 0, 0, 128, 128, 0, 128, 0, 128, 128] + [128] * (768 - 21)


def _meta(root: Path, split: str) -> dict:
    return json.loads((root / f"meta_expressions_{split}_.json").read_text())["videos"]


def _decode(rle: dict | None, height: int, width: int) -> np.ndarray:
    if not rle:
        return np.zeros((height, width), dtype=bool)
    return mask_utils.decode({"size": rle["size"], "counts": rle["counts"].encode("ascii")}).astype(bool)


def _flat(video: str) -> str:
    """A ReVOS video key (a path) as one folder name without '/' or '_' (ReasonVOS splits keys on '_')."""
    return video.replace("/", "-").replace("_", "-")


def _copy_frames(root: Path, video: str, names: list[str], dst: Path, renumber: bool) -> list[str]:
    dst.mkdir(parents=True, exist_ok=True)
    out = [f"{i:05d}" for i in range(len(names))] if renumber else list(names)
    for src, new in zip(names, out, strict=True):
        shutil.copyfile(root / "JPEGImages" / video / f"{src}.jpg", dst / f"{new}.jpg")
    return out


def _targets(meta: dict) -> dict[str, list[tuple[str, dict]]]:
    return {video: [(k, e) for k, e in sorted(entry["expressions"].items(), key=lambda kv: int(kv[0]))
                    if e.get("anno_id")] for video, entry in sorted(meta.items())}


def _save_palette(labels: np.ndarray, path: Path) -> None:
    image = Image.fromarray(labels.astype(np.uint8), mode="P")
    image.putpalette(PALETTE)
    image.save(path)


def write_layout(layout: str, revos_root: Path, out: Path, split: str = "valid", with_masks: bool = True) -> Path:
    """Re-write `split` of the ReVOS-layout root `revos_root` in `layout` under `out` (created); returns `out`.

    `split` names the benchmark's split folder (mevis: train | valid_u | valid; refytvos: train | valid;
    refdavis: train | valid; reasonvos has one). `with_masks=False` writes the split without ground truth (the server
    splits: MeViS valid, Ref-YouTube-VOS valid).
    """
    if layout not in LAYOUTS or layout == "revos":
        raise ValueError(f"synth.layout {layout!r}: expected one of {', '.join(LAYOUTS[1:])} here")
    revos_root, out = Path(revos_root), Path(out)
    source_split = "train" if split == "train" else "valid"
    meta = _meta(revos_root, source_split)
    masks = json.loads((revos_root / "mask_dict.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    writer = {"mevis": _mevis, "reasonvos": _reasonvos, "refytvos": _refytvos, "refdavis": _refdavis}[layout]
    writer(revos_root, meta, masks, out, split, with_masks)
    return out


def _mevis(root: Path, meta: dict, masks: dict, out: Path, split: str, with_masks: bool) -> None:
    base = out / split
    base.mkdir(parents=True, exist_ok=True)
    videos: dict[str, dict] = {}
    mask_dict: dict[str, list] = {}
    for video, exps in _targets(meta).items():
        if not exps:
            continue
        name = _flat(video)
        frames = _copy_frames(root, video, meta[video]["frames"], base / "JPEGImages" / name, renumber=True)
        videos[name] = {"expressions": {k: {"exp": e["exp"], "obj_id": list(e["obj_id"]), "anno_id": list(e["anno_id"])}
                                        for k, e in exps}, "frames": frames}
        for _, e in exps:
            for anno in e["anno_id"]:
                mask_dict[str(anno)] = masks[str(anno)]
    (base / "meta_expressions.json").write_text(json.dumps({"videos": videos}, indent=1, sort_keys=True))
    if with_masks:
        (base / "mask_dict.json").write_text(json.dumps(mask_dict, sort_keys=True))


def _reasonvos(root: Path, meta: dict, masks: dict, out: Path, split: str, with_masks: bool) -> None:
    videos: dict[str, dict] = {}
    for video, exps in _targets(meta).items():
        if not exps:
            continue
        source, name = video.split("/", 1)[0].replace("_", "-"), _flat(video.split("/", 1)[1])
        entry = meta[video]
        height, width = entry["height"], entry["width"]
        _copy_frames(root, video, entry["frames"], out / "JPEGImages" / name, renumber=False)
        objects: dict[tuple[int, ...], int] = {}
        items = []
        for exp_id, e in exps:
            target = tuple(sorted(e["anno_id"]))
            if target not in objects:
                objects[target] = len(objects)
                folder = out / "Annotations" / f"{source}_{name}_{objects[target]}"
                folder.mkdir(parents=True, exist_ok=True)
                for t, frame in enumerate(entry["frames"]):
                    union = np.zeros((height, width), dtype=bool)
                    for anno in target:
                        union |= _decode(masks[str(anno)][t], height, width)
                    Image.fromarray(union.astype(np.uint8) * 255, mode="L").save(folder / f"{frame}.png")
            items.append({"obj_id": objects[target], "exp_id": int(exp_id), "exp_text": e["exp"],
                          "is_sent": int(e.get("type_id", 0)) == 1})
        videos[name] = {"source": source, "expressions": items}
    (out / "meta_expressions.json").write_text(json.dumps({"videos": videos}, indent=1, sort_keys=True))


def _objects_of(exps: list[tuple[str, dict]]) -> list[int]:
    """The single-object targets of a video's expressions, in first-use order (object k = index + 1)."""
    return list(dict.fromkeys(e["anno_id"][0] for _, e in exps if len(e["anno_id"]) == 1))


def _labels(entry: dict, masks: dict, objects: list[int], t: int) -> np.ndarray:
    labels = np.zeros((entry["height"], entry["width"]), dtype=np.uint8)
    for k, anno in enumerate(objects, start=1):
        labels[_decode(masks[str(anno)][t], entry["height"], entry["width"])] = k
    return labels


def _write_palette_masks(entry: dict, masks: dict, objects: list[int], frames: list[str], folder: Path) -> None:
    """One palette PNG per frame (object k = label k), named as the copied frame: the Ref-YouTube-VOS and
    Ref-DAVIS annotation layout."""
    folder.mkdir(parents=True, exist_ok=True)
    for t, frame in enumerate(frames):
        _save_palette(_labels(entry, masks, objects, t), folder / f"{frame}.png")


def _write_youtube_vos_meta(out: Path, split: str, videos: dict, objects_meta: dict) -> None:
    """`meta_expressions/<split>/meta_expressions.json` and `<split>/meta.json`, as Ref-YouTube-VOS lays them out
    (Ref-DAVIS is distributed in the same layout)."""
    (out / "meta_expressions" / split).mkdir(parents=True, exist_ok=True)
    (out / split).mkdir(parents=True, exist_ok=True)
    (out / "meta_expressions" / split / "meta_expressions.json").write_text(
        json.dumps({"videos": videos}, indent=1, sort_keys=True))
    (out / split / "meta.json").write_text(json.dumps({"videos": objects_meta}, indent=1, sort_keys=True))


def _refytvos(root: Path, meta: dict, masks: dict, out: Path, split: str, with_masks: bool) -> None:
    videos: dict[str, dict] = {}
    objects_meta: dict[str, dict] = {}
    for video, exps in _targets(meta).items():
        objects = _objects_of(exps)
        if not objects:
            continue
        name, entry = _flat(video), meta[video]
        frames = _copy_frames(root, video, entry["frames"], out / split / "JPEGImages" / name, renumber=False)
        videos[name] = {"expressions": {k: {"exp": e["exp"], "obj_id": str(objects.index(e["anno_id"][0]) + 1)}
                                        for k, e in exps if len(e["anno_id"]) == 1}, "frames": frames}
        objects_meta[name] = {"objects": {str(k): {"category": "object", "frames": frames}
                                          for k in range(1, len(objects) + 1)}}
        if with_masks:
            _write_palette_masks(entry, masks, objects, frames, out / split / "Annotations" / name)
    _write_youtube_vos_meta(out, split, videos, objects_meta)


def _refdavis(root: Path, meta: dict, masks: dict, out: Path, split: str, with_masks: bool) -> None:
    videos: dict[str, dict] = {}
    objects_meta: dict[str, dict] = {}
    for video, exps in _targets(meta).items():
        objects = _objects_of(exps)
        if not objects:
            continue
        name, entry = _flat(video), meta[video]
        frames = _copy_frames(root, video, entry["frames"], out / split / "JPEGImages" / name, renumber=True)
        expressions: dict[str, dict] = {}
        for k, anno in enumerate(objects, start=1):
            texts = [e["exp"] for _, e in exps if e["anno_id"] == [anno]]
            for annotator in range(4):  # annot1 first-frame, annot1 full, annot2 first-frame, annot2 full
                expressions[str(4 * (k - 1) + annotator)] = {"exp": texts[annotator % len(texts)], "obj_id": str(k)}
        videos[name] = {"expressions": expressions, "frames": frames}
        objects_meta[name] = {"objects": {str(k): {"category": "object"} for k in range(1, len(objects) + 1)}}
        if with_masks:
            _write_palette_masks(entry, masks, objects, frames, out / split / "Annotations" / name)
    _write_youtube_vos_meta(out, split, videos, objects_meta)
