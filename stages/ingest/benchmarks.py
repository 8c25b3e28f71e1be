"""Readers for the published layouts of the other video benchmarks (docs/benchmarks.md).

Each reader turns one split of a benchmark, as published, into a `Benchmark`: videos keyed by the folder
name its predictions go to, expressions, and a ground-truth track per expression (a mask per frame, or None
where the frame has no annotation). `to_revos` writes that as a ReVOS-layout root (frames copied, masks as
COCO RLE), so the `ingest` stage builds the same index tables with the same checks and quarantine
(`ingest_benchmark`), and the evaluate stage runs inference on any benchmark unchanged.

Layouts (split names as published):

| benchmark | splits | video key (= prediction folder) | ground truth |
|---|---|---|---|
| revos | valid, train | `<SOURCE>/<split>/<id>` | `mask_dict.json` RLE |
| mevis | valid_u, train (masks); valid (server) | `<video>` | `<split>/mask_dict.json` RLE, union of anno_ids |
| reasonvos | valid (the only set) | `<source>_<video>_<obj_id>` | 0/255 PNGs in `Annotations/<video key>/` |
| refytvos | train (masks); valid (server) | `<video>` | palette PNGs `<split>/Annotations/<video>/`, pixel = obj_id |
| refdavis | valid, train | `<video>` | palette PNGs `<split>/Annotations/<video>/`, 4 expressions per object |

Bad input: a missing or malformed file raises `BenchmarkFormatError` (a `RevosFormatError`) naming it; a bad
item (an expression naming an unknown object, a missing annotation folder, an unreadable PNG) goes to the
`Problems` sink of the ingest checks — raised as `IngestError` in strict mode, a quarantine row otherwise.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pandas as pd
from PIL import Image, UnidentifiedImageError
from pycocotools import mask as mask_utils

from schemas.index import QuarantineSchema
from stages.core import revos
from stages.core.io import write_json, write_table
from stages.core.report import StageReport
from stages.core.runner import RunnerParams
from stages.ingest.checks import Problems
from stages.params.ingest import IngestParams

BENCHMARKS = ("revos", "mevis", "reasonvos", "refytvos", "refdavis")
SPLITS = {"revos": ("valid", "train"), "mevis": ("valid_u", "valid", "train"), "reasonvos": ("valid",),
          "refytvos": ("valid", "train"), "refdavis": ("valid", "train")}
SERVER_SPLITS = {("mevis", "valid"), ("refytvos", "valid")}  # no public masks: scored by the benchmark's server
DEFAULT_SPLIT = {"revos": "valid", "mevis": "valid_u", "reasonvos": "valid", "refytvos": "valid", "refdavis": "valid"}
VOID = 255  # DAVIS palette index of void pixels


class BenchmarkFormatError(revos.RevosFormatError):
    """A benchmark file is missing or malformed; the message names the file."""


@dataclass
class Expression:
    """One expression: text, type (0 referring, 1 reasoning), the target as the layout names it."""

    exp_id: str
    text: str
    type_id: int
    obj_ids: list[int]
    target: Any  # mevis/revos: anno_ids; reasonvos: annotation folder; refytvos/refdavis: palette label


@dataclass
class Video:
    """One video under its prediction-folder key; `frame_dir` holds `<frame>.jpg`."""

    key: str
    frames: list[str]
    frame_dir: Path
    expressions: dict[str, Expression] = field(default_factory=dict)


@dataclass
class Benchmark:
    """One split of a benchmark as published, and how to read its ground truth."""

    name: str
    root: Path
    split: str
    videos: dict[str, Video]
    has_masks: bool
    masks: Mapping = field(default_factory=dict)  # mevis/revos: anno_id → RLE | None per frame (SpilledMasks)

    def track(self, video: str, exp_id: str) -> list[np.ndarray | None]:
        """The expression's ground truth per frame of the video: bool mask, or None where not annotated."""
        v = self.videos[video]
        e = v.expressions[exp_id]
        if not self.has_masks:
            return [None] * len(v.frames)
        if self.name in ("revos", "mevis"):
            return _rle_track(self.masks, e.target, len(v.frames))
        if self.name == "reasonvos":
            folder = self.root / "Annotations" / e.target
            # read as the official ReasonVOS script reads it: OpenCV grayscale, non-zero = target
            return [_read_gray(folder / f"{f}.png") > 0 if (folder / f"{f}.png").is_file() else None for f in v.frames]
        folder = _palette_dir(self.root, self.name, self.split) / video
        out: list[np.ndarray | None] = []
        for f in v.frames:
            path = folder / f"{f}.png"
            out.append(_read_png(path) == int(e.target) if path.is_file() else None)
        return out


