"""Reward components on literal cases, compute_score's contract, fuzzing, and verl's GRPO advantage on our rewards."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.answer import MAX_BOXES, GroundTruth, parse_answer
from stages.core.params import RewardParams, RewardWeights
from stages.rewards import (
    REGISTRY,
    check_params,
    compute_score,
    length_penalty,
    max_score,
    resolve_components,
    score_group,
)
from tests.stages.grpo_factory import answer, ground_truth, square_masks

GT = json.dumps(ground_truth())
ALL = RewardParams(components=tuple(REGISTRY))
GT_BOX = [12, 10, 32, 30]  # the square at t=2 (x 12..32, y 10..30)


def perfect_masks(position, boxes):
    return np.stack(square_masks())


def score(text, params=ALL, gt=GT, masks_for=perfect_masks, **kw):
    return compute_score("vrsflow/revos", text, gt, None, params=params, masks_for=masks_for, **kw)


@pytest.mark.parametrize(("text", "expected"), [
    # perfect: every component 1 (AKS option A, negative point outside, KTG point at the GT keyframe)
    (answer(option="A", negative_point_2d_list=[[50, 50]], point_2d_list=[[20, 20]]),
     {"format": 1.0, "keyframe": 1.0, "spatial": 1.0, "consistency": 1.0, "rcot_match": 1.0, "aks_option": 1.0,
      "negative_point": 1.0, "non_repeat": 1.0}),
    # partial overlap: box shifted by 10 px → IoU 200/600; rcot: IoU fails, L1 = 5 < 10·56/840? no → point only
    (answer(boxes=[[22, 10, 42, 30]]),
     {"spatial": pytest.approx(200 / 600), "keyframe": 1.0, "rcot_match": 0.0, "aks_option": 0.0}),
    # wrong keyframe (shown, target smaller: 144 / 400), boxes compared with the boxes at that frame
    (answer(t=0, boxes=[[4, 10, 16, 22]]), {"keyframe": pytest.approx(144 / 400), "spatial": 1.0}),
    # a timestamp that was not shown: keyframe, spatial, consistency and negative point are 0
    (answer(t=3, negative_point_2d_list=[[50, 50]]),
     {"format": 1.0, "keyframe": 0.0, "spatial": 0.0, "consistency": 0.0, "rcot_match": 0.0, "negative_point": 0.0}),
    # extra box: Σ IoU 1 ÷ max(2, 1)
    (answer(boxes=[GT_BOX, [40, 40, 50, 50]]), {"spatial": 0.5, "rcot_match": 0.5}),
    # missing box: none given → format half, spatial 0
    (answer(boxes=[]), {"format": 0.5, "spatial": 0.0, "consistency": 0.0}),
    # boxes (and points) out of the image: clipped to [12, 10, 56, 30] → IoU 400 / 880
    (answer(boxes=[[12, 10, 80, 30]], negative_point_2d_list=[[-5, 3], [70, 70], [15, 15]]),
     {"spatial": pytest.approx(400 / 880), "negative_point": 0.0}),
    (answer(boxes=[[100, 100, 200, 200]]), {"spatial": 0.0, "consistency": 0.0}),
    # repeated sentence in the reasoning
    (answer(think="It is red. It is red."), {"non_repeat": 0.0}),
    # tags not exact (text around) but the answer parses: format 0.5
    ("sure! " + answer(), {"format": 0.5, "spatial": 1.0}),
])
def test_components_literal(text, expected):
    result = score(text)
    for name, value in expected.items():
        assert result[name] == value, (name, result)
    assert result["score"] == pytest.approx(sum(result[n] for n in ALL.components))


@pytest.mark.parametrize(("text", "format_credit"), [
    ("", 0.0), ("no tags at all", 0.0),
    ("<answer>{not json}</answer>", 0.0),  # tags not exact: no credit
    # right tags around a broken answer JSON: the tag half, and the box half over well-formed entries
    ("<think>x</think><answer>{not json}</answer>", 0.5),
    ("<think>x</think><answer>{\"keyframe_timestamp\": 2}</answer>", 0.5),
    ("<think>x</think><answer>{\"keyframe_timestamp\": 2.5, \"bbox_2d_list\": []}</answer>", 0.5),
    ("<think>x</think><answer>{\"keyframe_timestamp\": 2.5, \"bbox_2d_list\": [[1, 2, 3, 4]]}</answer>", 1.0),
    ("<think>x</think><answer>{\"keyframe_timestamp\": 2, \"bbox_2d_list\": [[1, 2, 3]]}</answer>", 0.5),
    ("<think>x</think><answer>{\"keyframe_timestamp\": 2, \"bbox_2d_list\": [[1, 2, 3], [1, 2, 3, 4]]}</answer>",
     0.75),
    ("<think>x</think><answer>{\"keyframe_timestamp\": 2, \"bbox_2d_list\": [[1, 2, 3, NaN]]}</answer>", 0.5),
    ("<think>x</think><answer>{\"keyframe_timestamp\": true, \"bbox_2d_list\": []}</answer>", 0.5),
    ("<think>x</think><answer>{\"keyframe_timestamp\": 2, \"bbox_2d_list\": [], \"extra\": 1}</answer>", 0.5),
    ("<think>x</think><answer>"
     + json.dumps({"keyframe_timestamp": 2, "bbox_2d_list": [[0, 0, 1, 1]] * (MAX_BOXES + 1)}) + "</answer>", 0.5),
    ("<think>x</think><answer>" + "[" * 5000 + "</answer>", 0.5),
    (answer() + "x" * 1_000_000, 0.0),  # a megabyte of text: nothing, not even for the tags
    ("<answer>" * 200_000, 0.0),
])
def test_malformed_gets_failure_score_plus_format_credit(text, format_credit):
    params = replace(ALL, failure_score=-1.0)
    result = score(text, params=params)
    assert result["parsed"] == 0.0 and result["format"] == format_credit
    assert result["score"] == pytest.approx(-1.0 + format_credit)
    assert all(result[n] == 0.0 for n in ALL.components if n != "format")
    no_format = score(text, params=replace(params, components=("keyframe", "spatial")))
    assert no_format["score"] == -1.0


def test_inverted_boxes_lose_the_box_half():
    # corners swapped: parses, but the box is not well formed (and overlaps nothing after clipping)
    result = score(answer(boxes=[[32, 30, 12, 10]]))
    assert result["parsed"] == 1.0 and result["format"] == 0.5 and result["spatial"] == 0.0
    assert score(answer(boxes=[GT_BOX, [32, 30, 12, 10]]))["format"] == 0.75


def test_positive_failure_score_is_refused():
    with pytest.raises(ValueError, match="failure_score"):
        check_params(replace(ALL, failure_score=0.5))


def test_bad_ground_truth_raises():
    for bad in ["{", json.dumps({"timestamps": []}), json.dumps(ground_truth(keyframe_timestamp=5)),
                json.dumps(ground_truth(union_areas=[1.0])), json.dumps(ground_truth(aks_option="C"))]:
        with pytest.raises(ValueError):
            score(answer(), gt=bad)
    with pytest.raises(ValueError, match="no target area"):
        score(answer(), gt=json.dumps(ground_truth(union_areas=[0.0] * 4)))
    with pytest.raises(ValueError, match="aks_option"):
        score(answer(), gt=json.dumps(ground_truth(aks_option=None)))


def test_registry_refuses_unknown_names_and_consistency_needs_sam2():
    with pytest.raises(ValueError, match="unknown reward component"):
        resolve_components(["format", "iou"])
    with pytest.raises(RuntimeError, match="SAM2"):
        score(answer(), masks_for=None)


def test_weights_and_length_penalty():
    params = replace(ALL, components=("format", "spatial"), weights=RewardWeights(format=2.0, spatial=0.5),
                     length_penalty=True, length_beta=0.01)
    assert score(answer(), params=params, response_tokens=10)["score"] == pytest.approx(2.5)
    assert score(answer(), params=params, response_tokens=50)["score"] == pytest.approx(2.5 * 0.7)
    assert length_penalty(1000, 20, 0.01) == 0.0 and length_penalty(5, 20, 0.01) == 1.0
    assert max_score(params) == 2.5


def test_rcot_thresholds_scale_with_image_size():
    # 840-px thresholds at a 56-px image: box L1 < 10·56/840 ≈ 0.67 px, point < 2 px
    result = score(answer(boxes=[[12.5, 10, 32, 30]], point_2d_list=[[21, 20]]))
    assert result["rcot_match"] == pytest.approx(1.0)  # IoU .975 > .5, L1 .125, point (GT KTG [20,20]) 0.5
    result = score(answer(boxes=[[16, 10, 32, 30]]))  # IoU .8; L1 1 px; centre 2 px off
    assert result["rcot_match"] == pytest.approx(1 / 3)  # IoU only


def test_parse_answer_fields():
    a = parse_answer(answer(point_2d_list=[[1, 2]], option="B"))
    assert a.keyframe_timestamp == 2 and a.boxes == ((12.0, 10.0, 32.0, 30.0),) and a.points == ((1.0, 2.0),)
    assert a.option == "B" and a.well_formed and a.think == "The square is largest at 2s."
    assert not parse_answer("<think>a</think><think>b</think>" + answer()[len("<think>"):]).well_formed
    assert GroundTruth.from_json(GT).n_objects == 1


TEXT = st.one_of(
    st.text(max_size=300),
    st.builds(lambda t, b, th: answer(t=t, boxes=b, think=th),
              st.integers(-5, 10),
              st.lists(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=4, max_size=4), max_size=5),
              st.text(max_size=50)),
    st.builds(lambda a, b: a + b, st.sampled_from(["<think>", "<answer>", "</answer>", "{", ""]), st.text(max_size=80)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXT)
def test_fuzz_compute_score_never_raises_and_is_bounded(text):
    rng = np.random.default_rng(len(text))
    result = score(text, masks_for=lambda p, b: rng.random((4, 56, 56)) > 0.5)
    assert ALL.failure_score <= result["score"] <= max_score(ALL)
    assert all(0.0 <= result[n] <= 1.0 for n in ALL.components)


def test_grpo_advantage_with_verl_on_our_rewards():
    """verl's own compute_grpo_outcome_advantage: (r − group mean) / (group std + ε) on our scores."""
    torch = pytest.importorskip("torch")
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    texts = [answer(), answer(t=0, boxes=[[4, 10, 16, 22]]), answer(t=3), "garbage",  # prompt a
             answer(boxes=[[22, 10, 42, 30]]), answer(), answer(), answer()]  # prompt b
    params = replace(ALL, components=("format", "keyframe", "spatial"))
    scores = [r["score"] for r in score_group(texts[:4], GT, params)] + \
             [r["score"] for r in score_group(texts[4:], GT, params)]
    assert scores[:4] == [3.0, pytest.approx(1 + 144 / 400 + 1), 1.0, 0.0]
    length = 5
    token_rewards = torch.zeros(8, length)
    token_rewards[:, -1] = torch.tensor(scores)
    mask = torch.ones(8, length)
    index = np.array(["a"] * 4 + ["b"] * 4, dtype=object)
    adv, _ = core_algos.compute_grpo_outcome_advantage(token_rewards, mask, index)
    s = torch.tensor(scores)
    for group in (slice(0, 4), slice(4, 8)):
        g = s[group]
        expected = (g - g.mean()) / (g.std() + 1e-6)
        assert torch.allclose(adv[group, 0], expected, atol=1e-5)
    assert adv[0, 0] > 0 > adv[3, 0]  # the perfect answer is pushed up, the garbage down
