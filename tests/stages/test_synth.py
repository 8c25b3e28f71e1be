"""The synthetic dataset: exact ReVOS layout, determinism, and expressions true of their videos.

The truth checks read only the written files (decoded masks, JPEG pixels, expression texts), never the
generator's bookkeeping, so they test what a consumer of the dataset would see.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from pycocotools import mask as mask_utils
from scipy import ndimage

from stages.core.runner import RunnerParams
from stages.params.synth import SynthParams, SynthScale
from stages.synth import generate_synthetic
from stages.synth.render import full_shape_area, shape_inside
from stages.synth.scene import COLOURS, KINDS
from stages.synth.writer import encode_window, frame_names

SCALE = SynthScale(n_videos_train=24, n_videos_valid=8, min_frames=8, max_frames=12, height=72, width=96)
SMALL = SynthScale(n_videos_train=3, n_videos_valid=2, min_frames=6, max_frames=8, height=40, width=56)
COLOUR_RE = "|".join(COLOURS)
KIND_RE = "|".join(KINDS)
NAME = re.compile(rf"^the ({COLOUR_RE}) (?:(striped|dotted) )?({KIND_RE})$")
COUNT_WORDS = {"two": 2, "three": 3, "four": 4}


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


def test_layout(root: Path) -> None:
    meta, masks, foreground = load(root)
    assert sorted(p.name for p in root.iterdir()) == [
        "JPEGImages", "lineage.json", "mask_dict.json", "mask_dict_foreground.json",
        "meta_expressions_train_.json", "meta_expressions_valid_.json"]
    train = json.loads((root / "meta_expressions_train_.json").read_text())["videos"]
    assert len(train) == 24 and len(meta) == 32 and set(foreground) == set(meta)
    gaps = 0
    owner: dict[int, str] = {}
    for key, video in meta.items():
        assert re.fullmatch(r"SYNTH/(train|valid)/v\d{4}", key)
        assert key.split("/")[1] == ("train" if key in train else "valid")
        assert video["vid_id"] == key.rsplit("/", 1)[1]
        assert (video["height"], video["width"]) == (72, 96)
        frames = video["frames"]
        assert 8 <= len(frames) <= 12
        assert frames == sorted(frames) and len(set(frames)) == len(frames)
        assert all(re.fullmatch(r"\d{5}", f) for f in frames)
        gaps += sum(int(b) - int(a) > 1 for a, b in zip(frames, frames[1:], strict=False))
        assert sorted(p.stem for p in (root / "JPEGImages" / key).glob("*.jpg")) == frames
        with Image.open(root / "JPEGImages" / key / f"{frames[0]}.jpg") as img:
            assert img.format == "JPEG" and img.size == (video["width"], video["height"])
        assert sorted(int(i) for i in video["expressions"]) == list(range(len(video["expressions"])))
        for expression in video["expressions"].values():
            assert set(expression) == {"exp", "obj_id", "anno_id", "type_id"}
            assert isinstance(expression["exp"], str) and expression["exp"]
            assert len(expression["obj_id"]) == len(expression["anno_id"])
            assert len(set(expression["anno_id"])) == len(expression["anno_id"])
            assert expression["type_id"] in (0, 1, 2)
            for anno in expression["anno_id"]:
                assert owner.setdefault(anno, key) == key  # anno_ids are unique over the whole dataset
                rles = masks[str(anno)]
                assert len(rles) == len(frames)
                assert all(r is None or (r["size"] == [72, 96] and isinstance(r["counts"], str)) for r in rles)
        assert len(foreground[key]["masks_rle"]) == len(frames) == len(foreground[key]["foreground_ratio"])
    assert gaps > 0  # frame numbers skip, as in ReVOS
    assert any(r is None for rles in masks.values() for r in rles)  # absent objects are null


def test_every_type_and_instance_count_in_each_split(root: Path) -> None:
    for split in ("train", "valid"):
        videos = json.loads((root / f"meta_expressions_{split}_.json").read_text())["videos"]
        seen = {(e["type_id"], min(len(e["anno_id"]), 2)) for v in videos.values() for e in v["expressions"].values()}
        assert {(0, 1), (0, 2), (1, 1), (1, 2), (2, 0)} <= seen, split
    meta, _, _ = load(root)
    no_target = [e for v in meta.values() for e in v["expressions"].values() if e["type_id"] == 2]
    assert no_target and all(e["anno_id"] == [] and e["obj_id"] == [] for e in no_target)


def test_report_counts(tmp_path: Path) -> None:
    report = generate_synthetic(SynthParams(seed=0, default=SMALL), tmp_path / "r")
    meta, _, _ = load(tmp_path / "r")
    m = report.metrics
    assert m["train.videos"] == 3 and m["valid.videos"] == 2
    assert m["train.frames"] + m["valid.frames"] == sum(len(v["frames"]) for v in meta.values())
    total = sum(len(v["expressions"]) for v in meta.values())
    assert m["train.expressions"] + m["valid.expressions"] == total
    per_kind = sum(v for k, v in m.items() if k.count(".") == 2)
    assert per_kind == total == m["expressions"]
    assert m["videos"] == 5 and m["frames"] == m["train.frames"] + m["valid.frames"]
    assert sum(m.get(f"type.{t}", 0) for t in ("referring", "reasoning", "no_target")) == total
    assert sum(m.get(f"instances.{n}", 0) for n in ("single", "multi", "none")) == total
    assert m["type.no_target"] == m["instances.none"] == 5  # one per video
    assert json.loads((tmp_path / "r" / "lineage.json").read_text())["stage"] == "synth"


def test_deterministic_and_seed_sensitive(tmp_path: Path) -> None:
    first, again, threaded, other = (tmp_path / n for n in ("first", "again", "threaded", "other"))
    generate_synthetic(SynthParams(seed=3, default=SMALL), first)
    generate_synthetic(SynthParams(seed=3, default=SMALL), again)
    generate_synthetic(SynthParams(seed=3, default=SMALL), threaded, RunnerParams(kind="threads", workers=2))
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file() and p.name != "lineage.json")
    assert len(files) > 20
    for copy in (again, threaded):
        assert sorted(p.relative_to(copy) for p in copy.rglob("*") if p.is_file() and p.name != "lineage.json") == files
        for name in files:
            assert (copy / name).read_bytes() == (first / name).read_bytes(), name
    generate_synthetic(SynthParams(seed=4, default=SMALL), other)
    for name in ["mask_dict.json", "meta_expressions_train_.json"]:
        assert (other / name).read_bytes() != (first / name).read_bytes()


def test_rerun_replaces_the_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    generate_synthetic(SynthParams(seed=1, default=replace(SMALL, n_videos_train=4)), out)
    generate_synthetic(SynthParams(seed=1, default=SMALL), out)
    assert sorted(p.name for p in (out / "JPEGImages" / "SYNTH" / "train").iterdir()) == ["v0000", "v0001", "v0002"]


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


@pytest.mark.parametrize(("gap_prob", "all_consecutive", "all_gaps"), [(0.0, True, False), (1.0, False, True)])
def test_frame_names(gap_prob: float, all_consecutive: bool, all_gaps: bool) -> None:
    names = frame_names(np.random.default_rng(0), 30, gap_prob)
    steps = np.diff([int(n) for n in names])
    assert len(names) == 30 and all(re.fullmatch(r"\d{5}", n) for n in names)
    assert (steps == 1).all() == all_consecutive and (steps > 1).all() == all_gaps


@pytest.mark.parametrize(("kind", "low", "high"), [  # area / radius² of each shape, from its geometry
    ("circle", 3.0, 3.3), ("square", 2.8, 3.0), ("diamond", 1.9, 2.1), ("star", 1.25, 1.4), ("triangle", 1.7, 2.1)])
def test_shape_areas(kind: str, low: float, high: float) -> None:
    radius = 40.0
    yy, xx = np.mgrid[-45:45, -45:45].astype(np.float32) + 0.5
    inside = shape_inside(kind, radius, xx, yy)
    assert low <= inside.sum() / radius**2 <= high
    assert not inside[0].any() and not inside[:, 0].any()  # stays within its radius
    assert full_shape_area(kind, radius) == inside.sum()


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(1, 9), st.data())
def test_window_rle_equals_full_frame_encode(height: int, width: int, data: st.DataObject) -> None:
    y0 = data.draw(st.integers(0, height - 1))
    x0 = data.draw(st.integers(0, width - 1))
    y1 = data.draw(st.integers(y0 + 1, height))
    x1 = data.draw(st.integers(x0 + 1, width))
    bits = data.draw(st.lists(st.booleans(), min_size=(y1 - y0) * (x1 - x0), max_size=(y1 - y0) * (x1 - x0)))
    patch = np.array(bits, dtype=bool).reshape(y1 - y0, x1 - x0)
    full = np.zeros((height, width), dtype=np.uint8)
    full[y0:y1, x0:x1] = patch
    got = encode_window(patch, (y0, y1, x0, x1), height, width)
    if not patch.any():
        assert got is None
    else:
        want = mask_utils.encode(np.asfortranarray(full))
        assert got == {"size": [height, width], "counts": want["counts"].decode("ascii")}


# -- expressions are true of the written masks and frames ------------------------------------------------


class Video:
    """Decoded view of one video: masks per anno_id, visible centroids and areas, names from the texts."""

    def __init__(self, root: Path, key: str, video: dict, masks: dict) -> None:
        self.root, self.key, self.video = root, key, video
        self.h, self.w, self.T = video["height"], video["width"], len(video["frames"])
        exprs = video["expressions"].values()
        self.annos = sorted({a for e in exprs for a in e["anno_id"]})
        self.masks = {a: np.stack([decode(r, self.h, self.w) for r in masks[str(a)]]) for a in self.annos}
        self.area = {a: m.sum(axis=(1, 2)) for a, m in self.masks.items()}
        self.names: dict[int, tuple[str, str, str]] = {}  # anno → (colour, texture, kind)
        for e in exprs:
            match = NAME.match(e["exp"])
            if match and e["type_id"] == 0 and len(e["anno_id"]) == 1:
                self.names[e["anno_id"][0]] = (match[1], match[2] or "plain", match[3])

    def centroid(self, anno: int, t: int) -> np.ndarray:
        ys, xs = np.nonzero(self.masks[anno][t])
        return np.array([xs.mean(), ys.mean()]) if xs.size else np.array([np.nan, np.nan])

    def visible(self, anno: int) -> np.ndarray:
        return np.flatnonzero(self.area[anno] > 0)

    def steps(self, anno: int) -> np.ndarray:
        c = np.stack([self.centroid(anno, t) for t in range(self.T)])
        s = np.linalg.norm(np.diff(c, axis=0), axis=1)
        return s[np.isfinite(s)]

    def frame(self, t: int) -> np.ndarray:
        path = self.root / "JPEGImages" / self.key / f"{self.video['frames'][t]}.jpg"
        with Image.open(path) as img:
            return np.asarray(img.convert("RGB"), dtype=np.float32)


def colour_of(v: Video, anno: int) -> str:
    """Majority vote of the named colours (plain or texture-darkened) over the object's inner pixels."""
    t = int(np.argmax(v.area[anno]))
    inner = ndimage.binary_erosion(v.masks[anno][t], iterations=1)
    pixels = v.frame(t)[inner if inner.sum() >= 4 else v.masks[anno][t]]
    names = list(COLOURS)
    palette = np.array([COLOURS[n] for n in names] + [[0.45 * c for c in COLOURS[n]] for n in names])
    nearest = np.argmin(((pixels[:, None, :] - palette[None]) ** 2).sum(-1), axis=1) % len(names)
    return names[Counter(nearest.tolist()).most_common(1)[0][0]]


