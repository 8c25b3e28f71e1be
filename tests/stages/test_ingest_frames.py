"""The ingest frame check against a full decode: it decodes (almost) nothing, yet every file a full decode
rejects as cut short is rejected too, and the stage names each bad frame file in one line.

Oracle: Pillow's full-size decode (`Image.open(p).load()`, the check ingest ran before), on the same bytes.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from stages.core.runner import RunnerParams
from stages.ingest import IngestError, ingest
from stages.ingest.checks import check_jpeg
from stages.params.ingest import IngestParams
from tests.revos_factory import frame_file, simple_video, write_root

MODES = ["header", "decode"]
TRUNCATED = "truncated JPEG: no end-of-image marker after the image data"
H, W = 240, 320


def _image() -> np.ndarray:
    """Smooth gradients plus a noisy patch: a few tens of KB at quality 90 (more than the 4 KiB tail the
    check searches for the end-of-image marker)."""
    yy, xx = np.mgrid[0:H, 0:W]
    image = np.stack([xx % 256, (2 * yy) % 256, (xx + yy) % 256], axis=-1).astype(np.uint8)
    image[40:200, 60:260] = np.random.default_rng(0).integers(0, 256, (160, 200, 3), dtype=np.uint8)
    return image


def _encode(image: np.ndarray, **save: object) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=90, **save)
    return buffer.getvalue()


def _with_thumbnail(data: bytes) -> bytes:
    """A complete small JPEG inside an application segment before the image data (as an EXIF thumbnail
    is): its end-of-image marker must not make a truncated main image look complete."""
    thumb = _encode(_image()[::8, ::8].copy())
    segment = b"\xff\xef" + (len(thumb) + 2).to_bytes(2, "big") + thumb
    return data[:2] + segment + data[2:]


VARIANTS = {
    "baseline": lambda: _encode(_image()),
    "progressive": lambda: _encode(_image(), progressive=True),
    "restart_markers": lambda: _encode(_image(), restart_marker_rows=1),
    "grayscale": lambda: _encode(_image()[..., 0].copy()),
    "thumbnail": lambda: _with_thumbnail(_encode(_image())),
}


def full_decode_fails(path: Path) -> bool:
    """Whether Pillow's full-size decode rejects the file (it raises on data that ends early)."""
    try:
        with Image.open(path) as img:
            img.load()
    except OSError:
        return True
    return False


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_cut_is_caught_where_a_full_decode_fails(tmp_path: Path, variant: str) -> None:
    """A file cut at any of 40 points through it, or by its last 1–3 bytes: the full decode fails, and so
    does the check in both modes, saying the JPEG is truncated."""
    data = VARIANTS[variant]()
    assert len(data) > 3 * 4096
    complete = _write(tmp_path, "complete.jpg", data)
    shape = (H, W)
    assert not full_decode_fails(complete)
    for mode in MODES:
        assert check_jpeg(complete, *shape, mode) is None
    cuts = sorted({int(len(data) * k / 40) for k in range(1, 40)} | {len(data) - 1, len(data) - 2, len(data) - 3})
    for cut in cuts:
        path = _write(tmp_path, f"cut{cut}.jpg", data[:cut])
        assert full_decode_fails(path), cut
        for mode in MODES:
            reason = check_jpeg(path, *shape, mode)
            assert reason == TRUNCATED, (cut, mode, reason)


@pytest.mark.parametrize("mode", MODES)
def test_data_after_the_image_is_accepted_as_a_full_decode_does(tmp_path: Path, mode: str) -> None:
    """Bytes appended after a complete image (a few, or more than the 4 KiB tail searched for the end
    marker): the full decode reads the image; so does the check (it decodes only the second file)."""
    data = VARIANTS["baseline"]()
    rng = np.random.default_rng(1)
    for extra in (100, 10_000):
        path = _write(tmp_path, f"plus{extra}.jpg", data + rng.integers(0, 256, extra, dtype=np.uint8).tobytes())
        assert not full_decode_fails(path)
        assert check_jpeg(path, H, W, mode) is None


@pytest.mark.parametrize("mode", MODES)
def test_empty_and_not_a_jpeg(tmp_path: Path, mode: str) -> None:
    png = io.BytesIO()
    Image.fromarray(_image()).save(png, format="PNG")
    expected = {
        "empty.jpg": (b"", "empty file (0 bytes)"),
        "png.jpg": (png.getvalue(), "not a JPEG (PNG)"),
        "text.jpg": (b"not a jpeg at all", "unreadable or truncated JPEG: not an image file (no JPEG or other "
                                           "known header)"),
    }
    for name, (content, reason) in expected.items():
        assert check_jpeg(_write(tmp_path, name, content), H, W, mode) == reason, name


@pytest.mark.parametrize("mode", MODES)
def test_overwritten_tail_is_caught(tmp_path: Path, mode: str) -> None:
    """The last 40 or 3000 bytes replaced by random bytes without an end marker: reported as truncated in
    both modes — also where libjpeg decodes the garbage with only a warning and the full decode passes."""
    data = VARIANTS["baseline"]()
    for seed in range(6):
        for n in (40, 3000):
            tail = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()
            assert b"\xff\xd9" not in tail  # seeded: no end marker by chance
            path = _write(tmp_path, f"tail{seed}-{n}.jpg", data[:-n] + tail)
            assert check_jpeg(path, H, W, mode) == TRUNCATED, (seed, n)


BROKEN = {  # video → how its frame 00002 is broken, and the reason the stage gives
    "SRC/train/cut": (lambda d: d[: len(d) // 2], TRUNCATED),
    "SRC/train/tail": (lambda d: d[:-40] + b"\x00\x01" * 20, TRUNCATED),
    "SRC/train/empty": (lambda d: b"", "empty file (0 bytes)"),
    "SRC/train/png": (None, "not a JPEG (PNG)"),
}


def _broken_root(tmp_path: Path) -> Path:
    root = write_root(tmp_path / "root", [simple_video(k) for k in [*BROKEN, "SRC/train/ok"]])
    for video, (how, _) in BROKEN.items():
        path = frame_file(root, video, "00002")
        if how is None:
            with Image.open(path) as img:
                img.load()
                img.save(path, format="PNG")
        else:
            path.write_bytes(how(path.read_bytes()))
    return root


@pytest.mark.parametrize("mode", MODES)
def test_stage_names_each_bad_frame_in_one_line(tmp_path: Path, mode: str) -> None:
    """Quarantine mode: one row per broken video naming its frame file and the reason, the good video kept.
    Strict mode: the first broken frame stops the stage with one line: file, frame, reason."""
    root = _broken_root(tmp_path)
    serial = RunnerParams(kind="serial")
    ingest(IngestParams(strict=False, check_jpeg=mode), root, tmp_path / "index", serial)
    quarantine = pd.read_parquet(tmp_path / "index" / "quarantine.parquet")
    rows = {(r.kind, r.item, r.file, r.reason) for r in quarantine.itertuples()}
    assert rows == {("frame", f"{v}/00002", f"JPEGImages/{v}/00002.jpg", reason) for v, (_, reason) in BROKEN.items()}
    videos = pd.read_parquet(tmp_path / "index" / "videos.parquet")
    assert list(videos["video"]) == ["SRC/train/ok"]

    with pytest.raises(IngestError) as caught:
        ingest(IngestParams(strict=True, check_jpeg=mode), root, tmp_path / "strict", serial)
    first = sorted(BROKEN)[0]
    message = str(caught.value)
    assert "\n" not in message
    assert message == f"{frame_file(root, first, '00002')}: frame '{first}/00002': {BROKEN[first][1]}"
