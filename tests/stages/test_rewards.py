"""Reward components on literal cases, compute_score's contract, fuzzing, and verl's GRPO advantage on our rewards."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.answer import MAX_BOXES, GroundTruth, parse_answer
from stages.core import rle
from stages.params.reward import RewardParams, RewardWeights
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


def perfect_masks(position, boxes, prompts=()):
    return np.stack(square_masks())


def score(text, params=ALL, gt=GT, masks_for=perfect_masks, **kw):
    return compute_score("vrsflow/revos", text, gt, None, params=params, masks_for=masks_for, **kw)


def gt_for(task: str, **overrides) -> str:
    return json.dumps(ground_truth(task=task, **overrides))


def ktg(boxes, points, think="The square is largest at 2s."):
    return f"<think>{think}</think><answer>{json.dumps({'bbox_2d_list': boxes, 'point_2d_list': points})}</answer>"


def videoseg(negatives, think="The square is largest at 2s.", boxes=None, points=None):
    data = {"bbox_2d_list": boxes or [GT_BOX], "point_2d_list": points or [[20, 20]],
            "negative_point_2d_list": negatives}
    return f"<think>{think}</think><answer>{json.dumps(data)}</answer>"


@pytest.mark.parametrize(("text", "expected"), [
    # Veason-R1: every component 1
    (answer(), {"format": 1.0, "keyframe": 1.0, "spatial": 1.0, "consistency": 1.0}),
    # partial overlap: box shifted by 10 px → IoU 200/600
    (answer(boxes=[[22, 10, 42, 30]]), {"spatial": pytest.approx(200 / 600), "keyframe": 1.0}),
    # wrong keyframe (shown, target smaller: 144 / 400), boxes compared with the boxes at that frame
    (answer(t=0, boxes=[[4, 10, 16, 22]]), {"keyframe": pytest.approx(144 / 400), "spatial": 1.0}),
    # a timestamp that was not shown: keyframe, spatial and consistency are 0
    (answer(t=3), {"format": 1.0, "keyframe": 0.0, "spatial": 0.0, "consistency": 0.0}),
    # extra box: Σ IoU 1 ÷ max(2, 1)
    (answer(boxes=[GT_BOX, [40, 40, 50, 50]]), {"spatial": 0.5}),
    # missing box: none given → format half, spatial 0
    (answer(boxes=[]), {"format": 0.5, "spatial": 0.0, "consistency": 0.0}),
    # boxes out of the image: clipped to [12, 10, 56, 30] → IoU 400 / 880
    (answer(boxes=[[12, 10, 80, 30]]), {"spatial": pytest.approx(400 / 880)}),
    (answer(boxes=[[100, 100, 200, 200]]), {"spatial": 0.0, "consistency": 0.0}),
    # tags not exact (text around) but the answer parses: format 0.5
    ("sure! " + answer(), {"format": 0.5, "spatial": 1.0}),
    # a key the Veason-R1 answer does not have: malformed (only the tag half of the format)
    (answer(option="A"), {"format": 0.5, "keyframe": 0.0, "spatial": 0.0}),
])
def test_veason_components_literal(text, expected):
    result = score(text)
    for name, value in expected.items():
        assert result[name] == value, (name, result)
    assert result["score"] == pytest.approx(sum(result[n] for n in ("format", "keyframe", "spatial", "consistency")))
    assert all(result[n] == 0.0 for n in ("rcot_match", "aks_option", "negative_point", "non_repeat"))


@pytest.mark.parametrize(("text", "overrides", "expected"), [
    # 840-px thresholds at a 56-px image: box L1 < 10·56/840 ≈ 0.67 px, point distance < 2 px
    (ktg([GT_BOX], [[20, 20]]), {}, 1.0),
    (ktg([[12.5, 10, 32, 30]], [[21, 20]]), {}, 1.0),  # IoU .975, L1 .125, point 1 px and inside
    (ktg([[16, 10, 32, 30]], [[24, 20]]), {}, 1 / 3),  # IoU .8; L1 1 px; point 4 px off
    (ktg([[22, 10, 42, 30]], [[27, 20]]), {}, 0.0),
    # regression: the point distance is Euclidean (√(1.5² + 1.5²) = 2.12 ≥ 2), not mean(|dx|, |dy|) = 1.5
    (ktg([GT_BOX], [[21.5, 21.5]]), {}, pytest.approx(2 / 3)),
    # regression: the point must lie inside the ground-truth box (1 px from the GT point, but left of x1 = 12)
    (ktg([GT_BOX], [[11.5, 20]]), {"points": [[12.5, 20.0]]}, pytest.approx(2 / 3)),
    (ktg([GT_BOX], [[13, 20]]), {"points": [[12.5, 20.0]]}, 1.0),
    # extra box: one perfect pair of three scores ÷ (3 · 2)
    (ktg([GT_BOX, [40, 40, 50, 50]], [[20, 20], [45, 45]]), {}, 0.5),
])
def test_rcot_match_literal(text, overrides, expected):
    result = score(text, gt=gt_for("rcot_ktg", **overrides))
    assert result["parsed"] == 1.0 and result["format"] == 1.0
    assert result["rcot_match"] == expected, result
    assert result["keyframe"] == result["spatial"] == 0.0  # not KTG components


def test_aks_option_weights():
    # RCoT-Seg AKS: λ_f = 1, λ_a = 2 (params default)
    option = "<think>The target is visible there.</think><answer>{{\"option\": \"{}\"}}</answer>"
    assert score(option.format("A"), gt=gt_for("rcot_aks"))["score"] == 3.0
    assert score(option.format("B"), gt=gt_for("rcot_aks"))["score"] == 1.0
    # an AKS answer under the Veason-R1 task is malformed: tag credit only
    assert score(option.format("A"))["score"] == 0.5


@pytest.mark.parametrize(("negatives", "expected"), [
    # the target at t = 2 fills x 12..31, y 10..29; τ_neg = 40 · 56/840 ≈ 2.67 px
    ([[10, 20]], 1.0),  # 2 px left of the target
    ([[10, 20], [5, 20]], 0.5),  # regression: 7 px away is beyond τ_neg (1/K per valid point)
    ([[20, 20]], 0.0),  # inside the target: distance 0
    ([[-5, 3], [70, 70]], 0.0),  # outside the image
    ([], 0.0),
])
def test_negative_point_band_and_one_over_k(negatives, expected):
    result = score(videoseg(negatives), gt=gt_for("videoseg"))
    assert result["parsed"] == 1.0 and result["negative_point"] == expected, result


def l1_gt(size: int = 200) -> str:
    """One shown frame of `size`² (thresholds unscaled: threshold_size = size) whose target fills x, y 50..99."""
    mask = np.zeros((size, size), dtype=bool)
    mask[50:100, 50:100] = True
    return json.dumps({"timestamps": [0], "image_size": [size, size], "boxes": [[[50.0, 50.0, 100.0, 100.0]]],
                       "areas": [[float(mask.sum())]], "union_areas": [float(mask.sum())],
                       "masks": [rle.encode(mask)], "keyframe_timestamp": 0, "points": [[75.0, 75.0]],
                       "task": "videoseg"})


@pytest.mark.parametrize(("negative", "expected"), [
    # 25 px right of and 25 px below the corner pixel (99, 99): L1 50 > τ_neg = 40, Euclidean 35.4 ≤ 40 → not valid
    ([124, 124], 0.0),
    ([119, 119], 1.0),  # L1 40 = τ_neg: valid (the band is closed at τ_neg)
    ([120, 119], 0.0),  # L1 41: not valid (Euclidean 29)
    ([139, 75], 1.0),  # straight right: L1 = Euclidean = 40
    ([140, 75], 0.0),  # 41
    ([100, 75], 1.0),  # the pixel next to the target: d = 1 > 0
    ([99, 75], 0.0),  # on the target's edge pixel: d = 0
    ([75, 10], 1.0),  # above: 40
    ([10, 10], 0.0),  # L1 80 from the corner (Euclidean 56.6)
])
def test_negative_point_uses_the_minimum_l1_distance(negative, expected):
    """VideoSeg-R1 (paper 004) measures the minimum L1 distance from the point to the target's pixels."""
    params = replace(ALL, components=("format", "rcot_match", "non_repeat", "negative_point"), threshold_size=200,
                     negative_point_tau=40.0)
    result = score(videoseg([negative], boxes=[[50, 50, 100, 100]], points=[[75, 75]]), params=params, gt=l1_gt())
    assert result["parsed"] == 1.0 and result["negative_point"] == expected, result


