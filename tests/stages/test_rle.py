"""Area and box from the RLE without decoding equal the decoded mask's (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from stages.core import rle


@st.composite
def masks(draw: st.DrawFn) -> np.ndarray:
    h = draw(st.integers(1, 40))
    w = draw(st.integers(1, 40))
    return draw(arrays(np.bool_, (h, w), elements=st.booleans()))


def numpy_area_box(mask: np.ndarray) -> tuple[int, list[float]]:
    ys, xs = np.nonzero(mask)
    if ys.size == 0:
        return 0, [np.nan] * 4
    return int(ys.size), [float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)]


@settings(max_examples=150, deadline=None)
@given(st.lists(masks(), min_size=1, max_size=5))
def test_area_and_box_match_decoded_masks(mask_list: list[np.ndarray]) -> None:
    rles = [rle.encode(m) if m.any() or i % 2 else None for i, m in enumerate(mask_list)]
    areas, boxes = rle.areas_and_boxes(rles)
    for i, (m, r) in enumerate(zip(mask_list, rles, strict=True)):
        expected_area, expected_box = numpy_area_box(m if r is not None else np.zeros_like(m))
        assert areas[i] == expected_area
        np.testing.assert_array_equal(boxes[i], expected_box)
        if r is not None:
            np.testing.assert_array_equal(rle.decode(r, *m.shape), m)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 30), st.integers(1, 30), st.data())
def test_union_matches_logical_or(h: int, w: int, data: st.DataObject) -> None:
    parts = data.draw(st.lists(arrays(np.bool_, (h, w), elements=st.booleans()), min_size=0, max_size=4))
    union = rle.union([rle.encode(p) for p in parts] + [None], h, w)
    expected = np.any(parts, axis=0) if parts else np.zeros((h, w), dtype=bool)
    np.testing.assert_array_equal(rle.decode(rle.to_json(union), h, w), expected)


def test_unreadable_counts_raise_rle_error() -> None:
    import pytest

    with pytest.raises(rle.RLEError):
        rle.areas_and_boxes([{"size": [4, 4], "counts": 12}])
