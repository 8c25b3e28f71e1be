"""The ingest frame check: truncation is caught in both modes (header mode without decoding a pixel)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from stages.ingest.checks import check_jpeg


@pytest.fixture()
def jpeg(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    path = tmp_path / "00000.jpg"
    Image.fromarray(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)).save(path, quality=90)
    return path


@pytest.mark.parametrize("mode", ["header", "decode"])
def test_complete_frame_passes(jpeg: Path, mode: str) -> None:
    assert check_jpeg(jpeg, 48, 64, mode) is None
    jpeg.write_bytes(jpeg.read_bytes() + b"\x00" * 64)  # padding after the end marker (some writers add it)
    assert check_jpeg(jpeg, 48, 64, mode) is None


@pytest.mark.parametrize("mode", ["header", "decode"])
@pytest.mark.parametrize("keep", [0.5, 0.9, -2])
def test_truncated_frame_is_caught(jpeg: Path, mode: str, keep: float) -> None:
    data = jpeg.read_bytes()
    jpeg.write_bytes(data[:keep] if isinstance(keep, int) else data[:int(len(data) * keep)])
    reason = check_jpeg(jpeg, 48, 64, mode)
    assert reason is not None and "truncated" in reason


def test_wrong_size_missing_and_not_a_jpeg(jpeg: Path, tmp_path: Path) -> None:
    assert check_jpeg(jpeg, 64, 48, "header") == "JPEG is 64x48 but the video is 48x64"
    assert check_jpeg(tmp_path / "absent.jpg", 48, 64, "header") == "frame file missing"
    png = tmp_path / "00001.jpg"
    Image.new("RGB", (64, 48)).save(png, format="PNG")
    assert check_jpeg(png, 48, 64, "decode") == "not a JPEG (PNG)"