def _read_png(path: Path) -> np.ndarray:
    try:
        with Image.open(path) as img:
            return np.asarray(img)
    except (OSError, UnidentifiedImageError) as err:
        raise BenchmarkFormatError(f"{path}: unreadable PNG: {err}") from err


def _read_gray(path: Path) -> np.ndarray:
    gray = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    if gray is None:
        raise BenchmarkFormatError(f"{path}: unreadable PNG")
    return gray


def _load_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise BenchmarkFormatError(f"{path}: file missing") from err
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise BenchmarkFormatError(f"{path}: malformed JSON: {err}") from err


class SpilledMasks(Mapping):
    """anno_id (str) → its per-frame RLE list, read from a large `mask_dict.json` in one streamed pass (ijson)
    into an unnamed temporary file: memory holds one entry at a time plus an offset per anno_id, never the
    file (MeViS train's is several GB). Only the anno_ids in `wanted` are kept; a repeated key keeps its last
    value, as `json.load` would.

    Raises:
        BenchmarkFormatError: the file is missing or malformed (named).
    """

    def __init__(self, path: Path, wanted: set[str]) -> None:
        self._file = tempfile.TemporaryFile()  # removed when closed or collected
        self._where: dict[str, tuple[int, int]] = {}
        try:
            for key, value in revos.iter_json_object(path):
                if key in wanted:
                    data = json.dumps(value, separators=(",", ":")).encode()
                    self._where[key] = (self._file.tell(), len(data))
                    self._file.write(data)
        except revos.RevosFormatError as err:
            self._file.close()
            raise BenchmarkFormatError(str(err)) from err

    def __getitem__(self, key: str) -> list:
        offset, size = self._where[key]
        self._file.seek(offset)
        return json.loads(self._file.read(size))

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, key: object) -> bool:
        return key in self._where


def _named_annos(meta: dict) -> set[str]:
    """Every anno_id an expression of the meta file names (as mask_dict keys)."""
    out = set()
    for entry in meta.values():
        for e in (entry.get("expressions") or {}).values() if isinstance(entry, dict) else ():
            if isinstance(e, dict) and isinstance(e.get("anno_id"), list):
                out.update(str(a) for a in e["anno_id"])
    return out


class _JsonObjectWriter:
    """A JSON object written to `path` one entry at a time (compact, in the order given): a large mask_dict
    never held whole in memory."""

    def __init__(self, path: Path) -> None:
        self._handle = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self._handle.write("{")
        self._first = True

    def add(self, key: str, value: Any) -> None:
        self._handle.write(("" if self._first else ",") + json.dumps(str(key)) + ":"
                           + json.dumps(value, sort_keys=True, separators=(",", ":")))
        self._first = False

    def close(self) -> None:
        self._handle.write("}")
        self._handle.close()


def _videos_of(path: Path) -> dict:
    data = _load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("videos"), dict):
        raise BenchmarkFormatError(f"{path}: expected an object with a 'videos' mapping")
    return data["videos"]


def _rle_track(masks: Mapping, annos: list[int], n: int) -> list[np.ndarray | None]:
    tracks = {a: masks[str(a)] for a in annos}  # each anno_id read once (a SpilledMasks read parses it)
    out = []
    for t in range(n):
        union = None
        for a in annos:
            rle = tracks[a][t]
            if rle:
                m = mask_utils.decode({"size": rle["size"], "counts": rle["counts"].encode("ascii")
                                       if isinstance(rle["counts"], str) else rle["counts"]}).astype(bool)
                union = m if union is None else union | m
        out.append(union)
    # an anno_id absent from a frame is an empty mask there (ReVOS / MeViS annotate every frame)
    shape = next((m.shape for m in out if m is not None), None)
    return [m if m is not None else (np.zeros(shape, dtype=bool) if shape else None) for m in out]


