"""Keyframe rules that the mutation run (scripts/mutation.sh keyframes, docs/testing.md) found unpinned.

The sampling rule's docstring promises more than "the anchor is in": the stride is the widest that fits N
frames on the anchor's phase, and of that grid the N consecutive points that keep the anchor as central as
possible are taken. Both are checked here against a brute force over every stride and every window.
"""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from stages.keyframes.frames import sample_frames


def brute_force(T: int, N: int, anchor: int) -> tuple[int, int]:
    """(stride, the anchor's best index in its window): the widest stride ≤ ⌊(T−1)/(N−1)⌋ whose grid through
    the anchor has N points, and the index closest to the centre (N−1)//2 over every window holding it."""
    for stride in range((T - 1) // (N - 1), 0, -1):
        grid = list(range(anchor % stride, T, stride))
        if len(grid) >= N:
            p = grid.index(anchor)
            indices = [p - s for s in range(len(grid) - N + 1) if s <= p < s + N]
            return stride, min(indices, key=lambda i: abs(i - (N - 1) // 2))
    raise AssertionError("stride 1 always fits")


@settings(max_examples=150, deadline=None)
@given(st.integers(3, 300), st.integers(2, 12), st.data())
@example(30, 6, None)
@example(11, 6, None)
def test_anchor_sits_as_centrally_as_the_widest_grid_allows(T, N, data):
    if N >= T:
        N = T - 1
    anchor = data.draw(st.integers(0, T - 1)) if data is not None else T // 2
    frames = sample_frames(T, N, anchor)
    stride, index = brute_force(T, N, anchor)
    assert frames[1] - frames[0] == stride
    assert frames.index(anchor) == index
    assert frames == [anchor + (i - index) * stride for i in range(N)]


def test_even_n_puts_the_anchor_at_the_lower_middle():
    # N = 6, T = 100: strides 19, 18, 17 leave 5 grid points on the anchor's phase; 16 has 7 (2, 18, …, 98):
    # the anchor is index 2 of 0..5 (two frames before it, three after)
    assert sample_frames(100, 6, 50) == [18, 34, 50, 66, 82, 98]
    assert sample_frames(100, 5, 50) == [2, 26, 50, 74, 98]  # odd N: exactly central, stride ⌊99/4⌋ = 24
    assert sample_frames(100, 6, 2) == [2, 21, 40, 59, 78, 97]  # at the start: as central as the grid allows
