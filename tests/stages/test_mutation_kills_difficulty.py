"""Difficulty rules pinned for the mutation run (scripts/mutation.sh difficulty, docs/testing.md): the token
budget's clamp and rounding, and the heuristic ratings on hand-computed inputs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stages.core.params import DifficultyParams
from stages.difficulty import heuristic_ratings, level_of, token_budget

PARAMS = DifficultyParams(min_budget=128, max_budget=768)


@pytest.mark.parametrize(("d", "budget"), [
    (0.0, 128), (1.0, 128), (10.0, 768), (11.0, 768),  # clamped to [1, 10]
    (2.0, 192),  # 128 + 640/9 = 199.1 → 192 (nearest multiple of 16)
    (1.2, 144),  # 142.2 → 144
    (1.1, 128),  # 135.1 → 128
    (7.75, 608),  # 608 exactly
])
def test_token_budget_literals(d, budget):
    assert token_budget(d, PARAMS) == budget


@settings(max_examples=60, deadline=None)
@given(st.floats(-5, 15, allow_nan=False), st.integers(1, 40), st.integers(0, 60))
def test_token_budget_is_the_nearest_multiple_of_16_of_the_line(d, low16, span16):
    params = DifficultyParams(min_budget=16 * low16, max_budget=16 * (low16 + span16))
    raw = params.min_budget + (params.max_budget - params.min_budget) * (min(max(d, 1.0), 10.0) - 1.0) / 9
    budget = token_budget(d, params)
    assert budget % 16 == 0 and abs(budget - raw) <= 8
    assert params.min_budget <= budget <= params.max_budget


def test_levels_at_the_thresholds():
    params = DifficultyParams(easy_below=3.0, hard_from=3.0)
    assert [level_of(d, params) for d in (2.99, 3.0)] == ["easy", "hard"]


@pytest.mark.parametrize(("sample", "n_objects", "absent", "visible", "expected"), [
    # 3 objects: (3−1)/5 = .4 → 1 + 9·.4 = 4.6 → 5; areas 500, 1500 of 100²: mean .1, 1 − √(.1/.25) = .368 → 4.3
    # → 4; .6·.5 + .4·(1 − .25) = .6 → 6.4 → 6; motion .12/.6 = .2 → 2.8 → 3; 8 words: .5 + reasoning .3 +
    # two instances .1 = .9 → 9.1 → 9
    ({"train_size": 100, "union_areas": [0.0, 500.0, 1500.0], "text": "a b c d e f g h", "type": "reasoning",
      "n_instances": 2, "motion": 0.12}, 3, 0.5, 0.25,
     {"scene_complexity": 5, "segmentation_challenge": 4, "temporal_ambiguity": 6, "motion_complexity": 3,
      "linguistic_ambiguity": 9}),
    # no target anywhere: nothing to segment is hardest (10); 2 words .125 + no-target .2 = .325 → 3.9 → 4;
    # motion 0.9/.6 clipped to 1 → 10
    ({"train_size": 100, "union_areas": [0.0, 0.0], "text": "a b", "type": "no_target", "n_instances": 1,
      "motion": 0.9}, 1, 0.0, 1.0,
     {"scene_complexity": 1, "segmentation_challenge": 10, "temporal_ambiguity": 1, "motion_complexity": 10,
      "linguistic_ambiguity": 4}),
    # a target filling a quarter of the frame or more: 1; 4 words of a referring expression: .25 → 3.25 → 3;
    # 40 objects: clipped to 10; absent .2, visible .9: .12 + .04 = .16 → 2.44 → 2
    ({"train_size": 10, "union_areas": [30.0], "text": "the dog on left", "type": "referring", "n_instances": 1,
      "motion": 0.0}, 40, 0.2, 0.9,
     {"scene_complexity": 10, "segmentation_challenge": 1, "temporal_ambiguity": 2, "motion_complexity": 1,
      "linguistic_ambiguity": 3}),
])
def test_heuristic_ratings_hand_computed(sample, n_objects, absent, visible, expected):
    assert heuristic_ratings(sample, n_objects, absent, visible) == expected