def check(v: Video, e: dict) -> str:  # noqa: C901 - one branch per expression family reads best as a table
    """Assert the expression against the decoded data; return the family name that was checked."""
    text, ids = e["exp"], e["anno_id"]
    others = [a for a in v.annos if a not in ids]
    first, last = 0, v.T - 1
    if e["type_id"] == 2:
        assert ids == [] and e["obj_id"] == []
        match = NAME.match(text)
        if match:  # no object of the video has that colour and kind
            assert all((c, k) != (match[1], match[3]) for c, _, k in v.names.values()), text
        return "no_target"
    for a in ids:
        assert v.visible(a).size, text  # every target can be seen at some point
    if count := re.match(r"^the (two|three|four) ", text):
        assert len(ids) == COUNT_WORDS[count[1]], text
    if match := NAME.match(text):
        assert v.names[ids[0]][0] == colour_of(v, ids[0]) == match[1], text
        return "appearance"
    if match := re.match(rf"^all the ({KIND_RE})s in the video$", text):
        assert sorted(ids) == sorted(a for a, n in v.names.items() if n[2] == match[1]) and len(ids) >= 2, text
        return "group"
    if match := re.match(rf"^all the ({COLOUR_RE}|striped|dotted) shapes$", text):
        field = 1 if match[1] in ("striped", "dotted") else 0
        assert sorted(ids) == sorted(a for a, n in v.names.items() if n[field] == match[1]) and len(ids) >= 2, text
        return "group"
    if match := re.match(r"^the object (furthest to the left|furthest to the right|closest to the top|closest to the "
                         r"bottom) in the (first|last) frame$", text):
        axis = 0 if "left" in match[1] or "right" in match[1] else 1
        sign = 1 if ("left" in match[1] or "top" in match[1]) else -1
        t = first if match[2] == "first" else last
        mine = sign * v.centroid(ids[0], t)[axis]
        assert all(mine < sign * v.centroid(a, t)[axis] for a in others if v.area[a][t]), text
        return "position"
    if match := re.match(rf"^the ({KIND_RE}) on the (left|right) at the (start|end)$", text):
        t = first if match[3] == "start" else last
        sign = 1 if match[2] == "left" else -1
        same = [a for a in others if v.names.get(a, ("", "", ""))[2] == match[1] and v.area[a][t]]
        assert v.names[ids[0]][2] == match[1] and same, text
        assert all(sign * v.centroid(ids[0], t)[0] < sign * v.centroid(a, t)[0] for a in same), text
        return "position"
    if match := re.match(r"^which object moves the (fastest|slowest) across the video\?$", text):
        sign = 1 if match[1] == "fastest" else -1
        mine = sign * v.steps(ids[0]).mean()
        assert all(mine > sign * v.steps(a).mean() for a in others if v.steps(a).size), text
        return "speed"
    if text.endswith(("leaves the scene", "leave the scene")):
        assert all(v.area[a][first] > 0 or v.visible(a)[0] < last for a in ids), text
        assert all(v.area[a][last] == 0 for a in ids) and all(v.area[a][last] > 0 for a in others), text
        return "leaves"
    if "come into view partway through" in text or "comes into view partway through" in text:
        assert all(v.area[a][first] == 0 for a in ids) and all(v.area[a][first] > 0 for a in others), text
        return "enters"
    if text == "the object that shows up last in the video":
        mine = v.visible(ids[0])[0]
        assert mine > 0 and all(v.visible(a)[0] < mine for a in others if v.visible(a).size), text
        return "enters_last"
    if match := re.match(r"^the (?:\w+ )?objects? that ends? up further (right|left) than (?:it|they) started$", text):
        sign = 1 if match[1] == "right" else -1
        for a in ids:
            seen = v.visible(a)
            assert sign * (v.centroid(a, seen[-1])[0] - v.centroid(a, seen[0])[0]) > 0, text
        return "direction"
    if text.endswith(("stops moving", "stop moving")):
        for a in ids:
            m = v.masks[a]
            assert m[-1].any() and np.array_equal(m[-1], m[-2]) and np.array_equal(m[-2], m[-3]), text
            assert (v.steps(a) > 1.0).any(), text  # it did move before
        return "stops"
    if text.endswith(("suddenly speeds up?", "suddenly speed up")):
        for a in ids:
            s = v.steps(a)
            assert any(np.median(s[k:]) >= 1.5 * np.median(s[:k]) for k in range(1, len(s))), text
        return "speeds_up"
    if match := re.match(r"^the shape (partly|completely) hidden behind the (.+) at the end$", text):
        front = [a for a, n in v.names.items() if match[2] == " ".join(p for p in n if p != "plain")]
        assert len(front) == 1 and v.area[front[0]][last] > 0, text
        mine = v.area[ids[0]]
        if match[1] == "completely":
            assert mine[last] == 0, text
        else:
            assert 0 < mine[last] < mine.max(), text
            touching = ndimage.binary_dilation(v.masks[ids[0]][last], iterations=2) & v.masks[front[0]][last]
            assert touching.any(), text
        return "hidden"
    if match := re.match(r"^the shape that passes in front of the (.+)$", text):
        back = [a for a, n in v.names.items() if match[1] == " ".join(p for p in n if p != "plain")]
        assert len(back) == 1 and back[0] not in ids, text
        # at some frame it is next to the back object (or covers it whole) while the back one looks smaller
        near = [t for t in range(v.T) if v.area[ids[0]][t] and (not v.area[back[0]][t] or (
            ndimage.binary_dilation(v.masks[ids[0]][t], iterations=2) & v.masks[back[0]][t]).any())]
        assert any(v.area[back[0]][t] < v.area[back[0]].max() for t in near), text
        return "passes_in_front"
    if text.endswith(("keeps moving until the end", "keep moving until the end")):
        for a in ids:
            assert v.area[a][-1] and v.area[a][-2], text
            assert np.linalg.norm(v.centroid(a, v.T - 1) - v.centroid(a, v.T - 2)) > 1.0, text
        for a in others:  # the others stand still at the end
            assert not v.area[a][-1] or np.array_equal(v.masks[a][-1], v.masks[a][-2]), text
        return "keeps_moving"
    if text == "which shape overtakes another one moving the same way?":
        def flips(b: int) -> bool:
            both = [t for t in range(v.T) if v.area[ids[0]][t] and v.area[b][t]]
            signs = {np.sign(v.centroid(ids[0], t)[0] - v.centroid(b, t)[0]) for t in both}
            return {-1.0, 1.0} <= signs
        assert any(flips(b) for b in others), text
        return "overtakes"
    if match := re.match(r"^the (largest|smallest) shape in the video$", text):
        sign = 1 if match[1] == "largest" else -1
        assert all(sign * v.area[ids[0]].max() > sign * v.area[a].max() for a in others), text
        return "size"
    if match := re.match(rf"^the ({KIND_RE})$", text):
        assert [a for a, n in v.names.items() if n[2] == match[1]] == ids, text
        return "unique_attribute"
    if match := re.match(rf"^the ({COLOUR_RE}) shape$", text):
        assert [a for a, n in v.names.items() if n[0] == match[1]] == ids, text
        return "unique_attribute"
    raise AssertionError(f"{v.key}: no check for expression {text!r}")


