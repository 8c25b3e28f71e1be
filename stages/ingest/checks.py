"""Validation of ReVOS items; each problem names the file, the item and what is wrong.

`Problems` either raises at the first problem (`ingest.strict: true`) or collects quarantine rows and
lets the rest of the data proceed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from PIL import Image, UnidentifiedImageError


class IngestError(ValueError):
    """Bad input in strict mode: the message names the file / video / expression / frame and the problem."""


@dataclass
class Problems:
    """Problem sink: raise (strict) or record for the quarantine table."""

    strict: bool
    root: Path | None = None  # quarantine rows name files relative to it (tables independent of where data sits)
    rows: list[dict[str, str]] = field(default_factory=list)

    def add(self, kind: str, item: str, file: Path | str, reason: str) -> None:
        """Report one bad item. Raises IngestError in strict mode (the message has the full path)."""
        if self.strict:
            raise IngestError(f"{file}: {kind} {item!r}: {reason}")
        if self.root is not None and Path(file).is_relative_to(self.root):
            file = Path(file).relative_to(self.root)
        self.rows.append({"stage": "ingest", "kind": kind, "item": item, "file": str(file), "reason": reason})


def check_frame_names(frames: Any) -> str | None:
    """The reason a video's `frames` list is unusable, or None."""
    if not isinstance(frames, list) or not frames:
        return "frames must be a non-empty list of frame names"
    if not all(isinstance(f, str) for f in frames):
        return "frame names must be strings"
    if len(set(frames)) != len(frames):
        dup = sorted({f for f in frames if frames.count(f) > 1})[:3]
        return f"duplicate frame names {dup}"
    if frames != sorted(frames):
        first = next(i for i in range(1, len(frames)) if frames[i] < frames[i - 1])
        return f"frame names not sorted ({frames[first - 1]!r} before {frames[first]!r})"
    return None


def check_size(video: dict) -> str | None:
    """The reason height/width are unusable, or None."""
    for key in ("height", "width"):
        value = video.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            return f"{key} must be a positive integer, got {value!r}"
    return None


def check_expression(expression: Any) -> str | None:
    """The reason an expression entry is unusable (text, type_id, obj_id/anno_id), or None."""
    if not isinstance(expression, dict):
        return "expression entry is not an object"
    text = expression.get("exp")
    if not isinstance(text, str):
        return f"expression text must be a string, got {type(text).__name__}"
    if not text.strip():
        return "empty expression text"
    type_id = expression.get("type_id")
    if isinstance(type_id, bool) or type_id not in (0, 1, 2):
        return f"type_id must be 0, 1 or 2, got {type_id!r}"
    obj_ids, anno_ids = expression.get("obj_id"), expression.get("anno_id")
    for name, ids in (("obj_id", obj_ids), ("anno_id", anno_ids)):
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            return f"{name} must be a list of integers, got {ids!r}"
    if len(obj_ids) != len(anno_ids):
        return f"obj_id has {len(obj_ids)} entries but anno_id has {len(anno_ids)}"
    if type_id == 2 and anno_ids:
        return "no-target expression (type_id 2) with target ids"
    if type_id != 2 and not anno_ids:
        return f"type_id {type_id} expression without target ids"
    if len(set(anno_ids)) != len(anno_ids):
        return f"repeated anno_id in {anno_ids}"
    return None


JPEG_SOI = b"\xff\xd8"  # start-of-image marker: the first two bytes of every JPEG
JPEG_EOI = b"\xff\xd9"  # end-of-image marker: the last two bytes of a complete JPEG
EOI_TAIL = 4096  # bytes at the end of a file searched for it (some writers pad after the marker)


def _scan_start(handle: BinaryIO, size: int) -> int:
    """Offset of the first scan's entropy-coded data (just past the start-of-scan segment), found by
    walking the marker segments after SOI: -1 when the file ends inside them, -2 when they are malformed."""
    handle.seek(2)
    while True:
        marker = handle.read(2)
        while marker == b"\xff\xff":  # fill bytes before a marker
            marker = marker[1:] + handle.read(1)
        if len(marker) < 2:
            return -1
        if marker[0] != 0xFF:
            return -2
        if 0xD0 <= marker[1] <= 0xD7 or marker[1] == 0x01:  # markers without a segment
            continue
        raw = handle.read(2)
        if len(raw) < 2:
            return -1
        length = int.from_bytes(raw, "big")
        if length < 2:
            return -2
        if handle.tell() + length - 2 > size:
            return -1
        handle.seek(length - 2, 1)
        if marker[1] == 0xDA:  # start of scan
            return handle.tell()


def _terminated(path: Path) -> bool | None:
    """Whether the JPEG's image data is followed by the end-of-image marker (False: cut short); None when
    the file does not start like a JPEG or its marker segments are malformed (left to the decoder).

    A file cut short has no end marker after its image data: in entropy-coded data every 0xFF byte is
    followed by 0x00 or a restart marker (0xD0–0xD7), never by 0xD9; an EXIF thumbnail's end marker lies
    before the start of scan and does not count. The last EOI_TAIL bytes are searched first; only a file
    without the marker there (cut short, or more than EOI_TAIL bytes of other data after the image) is
    read whole."""
    with open(path, "rb") as handle:
        if handle.read(2) != JPEG_SOI:
            return None
        size = handle.seek(0, 2)
        scan = _scan_start(handle, size)
        if scan < 0:
            return False if scan == -1 else None
        handle.seek(max(scan, size - EOI_TAIL))
        if JPEG_EOI in handle.read():
            return True
        handle.seek(scan)
        return JPEG_EOI in handle.read()


def check_jpeg(path: Path, height: int, width: int, mode: str) -> str | None:
    """The reason a frame file is unusable (missing, empty, not a JPEG, truncated, wrong size), or None.

    mode "header": the size from the JPEG header, and the end-of-image marker after the image data (a
    file cut short has none) — no pixel is decoded. mode "decode": additionally decodes every file's
    entropy-coded data, at 1/8 scale (libjpeg's DCT scaling skips most of the inverse transform and
    colour work, not the reading of the data), so data libjpeg rejects is caught too, at a fraction of a
    full decode. A file whose marker segments cannot be walked is decoded in both modes. The reason is
    one line; the caller names the file.
    """
    if not path.is_file():
        return "frame file missing"
    if path.stat().st_size == 0:
        return "empty file (0 bytes)"
    terminated = _terminated(path)
    if terminated is False:
        return "truncated JPEG: no end-of-image marker after the image data"
    try:
        with Image.open(path) as img:
            size = img.size
            if img.format != "JPEG":
                return f"not a JPEG ({img.format})"
            if mode == "decode" or terminated is None:
                img.draft(img.mode, (max(1, size[0] // 8), max(1, size[1] // 8)))
                img.load()
    except UnidentifiedImageError:
        return "unreadable or truncated JPEG: not an image file (no JPEG or other known header)"
    except (OSError, SyntaxError) as err:
        return f"unreadable or truncated JPEG: {err}"
    if size != (width, height):
        return f"JPEG is {size[0]}x{size[1]} but the video is {width}x{height}"
    return None
