"""Counting what SAM2 encodes, for the tests that check a frame is encoded once."""

from __future__ import annotations

import pytest


def count_encoded_frames(predictor, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the batch size of every SAM2 image-encoder call on `predictor` (frames encoded, per call)."""
    encoded: list[int] = []
    original = predictor.forward_image

    def counting(images):
        encoded.append(int(images.shape[0]))
        return original(images)

    monkeypatch.setattr(predictor, "forward_image", counting)
    return encoded