def test_expressions_are_true_of_the_masks(root: Path) -> None:
    meta, masks, _ = load(root)
    families: Counter[str] = Counter()
    for key, video in meta.items():
        v = Video(root, key, video, masks)
        texts = [e["exp"] for e in video["expressions"].values()]
        assert len(texts) == len(set(texts)), key
        for expression in video["expressions"].values():
            families[check(v, expression)] += 1
    expected = {"appearance", "group", "position", "speed", "leaves", "enters", "enters_last", "direction",
                "stops", "hidden", "overtakes", "size", "unique_attribute", "no_target", "passes_in_front",
                "keeps_moving", "speeds_up"}
    assert expected <= set(families), families


def test_large_preset_is_larger() -> None:
    params = replace(SynthParams(), size="large")
    assert params.scale.height == 720 and params.scale.width == 1280
    assert params.scale.n_videos_train + params.scale.n_videos_valid >= 300


def test_the_scene_object_bound_fits_the_simulators_distinct_objects() -> None:
    """params refuse more objects per scene than SceneObjects allows; the simulator can draw that many distinct
    (colour, kind) objects, so every accepted value renders."""
    import typing

    import numpy as np

    from stages.core.params import SceneObjects
    from stages.params.synth import SynthScale
    from stages.synth.scene import COLOURS, KINDS, simulate_video

    bound = next(m.le for m in typing.get_args(SceneObjects)[1:] if hasattr(m, "le"))
    assert bound <= len(COLOURS) * len(KINDS)
    video = simulate_video(np.random.default_rng(0), SynthScale(min_objects=bound, max_objects=bound))
    assert len(video.objects) == bound



