"""The synthetic dataset: exact ReVOS layout, determinism, and expressions true of their videos."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from pycocotools import mask as mask_utils

from stages.core.params import SynthParams, SynthScale
from stages.synth import generate_synthetic

SCALE = SynthScale(n_videos_train=6, n_videos_valid=3, min_frames=8, max_frames=12, height=72, width=96)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("synth") / "root"
    generate_synthetic(SynthParams(seed=3, default=SCALE), out)
    return out


def load(root: Path) -> tuple[dict, dict, dict]:
    meta = {}
    for split in ("train", "valid"):
        meta.update(json.loads((root / f"meta_expressions_{split}_.json").read_text())["videos"])
    masks = json.loads((root / "mask_dict.json").read_text())
    foreground = json.loads((root / "mask_dict_foreground.json").read_text())
    return meta, masks, foreground


def decode(rle: dict | None, h: int, w: int) -> np.ndarray:
    if rle is None:
        return np.zeros((h, w), dtype=bool)
    return mask_utils.decode({"size": rle["size"], "counts": rle["counts"].encode()}).astype(bool)


def target_masks(video: dict, expression: dict, masks: dict) -> list[np.ndarray]:
    h, w = video["height"], video["width"]
    per_obj = [[decode(r, h, w) for r in masks[str(a)]] for a in expression["anno_id"]]
    return [np.any([obj[t] for obj in per_obj], axis=0) for t in range(len(video["frames"]))]


def test_layout(root: Path) -> None:
    meta, masks, foreground = load(root)
    assert sorted(p.name for p in root.iterdir()) == [
        "JPEGImages", "lineage.json", "mask_dict.json", "mask_dict_foreground.json",
        "meta_expressions_train_.json", "meta_expressions_valid_.json"]
    train = json.loads((root / "meta_expressions_train_.json").read_text())["videos"]
    assert len(train) == 6 and len(meta) == 9
    gaps = 0
    for key, video in meta.items():
        assert re.fullmatch(r"SYNTH/(train|valid)/v\d{4}", key)
        assert key.split("/")[1] == ("train" if key in train else "valid")
        frames = video["frames"]
        assert frames == sorted(frames) and len(set(frames)) == len(frames)
        assert all(re.fullmatch(r"\d{5}", f) for f in frames)
        gaps += sum(int(b) - int(a) > 1 for a, b in zip(frames, frames[1:], strict=False))
        assert sorted(p.stem for p in (root / "JPEGImages" / key).glob("*.jpg")) == frames
        with Image.open(root / "JPEGImages" / key / f"{frames[0]}.jpg") as img:
            assert img.size == (video["width"], video["height"])
        for expression in video["expressions"].values():
            assert len(expression["obj_id"]) == len(expression["anno_id"])
            assert expression["type_id"] in (0, 1, 2)
            for anno in expression["anno_id"]:
                rles = masks[str(anno)]
                assert len(rles) == len(frames)
                assert all(r is None or r["size"] == [video["height"], video["width"]] for r in rles)
        assert len(foreground[key]["masks_rle"]) == len(frames) == len(foreground[key]["foreground_ratio"])
    assert gaps > 0  # frame numbers skip, as in ReVOS


def test_every_type_and_instance_count_present(root: Path) -> None:
    meta, _, _ = load(root)
    seen = {(e["type_id"], min(len(e["anno_id"]), 2)) for v in meta.values() for e in v["expressions"].values()}
    assert {(0, 1), (1, 1), (2, 0)} <= seen
    assert (0, 2) in seen or (1, 2) in seen
    no_target = [e for v in meta.values() for e in v["expressions"].values() if e["type_id"] == 2]
    assert no_target and all(e["anno_id"] == [] and e["obj_id"] == [] for e in no_target)


def test_deterministic_and_seed_sensitive(tmp_path: Path, root: Path) -> None:
    again = tmp_path / "again"
    generate_synthetic(SynthParams(seed=3, default=SCALE), again)
    for name in ["mask_dict.json", "meta_expressions_train_.json", "mask_dict_foreground.json"]:
        assert (again / name).read_bytes() == (root / name).read_bytes()
    first = sorted((root / "JPEGImages").rglob("*.jpg"))[0]
    assert (again / first.relative_to(root)).read_bytes() == first.read_bytes()
    other = tmp_path / "other"
    generate_synthetic(SynthParams(seed=4, default=SCALE), other)
    assert (other / "mask_dict.json").read_bytes() != (root / "mask_dict.json").read_bytes()


def test_foreground_is_union_of_expression_masks(root: Path) -> None:
    meta, masks, foreground = load(root)
    for key, video in meta.items():
        used = sorted({a for e in video["expressions"].values() for a in e["anno_id"]})
        for t in range(len(video["frames"])):
            union = np.zeros((video["height"], video["width"]), dtype=bool)
            for anno in used:
                union |= decode(masks[str(anno)][t], video["height"], video["width"])
            fg = decode(foreground[key]["masks_rle"][t], video["height"], video["width"])
            assert np.array_equal(fg, union)
            assert foreground[key]["foreground_ratio"][t] == pytest.approx(union.mean(), abs=1e-5)


def centroid_x(mask: np.ndarray) -> float:
    return float(np.nonzero(mask)[1].mean())


def test_expressions_are_true_of_the_masks(root: Path) -> None:
    """Check the statements against decoded masks, independently of the generator's bookkeeping."""
    meta, masks, _ = load(root)
    checked = 0
    for video in meta.values():
        h, w = video["height"], video["width"]
        all_annos = sorted({a for e in video["expressions"].values() for a in e["anno_id"]})
        for expression in video["expressions"].values():
            text, annos = expression["exp"], expression["anno_id"]
            if expression["type_id"] == 2:
                continue
            tracks = target_masks(video, expression, masks)
            assert any(m.any() for m in tracks), text  # every target is visible at some point
            if text == "the object furthest to the left in the first frame":
                others = [decode(masks[str(a)][0], h, w) for a in all_annos if a not in annos]
                mine = centroid_x(tracks[0])
                assert all(mine < centroid_x(m) for m in others if m.any()), text
                checked += 1
            elif text.startswith("the object that leaves the scene"):
                assert not tracks[-1].any() and tracks[0].any(), text
                checked += 1
            elif text == "the object that shows up last in the video":
                first = next(i for i, m in enumerate(tracks) if m.any())
                assert first > 0
                checked += 1
            elif text.endswith("further right than it started"):
                visible = [i for i, m in enumerate(tracks) if m.any()]
                assert centroid_x(tracks[visible[-1]]) > centroid_x(tracks[visible[0]]), text
                checked += 1
    assert checked >= 3


def test_large_preset_is_larger() -> None:
    params = replace(SynthParams(), size="large")
    assert params.scale.height == 720 and params.scale.n_videos_train >= 100
