"""Stratified-selection rules pinned for the mutation run (scripts/mutation.sh sample, docs/testing.md):
Hamilton's ties by key, the even share for strata missing from the source, and the draw's order rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stages.sample.stratify import allocate, draw, largest_remainder


@pytest.mark.parametrize(("total", "weights", "expected"), [
    (1, {"b": 1, "a": 1}, {"a": 1, "b": 0}),  # equal remainders: the first key
    (3, {"x": 1, "y": 1, "z": 2}, {"x": 1, "y": 1, "z": 1}),  # .75, .75, 1.5: floors 0, 0, 1; two left
    (4, {"a": 1, "b": 8, "c": 1}, {"a": 1, "b": 3, "c": 0}),  # .4, 3.2, .4: the one left goes to "a" (tie by key)
    (7, {"a": 5, "b": 2}, {"a": 5, "b": 2}),
    (0, {"a": 1}, {"a": 0}), (-2, {"a": 1}, {"a": 0}), (5, {"a": 0, "b": 0}, {"a": 0, "b": 0}),
])
def test_largest_remainder_literals(total, weights, expected):
    assert largest_remainder(total, weights) == expected


@pytest.mark.parametrize(("size", "source", "available", "expected"), [
    (4, {}, {"a": 3, "b": 3}, {"a": 2, "b": 2}),  # no source sizes: an even share
    (5, {"a": 1}, {"a": 3, "b": 3}, {"a": 3, "b": 2}),  # "a" runs out; "b" (absent from the source) tops up
    (10, {"a": 5, "b": 5}, {"a": 1, "b": 2}, {"a": 1, "b": 2}),  # fewer candidates than asked
    (6, {"a": 2, "b": 1}, {"a": 4, "b": 0, "c": 9}, {"a": 4, "b": 0, "c": 2}),
])
def test_allocate_literals(size, source, available, expected):
    assert allocate(size, source, available) == expected


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from("st"), min_size=1, max_size=12), st.integers(0, 5), st.integers(0, 5),
       st.integers(0, 2**31), st.randoms())
def test_draw_is_seeded_order_free_and_exact(strata, n_s, n_t, seed, rnd):
    ids = [f"item{i}" for i in range(len(strata))]
    counts = {"s": n_s, "t": n_t}
    chosen = draw(ids, strata, counts, seed, "grpo")
    assert chosen == [i for i in ids if i in set(chosen)]  # input order
    for stratum, n in counts.items():
        members = [i for i, s in zip(ids, strata, strict=True) if s == stratum]
        assert len([i for i in chosen if i in members]) == min(n, len(members))
    order = list(range(len(ids)))
    rnd.shuffle(order)
    shuffled = draw([ids[k] for k in order], [strata[k] for k in order], counts, seed, "grpo")
    assert set(shuffled) == set(chosen)  # which items, not their order in the input, decide
    assert draw(ids, strata, {"s": n_s}, seed, "grpo") == [i for i in chosen if strata[ids.index(i)] == "s"]
