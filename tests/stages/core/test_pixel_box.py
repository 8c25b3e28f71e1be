"""The one box → pixels conversion (stages/core/pixel_box.py) and its callers, over random boxes including the
degenerate ones the real datasets hold: zero-area, sub-pixel, inverted, outside or straddling the frame."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from stages.core.pixel_box import answer_box, boxes_mask, outline_rect, pixel_box, pixel_span

edges = st.floats(min_value=-300, max_value=300, allow_nan=False, allow_infinity=False)
any_edges = st.one_of(edges, st.sampled_from([0.0, 0.1, 0.5, 1.0, -0.0, math.inf, -math.inf, 1e308, -1e308]))
boxes = st.lists(any_edges, min_size=4, max_size=4)
sizes = st.integers(min_value=1, max_value=300)
scales = st.floats(min_value=1e-3, max_value=20, allow_nan=False)


@pytest.mark.parametrize(("lo", "hi", "size", "min_size", "span"), [
    (10.0, 20.0, 100, 1, (10, 20)),
    (10.4, 20.5, 100, 1, (10, 21)),  # half-way rounds up (never to even)
    (2.5, 3.5, 100, 0, (3, 4)),  # Python's round would give (2, 4)
    (50.0, 50.0, 100, 1, (50, 51)),  # zero width: one pixel
    (50.0, 50.0, 100, 0, (50, 50)),  # ... or none, when rasterising
    (0.0, 0.1, 100, 1, (0, 1)),
    (0.0, 0.1, 100, 0, (0, 0)),  # no pixel centre covered
    (99.8, 100.0, 100, 1, (99, 100)),  # a sliver at the far border keeps the last column
    (100.0, 120.0, 100, 1, (99, 100)),  # wholly outside: drawn at the border
    (-20.0, -5.0, 100, 1, (0, 1)),
    (30.0, 10.0, 100, 0, (30, 30)),  # inverted: empty, corners not reordered
    (30.0, 10.0, 100, 1, (30, 31)),
    (-math.inf, math.inf, 100, 0, (0, 100)),
    (0.49999999999999994, 2.0, 100, 0, (0, 2)),  # the centre 0.5 is past the edge (floor(v + 0.5) says 1)
    (0.0, 0.4, 1, 1, (0, 1)),  # a one-pixel picture
])
def test_pixel_span_table(lo: float, hi: float, size: int, min_size: int, span: tuple[int, int]) -> None:
    assert pixel_span(lo, hi, size, min_size) == span


@given(lo=any_edges, hi=any_edges, size=sizes)
def test_spans_are_inside_and_at_least_one_pixel_when_drawing(lo: float, hi: float, size: int) -> None:
    start, stop = pixel_span(lo, hi, size, 1)
    assert 0 <= start < stop <= size and stop - start >= 1
    raster = pixel_span(lo, hi, size, 0)
    assert 0 <= raster[0] <= raster[1] <= size
    if raster[1] > raster[0]:  # drawing only ever widens an empty span; a non-empty one is the same pixels
        assert (start, stop) == raster


@given(lo=edges, hi=edges, size=sizes)
def test_raster_span_is_the_pixels_whose_centres_the_box_covers(lo: float, hi: float, size: int) -> None:
    start, stop = pixel_span(lo, hi, size, 0)
    covered = [i for i in range(size) if lo < i + 0.5 <= hi]
    assert list(range(start, stop)) == covered


@given(box=st.lists(edges, min_size=4, max_size=4), scale=scales, k=st.integers(1, 6))
def test_scaling_by_a_whole_factor_keeps_the_covered_pixel_blocks(box: list[float], scale: float, k: int) -> None:
    """A box rasterised at k × is the k × k blow-up of the box at 1 × when its edges sit on whole pixels."""
    whole = [float(round(v)) for v in box]
    small = boxes_mask([whole], 40, 30)
    big = boxes_mask([whole], 40 * k, 30 * k, scale=float(k))
    assert np.array_equal(big, small.repeat(k, axis=0).repeat(k, axis=1))


@pytest.mark.parametrize("bad", [[float("nan"), 0, 1, 1], [0, 0, 1]])
def test_nan_or_short_boxes_are_refused(bad: list[float]) -> None:
    with pytest.raises(ValueError, match="box"):
        pixel_box(bad, 1.0, 10, 10)


def test_pictures_under_one_pixel_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1 pixel"):
        pixel_span(0, 1, 0)


def _jpeg_of(tmp_path, size: tuple[int, int]):
    path = tmp_path / f"f{size[0]}x{size[1]}.jpg"
    if not path.exists():
        Image.fromarray(np.full((size[1], size[0], 3), 128, np.uint8)).save(path)
    return path


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(box=boxes, image_size=st.sampled_from([1, 7, 112, 448]), train_size=st.sampled_from([1, 56, 112, 560]),
       frame=st.sampled_from([(160, 120), (1, 9), (83, 1)]))
@example(box=[50, 50, 50, 50], image_size=448, train_size=112, frame=(160, 120))  # the zero-area box
@example(box=[0, 0, 0.1, 0.1], image_size=448, train_size=112, frame=(160, 120))
@example(box=[0.0, 94.27, 0.7, 95.2], image_size=112, train_size=560, frame=(160, 120))  # the real sliver
def test_marked_frame_draws_every_box(tmp_path, box: list[float], image_size: int, train_size: int,
                                      frame: tuple[int, int]) -> None:
    """The cot stage's drawer never refuses a box, and a box that is there leaves a red mark."""
    from stages.cot import marked_frame

    jpeg = marked_frame(_jpeg_of(tmp_path, frame), [box, None], train_size, image_size)
    image = np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB")).astype(int)
    assert max(image.shape[:2]) == image_size
    if min(image.shape[:2]) >= 8:  # JPEG blurs a one-pixel-high picture's colour beyond telling
        assert (image[..., 0] - image[..., 1]).max() > 60  # some pixel turned red