def test_hostile_geometry_cases_are_what_their_names_say(tmp_path: Path) -> None:
    """synth.size=hostile: each case's masks have the geometry its expression names, byte-identical per seed, and
    strict ingest accepts the whole dataset (a case is hostile geometry, not bad data)."""
    from stages.ingest import ingest
    from stages.params.ingest import IngestParams

    params = SynthParams(size="hostile", source="H")
    report = generate_synthetic(params, tmp_path / "a")
    generate_synthetic(params, tmp_path / "b")
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files
               if f.name != "lineage.json")
    meta = json.loads((tmp_path / "a/meta_expressions_valid_.json").read_text())["videos"]
    masks = json.loads((tmp_path / "a/mask_dict.json").read_text())
    by_case = {e["exp"].split(":")[0]: (v, e) for v in meta.values() for e in v["expressions"].values()}

    def track(case: str, k: int = 0) -> list[np.ndarray | None]:
        video, expression = by_case[case]
        return [None if r is None else mask_utils.decode({"size": r["size"], "counts": r["counts"].encode()})
                for r in masks[str(expression["anno_id"][k])]]

    def columns_rows(case: str) -> set[tuple[tuple[int, ...], tuple[int, ...]]]:
        return {(tuple(np.flatnonzero(m.any(0))), tuple(np.flatnonzero(m.any(1)))) for m in track(case)}

    width, height = by_case["sliver-left"][0]["width"], by_case["sliver-left"][0]["height"]
    assert (width, height) == (641, 47)
    assert {c for c, _ in columns_rows("sliver-left")} == {(0,)}
    assert {c for c, _ in columns_rows("sliver-right")} == {(width - 1,)}
    assert {r for _, r in columns_rows("sliver-top")} == {(0,)}
    assert {r for _, r in columns_rows("sliver-bottom")} == {(height - 1,)}
    assert all(m.sum() == 1 for m in track("one-pixel")) and all(m[-1, -1] == 1 for m in track("one-pixel-corner"))
    present = [m is not None for m in track("leave-reenter")]
    assert present[0] and not all(present) and present[-1]  # leaves, then comes back
    assert all(m is None for m in track("absent-everywhere"))
    assert [m is not None for m in track("absent-in-sampled-frames")] == [t == 2 for t in range(12)]
    left, right = track("touching-both", 0)[0], track("touching-both", 1)[0]
    assert not (left & right).any() and np.flatnonzero(left.any(0))[-1] + 1 == np.flatnonzero(right.any(0))[0]
    assert (track("overlapping-both", 0)[0] & track("overlapping-both", 1)[0]).any()
    assert by_case["tiny-frame"][0]["width"] * by_case["tiny-frame"][0]["height"] == 77
    assert report.metrics["videos"] == 14 and report.metrics["type.no_target"] == 2
    index = ingest(IngestParams(strict=True), tmp_path / "a", tmp_path / "index", RunnerParams(kind="serial"))
    assert index.metrics["quarantined"] == 0 and index.metrics["expressions"] == report.metrics["expressions"]
