"""RLE conversions pinned for the mutation run (scripts/mutation.sh rle, docs/testing.md): sizes keep their
order (height, width), counts change type only, an empty RLE decodes to nothing, errors name the problem."""

from __future__ import annotations

import numpy as np
import pytest

from stages.core import rle


def test_to_coco_and_to_json_keep_height_then_width_and_convert_counts_only():
    assert rle.to_coco({"size": ["2", 3], "counts": "ab"}) == {"size": [2, 3], "counts": b"ab"}
    assert rle.to_coco({"size": [2, 3], "counts": b"ab"}) == {"size": [2, 3], "counts": b"ab"}
    assert rle.to_json({"size": (2, "3"), "counts": b"ab"}) == {"size": [2, 3], "counts": "ab"}
    assert rle.to_json({"size": [2, 3], "counts": "ab"}) == {"size": [2, 3], "counts": "ab"}


def test_empty_encode_decode_on_a_non_square_frame():
    empty = rle.empty(3, 5)
    assert empty["size"] == [3, 5] and isinstance(empty["counts"], bytes)
    assert rle.decode(rle.to_json(empty), 3, 5).shape == (3, 5) and not rle.decode(rle.to_json(empty), 3, 5).any()
    none = rle.decode(None, 2, 4)
    assert none.dtype == bool and none.shape == (2, 4) and not none.any()
    mask = np.zeros((3, 5), dtype=bool)
    mask[1, 4] = True
    encoded = rle.encode(mask)
    assert encoded["size"] == [3, 5] and isinstance(encoded["counts"], str)
    decoded = rle.decode(encoded, 3, 5)
    assert decoded.dtype == bool and decoded.tolist() == mask.tolist()
    assert rle.areas_and_boxes([encoded, None, rle.to_json(empty)])[0].tolist() == [1, 0, 0]
    assert rle.areas_and_boxes([encoded])[1].tolist() == [[4.0, 1.0, 5.0, 2.0]]


def test_union_of_one_and_of_none():
    mask = np.zeros((3, 5), dtype=bool)
    mask[0, 1:3] = True
    one = rle.union([None, rle.encode(mask), None], 3, 5)
    assert rle.decode(rle.to_json(one), 3, 5).tolist() == mask.tolist()
    nothing = rle.union([None], 3, 5)
    assert nothing["size"] == [3, 5] and not rle.decode(rle.to_json(nothing), 3, 5).any()


def test_unreadable_rle_message():
    with pytest.raises(rle.RLEError, match="^unreadable RLE: Expected bytes, got int$"):
        rle.areas_and_boxes([{"size": [4, 4], "counts": 12}])


def test_areas_are_int64_and_encode_takes_any_zero_one_array():
    mask = np.zeros((3, 4), dtype=bool)
    mask[1, 2] = mask[2, 2] = True
    areas, boxes = rle.areas_and_boxes([rle.encode(mask), None])
    assert areas.dtype == np.int64 and areas.tolist() == [2, 0]
    assert boxes.dtype == np.float64 and boxes[0].tolist() == [2.0, 1.0, 3.0, 3.0] and np.isnan(boxes[1]).all()
    assert rle.areas_and_boxes([None])[0].dtype == np.int64
    expected = rle.encode(mask)
    for dtype in (np.uint8, np.int64, np.float64, np.int32):
        assert rle.encode(mask.astype(dtype)) == expected