@settings(max_examples=40, deadline=None)
@given(box=boxes, scale=scales, size=st.tuples(st.integers(1, 50), st.integers(1, 50)))
def test_segment_pictures_draw_every_box(box: list[float], scale: float, size: tuple[int, int]) -> None:
    from stages.segment_video.outputs import BOX_COLOUR, _draw_boxes

    image = Image.new("RGB", size)
    _draw_boxes(image, [box], scale)
    x0, y0, _, _ = outline_rect(box, scale, *size)
    assert tuple(np.asarray(image)[y0, x0]) == BOX_COLOUR


@settings(max_examples=40, deadline=None)
@given(box=boxes, sx=scales, sy=scales, size=st.tuples(st.integers(1, 50), st.integers(1, 50)))
def test_report_tiles_draw_every_box(box: list[float], sx: float, sy: float, size: tuple[int, int]) -> None:
    from stages.evaluate.report import PRED_COLOUR, _box

    image = Image.new("RGB", size)
    _box(image, box, (sx, sy), PRED_COLOUR)
    x0, y0, x1, y1 = outline_rect(box, (sx, sy), *size)
    assert tuple(np.asarray(image)[y0, x0]) == PRED_COLOUR  # the corner pixel of the outline


@given(box_list=st.lists(st.lists(edges, min_size=4, max_size=4), max_size=4), height=sizes, width=sizes)
def test_box_segmenter_masks_are_the_union_of_the_covered_pixels(box_list: list[list[float]], height: int,
                                                                width: int) -> None:
    """evaluate's box segmenter: inside the frame, never wrapping a negative edge to the far side."""
    from stages.evaluate import box_masks

    [masks] = box_masks([np.zeros((height, width, 3), np.uint8)] * 2, [(0, box_list)])
    ys, xs = np.mgrid[0:height, 0:width] + 0.5
    expected = np.zeros((height, width), bool)
    for x1, y1, x2, y2 in box_list:
        expected |= (x1 < xs) & (xs <= x2) & (y1 < ys) & (ys <= y2)
    assert masks.shape == (2, height, width) and np.array_equal(masks[1], expected)


@pytest.mark.parametrize(("box", "integers"), [
    ([10.2, 20.5, 30.5, 40.7], [10, 20, 30, 41]),  # Python's round, as every shard was written
    ([0.0, 94.27, 0.7, 95.2], [0, 94, 1, 95]),  # the sliver already rounds apart
    ([0.0, 10.0, 0.087, 30.0], [0, 10, 1, 30]),  # a 0.09 px sliver at the left border: one pixel
    ([55.91, 10.0, 56.0, 30.0], [55, 10, 56, 30]),  # ... at the right border of a 56 px frame: its last pixel
    ([3.4, 7.6, 3.45, 8.4], [3, 8, 4, 9]),  # collapsing both ways: the pixel under the centre (3.4, 8.0)
    ([50.0, 50.0, 50.0, 50.0], [50, 50, 50, 50]),  # empty as given: left as it is
])
def test_answer_box_table(box: list[float], integers: list[int]) -> None:
    assert answer_box(box) == integers


@given(box=st.lists(st.floats(min_value=0, max_value=560, allow_nan=False), min_size=4, max_size=4))
def test_answer_boxes_with_area_keep_a_pixel_inside_the_frame(box: list[float]) -> None:
    x1, y1, x2, y2 = answer_box(box)
    rounded = [int(round(v)) for v in box]
    for lo, hi in ((0, 2), (1, 3)):
        got = (x1, x2) if lo == 0 else (y1, y2)
        if box[hi] > box[lo]:  # a box with extent keeps at least one pixel, within [0, 560]
            assert 0 <= got[0] < got[1] <= 560
            assert got == (rounded[lo], rounded[hi]) or got[1] - got[0] == 1
        else:
            assert got == (rounded[lo], rounded[hi])