def _palette_dir(root: Path, name: str, split: str) -> Path:
    return root / split / "Annotations"


def meta_file(name: str, root: Path, split: str) -> Path:
    """The expressions file of a benchmark split."""
    root = Path(root)
    return {"revos": revos.meta_path(root, split), "mevis": root / split / "meta_expressions.json",
            "reasonvos": root / "meta_expressions.json",
            "refytvos": root / "meta_expressions" / split / "meta_expressions.json",
            "refdavis": root / "meta_expressions" / split / "meta_expressions.json"}[name]


def read_benchmark(name: str, root: Path, split: str = "", problems: Problems | None = None) -> Benchmark:
    """Read one split of benchmark `name` at `root` (split "" = the benchmark's evaluation split).

    Raises:
        BenchmarkFormatError: unknown benchmark/split, a missing or malformed file.
        IngestError: the first bad item, when `problems` is strict (the default).
    """
    if name not in BENCHMARKS:
        raise BenchmarkFormatError(f"unknown benchmark {name!r} (expected one of {', '.join(BENCHMARKS)})")
    split = split or DEFAULT_SPLIT[name]
    if split not in SPLITS[name]:
        raise BenchmarkFormatError(f"{name}: unknown split {split!r} (expected one of {', '.join(SPLITS[name])})")
    root = Path(root)
    problems = problems or Problems(strict=True, root=root)
    if not root.is_dir():
        raise BenchmarkFormatError(f"{root}: benchmark root is not a folder")
    reader = {"revos": _read_revos, "mevis": _read_mevis, "reasonvos": _read_reasonvos,
              "refytvos": _read_palette, "refdavis": _read_palette}[name]
    return reader(name, root, split, problems)