@pytest.mark.parametrize(("think", "expected"), [
    ("Look. It is red. It is red.", 1.0),  # one repeated sentence is tolerated (VisionReasoner; the first piece
    # carries "<think>", so the repeat must come after it)
    ("A. A. A. A.", 0.0),  # two repeats: 0
    ("A. B. C.", 1.0),
])
def test_non_repeat_counts_as_visionreasoner(think, expected):
    assert score(videoseg([[10, 20]], think=think), gt=gt_for("videoseg"))["non_repeat"] == expected


@pytest.mark.parametrize(("text", "format_credit"), [
    ("", 0.0), ("no tags at all", 0.0),
    ("<answer>{not json}</answer>", 0.0),  # tags not exact: no credit
    # right tags around a broken answer JSON: the tag half, and the box half over well-formed entries
    ("<think>x</think><answer>{not json}</answer>", 0.5),
    ("<think>x</think><answer>{\"keyframe_timestamp\": 2}</answer>", 0.5),
    ("<think>x</think><answer>{\"keyframe_timestamp\": 2.5, \"bbox_2d_list\": []}</answer>", 0.5),
    # regression: box credit only with an integer keyframe_timestamp (missing, 3.5, "3", 3.0: none), as released
    ("<think>x</think><answer>{\"keyframe_timestamp\": 2.5, \"bbox_2d_list\": [[1, 2, 3, 4]]}</answer>", 0.5),
    ("<think>x</think><answer>{\"keyframe_timestamp\": \"2\", \"bbox_2d_list\": [[1, 2, 3, 4]]}</answer>", 0.5),
    ("<think>x</think><answer>{\"keyframe_timestamp\": 2.0, \"bbox_2d_list\": [[1, 2, 3, 4]]}</answer>", 0.5),
    ("<think>x</think><answer>{\"bbox_2d_list\": [[1, 2, 3, 4]]}</answer>", 0.5),
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
                json.dumps(ground_truth(union_areas=[1.0])), json.dumps(ground_truth(aks_option="C")),
                json.dumps(ground_truth(task=""))]:
        with pytest.raises(ValueError):
            score(answer(), gt=bad)
    with pytest.raises(ValueError, match="unknown task"):
        score(answer(), gt=gt_for("rcot_kfx"))
    with pytest.raises(ValueError, match="aks_option"):
        score('<think>x</think><answer>{"option": "A"}</answer>', gt=gt_for("rcot_aks", aks_option=None))


def no_target_gt() -> str:
    """A no-target expression (ReVOS type 2): no object, empty masks in every shown frame."""
    empty = ground_truth()["masks"][3]  # frame 3 of the factory is empty
    return json.dumps(ground_truth(boxes=[[]] * 4, areas=[[]] * 4, union_areas=[0.0] * 4, masks=[empty] * 4,
                                   points=[]))


def test_no_target_ground_truth_scores_without_crashing():
    # regression (include_no_target_train: true crashed GRPO): the right answer is "no box" at a shown frame
    result = score(answer(boxes=[]), gt=no_target_gt(), masks_for=None)
    assert result == {"score": 4.0, "parsed": 1.0, "no_boxes": 1.0, "degenerate_boxes": 0.0, "format": 1.0,
                      "keyframe": 1.0, "spatial": 1.0,
                      "consistency": 1.0, "rcot_match": 0.0, "aks_option": 0.0, "negative_point": 0.0,
                      "non_repeat": 0.0}
    hallucinated = score(answer(boxes=[GT_BOX]), gt=no_target_gt(), masks_for=None)
    assert (hallucinated["spatial"], hallucinated["consistency"]) == (0.0, 0.0)
    assert score(answer(t=3, boxes=[]), gt=no_target_gt(), masks_for=None)["keyframe"] == 0.0
    grouped = score_group([answer(boxes=[]), answer(boxes=[GT_BOX])], no_target_gt(), ALL)
    assert [r["score"] for r in grouped] == [4.0, 2.0]


def test_registry_refuses_unknown_names_and_consistency_needs_sam2():
    with pytest.raises(ValueError, match="unknown reward component"):
        resolve_components(["format", "iou"])
    with pytest.raises(RuntimeError, match="SAM2"):
        score(answer(), masks_for=None)


def test_weights_and_length_penalty():
    params = replace(ALL, components=("format", "spatial"), weights=RewardWeights(format=2.0, spatial=0.5),
                     length_penalty=True, length_beta=0.01)
    # the budget is 20 reasoning tokens; counted as whitespace words of <think> (reward.length_tokenizer "")
    assert score(answer(), params=params)["score"] == pytest.approx(2.5)
    long_think = " ".join(["word"] * 50)
    assert score(answer(think=long_think), params=params)["score"] == pytest.approx(2.5 * 0.7)
    # only the reasoning counts, not the answer JSON around it (the same count in both engines)
    many_boxes = answer(think=" ".join(["w"] * 20), boxes=[GT_BOX] * 30)
    assert score(many_boxes, params=params)["length_penalty"] == 1.0
    assert length_penalty(1000, 20, 0.01) == 0.0 and length_penalty(5, 20, 0.01) == 1.0
    assert max_score(params) == 2.5


def test_parse_answer_fields():
    from schemas.answer import BOXES_POINTS_NEGATIVE, OPTION

    a = parse_answer(answer())
    assert a.keyframe_timestamp == 2 and a.boxes == ((12.0, 10.0, 32.0, 30.0),) and a.points is None
    assert a.well_formed and a.think == "The square is largest at 2s."
    assert parse_answer(answer(option="B")) is None  # not a key of the Veason-R1 answer
    assert parse_answer(answer(t=2.0)) is None and parse_answer(answer(t="2")) is None
    assert not parse_answer("<think>a</think><think>b</think>" + answer()[len("<think>"):]).well_formed
    v = parse_answer(videoseg([[10, 20]]), BOXES_POINTS_NEGATIVE)
    assert v.points == ((20.0, 20.0),) and v.negative_points == ((10.0, 20.0),) and v.keyframe_timestamp is None
    assert parse_answer(videoseg([[10, 20]], points=[[1, 1], [2, 2]]), BOXES_POINTS_NEGATIVE) is None  # 1 per box
    assert parse_answer('<think>x</think><answer>{"option": "C"}</answer>', OPTION) is None
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


def test_videoseg_points_prompt_sam2_with_the_boxes(tmp_path, monkeypatch):
    """VideoSeg-R1: a rollout's positive point (label 1) and negative points (label 0) reach SAM2's own predictor
    with its box corners (labels 2, 3), at SAM2's input scale; padding uses SAM2's "not a point" label −1."""
    torch = pytest.importorskip("torch")
    from stages.rewards import precompute_masks
    from stages.sam2_wrapper import load_video_predictor
    from stages.tiny_models.tiny_sam2 import build_tiny_sam2
    from tests.stages.grpo_factory import frames

    checkpoint, config = build_tiny_sam2(tmp_path, image_size=128, seed=0)
    predictor = load_video_predictor(str(checkpoint), str(config), device="cpu")
    seen = []
    original = predictor._run_single_frame_inference

    def spy(**kw):
        if kw.get("point_inputs") is not None:
            seen.append({k: v.clone() for k, v in kw["point_inputs"].items()})
        return original(**kw)

    monkeypatch.setattr(predictor, "_run_single_frame_inference", spy)
    gt = GroundTruth.from_json(gt_for("videoseg"))
    texts = [videoseg([[10, 20], [5, 20]]), videoseg([], boxes=[GT_BOX], points=[[20, 20]])]
    masks_for = precompute_masks(texts, gt, frames(), predictor)
    labels = sorted(tuple(int(v) for v in row) for call in seen for row in call["point_labels"])
    assert labels == [(2, 3, 1, -1, -1), (2, 3, 1, 0, 0)]  # both rollouts tracked as one batch, padded
    coords = next(call["point_coords"] for call in seen)
    scale = 128 / 56
    row = [i for i, r in enumerate(seen[0]["point_labels"]) if int(r[3]) == 0][0]
    expected = torch.tensor([[12, 10], [32, 30], [20, 20], [10, 20], [5, 20]], dtype=torch.float32) * scale
    assert torch.allclose(coords[row], expected)
    result = masks_for(1, (tuple(map(float, GT_BOX)),), (((20.0, 20.0, 1), (10.0, 20.0, 0), (5.0, 20.0, 0)),))
    assert result.shape == (4, 56, 56)  # position 1: the keyframe (t = 2s) the videoseg task shows


@pytest.mark.parametrize(("boxes", "no_boxes", "degenerate"), [
    ([GT_BOX], 0.0, 0.0),
    ([], 1.0, 0.0),
    ([[32, 10, 12, 30]], 0.0, 1.0),  # x2 < x1
    ([[12, 10, 32, 10], [12, 10, 12, 30]], 0.0, 1.0),  # zero height, zero width
    ([[100, 100, 120, 120]], 0.0, 1.0),  # wholly outside the 56-px frame
    ([[32, 10, 12, 30], GT_BOX], 0.0, 0.0),  # one box with an area is enough for a mask
])
def test_answers_without_boxes_and_with_degenerate_boxes_are_flagged_apart(boxes, no_boxes, degenerate) -> None:
    """The flags beside the score (the GRPO log's `no_boxes` / `degenerate_boxes`), as the evaluation counts them;
    the score itself does not read them."""
    result = score(answer(boxes=boxes))
    assert (result["parsed"], result["no_boxes"], result["degenerate_boxes"]) == (1.0, no_boxes, degenerate)
    assert score("garbage")["no_boxes"] == score("garbage")["degenerate_boxes"] == 0.0  # unparsed: neither


def test_trl_reward_logs_the_share_of_rollouts_without_and_with_degenerate_boxes() -> None:
    from stages.grpo.trl_engine import COMPONENT_PREFIX, GroupReward

    logged: dict[str, float] = {}
    texts = [answer(), answer(boxes=[]), answer(boxes=[[32, 10, 12, 30]]), answer(boxes=[[32, 10, 12, 30]])]
    reward = GroupReward(RewardParams(components=("format", "keyframe", "spatial")))  # no SAM2 here
    reward(prompts=[None] * 4, completions=texts, ground_truth=[GT] * 4, sample_id=["s"] * 4,
           log_metric=lambda key, value: logged.__setitem__(key, value))
    assert logged[f"{COMPONENT_PREFIX}no_boxes"] == 0.25 and logged[f"{COMPONENT_PREFIX}degenerate_boxes"] == 0.5
