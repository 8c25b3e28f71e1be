"""Reading a ReVOS-layout root exactly as published (VISA's loaders; REFERENCE.md §2).

```
<root>/JPEGImages/<video_key>/<frame>.jpg
<root>/mask_dict.json                    {"<anno_id>": [RLE | null, … one per frame]}
<root>/mask_dict_foreground.json         {"<video_key>": {"masks_rle": [RLE …], "foreground_ratio": [float …]}}
<root>/meta_expressions_{train,valid}_.json
```

`mask_dict.json` is large on the real dataset: it is streamed with ijson, one anno_id at a time,
never loaded whole — in the pipeline by ingest only, which keeps the RLEs later stages need in
`data/index/masks.parquet` (`stages/core/mask_table.py`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ijson

from stages.core.ids import expression_id

SPLITS = ("train", "valid")
MASK_DICT = "mask_dict.json"
FOREGROUND = "mask_dict_foreground.json"


class RevosFormatError(ValueError):
    """A ReVOS file is malformed; the message names the file and, where known, the item."""


def meta_path(root: Path, split: str) -> Path:
    """`meta_expressions_<split>_.json` (the published names carry the trailing underscore)."""
    return Path(root) / f"meta_expressions_{split}_.json"


def frame_path(root: Path, video: str, frame: str) -> Path:
    """Path of one JPEG frame."""
    return Path(root) / "JPEGImages" / video / f"{frame}.jpg"


def load_meta(path: Path) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Load a meta_expressions file; returns (videos mapping, duplicated items).

    JSON objects with a repeated key (a duplicate video key or expression id) are legal JSON that
    `json.load` silently collapses to the last value; here each repetition is reported instead, as
    ("video", video_key) or ("expression", "<video>#<exp_id>") — also for a key repeated inside a video
    or expression entry, which makes that entry ambiguous — or ("file", key) elsewhere. The caller
    decides what to drop; the returned mapping holds the first value of every repeated key.

    Raises:
        RevosFormatError: unreadable or malformed JSON, or no "videos" mapping.
    """
    repeated: dict[int, list[str]] = {}
    discarded: list[Any] = []  # keeps dropped values alive so that id() of a live object is never reused

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                repeated.setdefault(id(out), []).append(key)
                discarded.append(value)
            else:
                out[key] = value
        return out

    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle, object_pairs_hook=pairs_hook)
    except FileNotFoundError as err:
        raise RevosFormatError(f"{path}: file missing") from err
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RevosFormatError(f"{path}: malformed JSON: {err}") from err
    if not isinstance(data, dict) or not isinstance(data.get("videos"), dict):
        raise RevosFormatError(f"{path}: expected an object with a 'videos' mapping")
    videos = data["videos"]
    duplicates = [("video", key) for key in repeated.pop(id(videos), [])]
    for key, entry in videos.items():
        if not isinstance(entry, dict):
            continue
        if repeated.pop(id(entry), None):
            duplicates.append(("video", key))
        expressions = entry.get("expressions")
        if not isinstance(expressions, dict):
            continue
        duplicates += [("expression", expression_id(key, exp_id)) for exp_id in repeated.pop(id(expressions), [])]
        for exp_id, expression in expressions.items():
            if isinstance(expression, dict) and repeated.pop(id(expression), None):
                duplicates.append(("expression", expression_id(key, exp_id)))
    duplicates += [("file", key) for keys in repeated.values() for key in keys]
    return videos, list(dict.fromkeys(duplicates))


def iter_json_object(path: Path) -> Iterator[tuple[str, Any]]:
    """Stream the top-level (key, value) pairs of a large JSON object with ijson.

    Raises:
        RevosFormatError: missing file or malformed JSON (names the file).
    """
    try:
        with open(path, "rb") as handle:
            # use_float: RLE sizes and ratios as int/float, not Decimal
            yield from ijson.kvitems(handle, "", use_float=True)
    except FileNotFoundError as err:
        raise RevosFormatError(f"{path}: file missing") from err
    except ijson.JSONError as err:
        raise RevosFormatError(f"{path}: malformed JSON: {err}") from err