def _frames_of(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.jpg"))


def _check_type(value: Any, where: str, path: Path) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value not in (0, 1, 2):
        raise BenchmarkFormatError(f"{path}: expression {where}: type_id {value!r} outside 0–2")
    return value


def _read_revos(name: str, root: Path, split: str, problems: Problems) -> Benchmark:
    path = revos.meta_path(root, split)
    meta, _ = revos.load_meta(path)
    masks = SpilledMasks(root / revos.MASK_DICT, _named_annos(meta))
    videos = {}
    for key, entry in sorted(meta.items()):
        v = Video(key, list(entry["frames"]), root / "JPEGImages" / key)
        for exp_id, e in entry["expressions"].items():
            type_id = _check_type(e.get("type_id", 0), f"{key}#{exp_id}", path)
            v.expressions[exp_id] = Expression(exp_id, e["exp"], type_id, list(e["obj_id"]), list(e["anno_id"]))
        videos[key] = v
    return Benchmark(name, root, split, videos, True, masks)


def _read_mevis(name: str, root: Path, split: str, problems: Problems) -> Benchmark:
    path = meta_file(name, root, split)
    meta = _videos_of(path)
    has_masks = (name, split) not in SERVER_SPLITS
    masks = SpilledMasks(root / split / "mask_dict.json", _named_annos(meta)) if has_masks else {}
    videos = {}
    for key, entry in sorted(meta.items()):
        frames = entry.get("frames")
        if not isinstance(frames, list) or not frames:
            problems.add("video", key, path, "no frame list")
            continue
        v = Video(key, [str(f) for f in frames], root / split / "JPEGImages" / key)
        for exp_id, e in entry.get("expressions", {}).items():
            annos = e.get("anno_id", []) if isinstance(e, dict) else None
            if not isinstance(e, dict) or not isinstance(e.get("exp"), str) or not isinstance(annos, list):
                problems.add("expression", f"{key}#{exp_id}", path, "expected {exp, obj_id, anno_id}")
                continue
            missing = [a for a in annos if has_masks and str(a) not in masks]
            bad_len = [a for a in annos if has_masks and str(a) in masks and len(masks[str(a)]) != len(frames)]
            if missing or bad_len:
                why = "missing from mask_dict.json" if missing else "has a mask count unlike the frame count"
                problems.add("expression", f"{key}#{exp_id}", path, f"anno_id {(missing or bad_len)[0]} {why}")
                continue
            v.expressions[str(exp_id)] = Expression(str(exp_id), e["exp"], 0, list(e.get("obj_id", [])), list(annos))
        videos[key] = v
    return Benchmark(name, root, split, videos, has_masks, masks)


def _read_reasonvos(name: str, root: Path, split: str, problems: Problems) -> Benchmark:
    path = meta_file(name, root, split)
    meta = _videos_of(path)
    videos: dict[str, Video] = {}
    for video, entry in sorted(meta.items()):
        if not isinstance(entry, dict) or not isinstance(entry.get("expressions"), list) or "source" not in entry:
            problems.add("video", video, path, "expected {source, expressions: [...]}")
            continue
        frame_dir = root / "JPEGImages" / video
        frames = _frames_of(frame_dir)
        if not frames:
            problems.add("video", video, path, f"no frames in {frame_dir.relative_to(root)}")
            continue
        for item in entry["expressions"]:
            if not isinstance(item, dict) or not {"obj_id", "exp_id", "exp_text"} <= set(item):
                problems.add("expression", f"{video}#{item}", path, "expected {obj_id, exp_id, exp_text, is_sent}")
                continue
            key = f"{entry['source']}_{video}_{item['obj_id']}"
            folder = root / "Annotations" / key
            if not folder.is_dir():
                problems.add("expression", f"{key}#{item['exp_id']}", path,
                             f"annotation folder {folder.relative_to(root)} missing")
                continue
            v = videos.setdefault(key, Video(key, frames, frame_dir))
            v.expressions[str(item["exp_id"])] = Expression(
                str(item["exp_id"]), str(item["exp_text"]), 1 if item.get("is_sent") else 0, [item["obj_id"]], key)
    return Benchmark(name, root, split, videos, True)


def _read_palette(name: str, root: Path, split: str, problems: Problems) -> Benchmark:
    path = meta_file(name, root, split)
    meta = _videos_of(path)
    base = root / split
    has_masks = (name, split) not in SERVER_SPLITS
    videos = {}
    for key, entry in sorted(meta.items()):
        frames = entry.get("frames") if isinstance(entry, dict) else None
        if not isinstance(frames, list) or not frames:
            problems.add("video", key, path, "no frame list")
            continue
        if has_masks and not (base / "Annotations" / key).is_dir():
            folder = (base / "Annotations" / key).relative_to(root)
            problems.add("video", key, path, f"annotation folder {folder} missing")
            continue
        v = Video(key, [str(f) for f in frames], base / "JPEGImages" / key)
        for exp_id, e in entry.get("expressions", {}).items():
            try:
                obj = int(e["obj_id"])
                text = str(e["exp"])
            except (TypeError, KeyError, ValueError):
                problems.add("expression", f"{key}#{exp_id}", path, "expected {exp, obj_id}")
                continue
            v.expressions[str(exp_id)] = Expression(str(exp_id), text, 0, [obj], obj)
        videos[key] = v
    return Benchmark(name, root, split, videos, has_masks)


def _encode(mask: np.ndarray) -> dict:
    rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": [int(x) for x in rle["size"]], "counts": rle["counts"].decode("ascii")}


def to_revos(bench: Benchmark, out: Path, link_frames: bool = False) -> Path:
    """Write `bench` as a ReVOS-layout root at `out` (rewritten whole); returns `out`.

    Split "train" of the benchmark goes to `meta_expressions_train_.json`, any other to `valid`; the other
    meta file is written empty. anno_ids are numbered 1, 2, … per distinct (video, target); a frame without
    annotation (or a server split) gets a null RLE. Frames are copied, or with `link_frames` each video's
    folder is a symbolic link to the published one (training sources: nothing copied). mask_dict.json and the
    foreground file are written a video at a time (anno_ids ascending): memory holds one video's masks.
    """
    out = Path(out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    split = "train" if bench.split == "train" else "valid"
    meta: dict[str, dict] = {}
    mask_writer = _JsonObjectWriter(out / revos.MASK_DICT)
    foreground_writer = _JsonObjectWriter(out / revos.FOREGROUND)
    n_annos = 0
    for key, v in sorted(bench.videos.items()):
        if not v.expressions:
            continue
        dst = out / "JPEGImages" / key
        dst.parent.mkdir(parents=True, exist_ok=True)
        if link_frames:
            dst.symlink_to(v.frame_dir.resolve(), target_is_directory=True)
        else:
            dst.mkdir()
        for f in v.frames:
            src = v.frame_dir / f"{f}.jpg"
            if not src.is_file():
                raise BenchmarkFormatError(f"{src}: frame {f} of video {key} missing")
            if not link_frames:
                shutil.copyfile(src, dst / f"{f}.jpg")
        with Image.open(dst / f"{v.frames[0]}.jpg") as img:
            width, height = img.size
        targets: dict[str, int] = {}
        mask_dict: dict[str, list] = {}  # this video's
        exps = {}
        for exp_id, e in v.expressions.items():
            annos: list[int] = []
            # RLE layouts keep one anno_id per object (a multi-object target is their union); the PNG
            # layouts annotate one mask per target
            parts = [[a] for a in e.target] if bench.name in ("revos", "mevis") else [e.target]
            for part in parts if bench.has_masks else []:
                target = json.dumps(part, sort_keys=True)
                if target not in targets:
                    n_annos += 1
                    targets[target] = n_annos
                    track = (_rle_track(bench.masks, part, len(v.frames)) if bench.name in ("revos", "mevis")
                             else bench.track(key, exp_id))
                    mask_dict[str(targets[target])] = [_encode(m) if m is not None and m.any() else None
                                                       for m in track]
                annos.append(targets[target])
            obj_ids = list(e.obj_ids) if len(e.obj_ids) == len(annos) else list(range(len(annos)))
            exps[exp_id] = {"exp": e.text, "obj_id": obj_ids, "anno_id": annos, "type_id": e.type_id}
        union = [np.zeros((height, width), dtype=bool) for _ in v.frames]
        for anno in targets.values():
            for t, rle in enumerate(mask_dict[str(anno)]):
                if rle:
                    union[t] |= mask_utils.decode({"size": rle["size"], "counts": rle["counts"].encode()}).astype(bool)
        for anno in sorted(targets.values()):
            mask_writer.add(str(anno), mask_dict[str(anno)])
        foreground_writer.add(key, {"masks_rle": [_encode(m) for m in union],
                                    "foreground_ratio": [round(float(m.mean()), 6) for m in union]})
        meta[key] = {"vid_id": key, "height": height, "width": width, "frames": list(v.frames), "expressions": exps}
    for name in revos.SPLITS:
        write_json(revos.meta_path(out, name), {"videos": meta if name == split else {}})
    mask_writer.close()
    foreground_writer.close()
    return out


def ingest_benchmark(params: IngestParams, name: str, root: Path, split: str, out_dir: Path, revos_root: Path,
                     runner: RunnerParams | None = None) -> StageReport:
    """Index a benchmark split into `out_dir` exactly as `ingest` indexes ReVOS (via `to_revos` at `revos_root`).

    Problems found while reading the layout join the quarantine table (strict mode: raised).
    """
    from stages.ingest import ingest

    problems = Problems(strict=params.strict, root=Path(root))
    bench = read_benchmark(name, root, split, problems)
    if not bench.has_masks:
        raise BenchmarkFormatError(f"{root}: {name} {bench.split} has no public masks, so there is nothing to index; "
                                   f"build its submission with `vrsflow evaluate --benchmark {name}`")
    to_revos(bench, revos_root)
    report = ingest(params, revos_root, out_dir, runner)
    if problems.rows:
        quarantine = pd.read_parquet(Path(out_dir) / "quarantine.parquet")
        extra = pd.DataFrame(problems.rows, columns=list(quarantine.columns))
        write_table(pd.concat([extra, quarantine], ignore_index=True), QuarantineSchema,
                    Path(out_dir) / "quarantine.parquet")
        report.metrics["quarantined"] = report.metrics.get("quarantined", 0) + len(extra)
    return report
