"""Reward rules that the mutation run (scripts/mutation.sh rewards, docs/testing.md) found unpinned.

Each test states a rule of stages/rewards with a literal value or a property against an independent oracle
(brute force over pixels, hashlib by hand), so that a changed constant, bound or operator fails it.
"""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from stages.core import rle
from stages.params.reward import RewardParams, RewardWeights
from stages.rewards import check_params, compute_score, length_penalty, reasoning_counter
from stages.rewards import score as score_module
from stages.rewards.geometry import box_centres
from stages.rewards.verl_entry import rollout_key


def one_frame_gt(mask: np.ndarray, task: str = "videoseg", points: list | None = None,
                 boxes: list | None = None) -> str:
    """GroundTruth JSON of one shown frame (timestamp 0) whose union target is `mask`."""
    height, width = mask.shape
    ys, xs = np.nonzero(mask)
    box = [float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)] if len(xs) else None
    return json.dumps({"timestamps": [0], "image_size": [height, width], "boxes": [boxes or [box]],
                       "areas": [[float(mask.sum())] * len(boxes or [box])], "union_areas": [float(mask.sum())],
                       "masks": [rle.encode(mask)], "keyframe_timestamp": 0,
                       "points": points if points is not None else [], "task": task})


def completion(**payload) -> str:
    return f"<think>Look at the frame.</think><answer>{json.dumps(payload)}</answer>"


def run(text: str, gt: str, **params) -> dict[str, float]:
    return compute_score("vrsflow/revos", text, gt, None, params=RewardParams(**params))


# --- negative points: the minimum L1 distance, against a brute-force oracle ---------------------------------


def oracle_negative_reward(mask: np.ndarray, points: list, tau: float) -> float:
    """1/K per point inside the image whose pixel's minimum |dx| + |dy| to a target pixel is in (0, tau]."""
    height, width = mask.shape
    ys, xs = np.nonzero(mask)
    valid = 0
    for x, y in points:
        if 0 <= x < width and 0 <= y < height:
            d = np.min(np.abs(xs - int(x)) + np.abs(ys - int(y)))
            valid += bool(0 < d <= tau)
    return valid / len(points)


coordinate = st.one_of(st.integers(-3, 27), st.floats(-3, 27, allow_nan=False))


@settings(max_examples=60, deadline=None)
@given(st.integers(3, 24), st.integers(3, 24), st.tuples(*[st.integers(0, 23)] * 4),
       st.lists(st.tuples(coordinate, coordinate), min_size=1, max_size=4), st.integers(1, 30),
       st.sampled_from([1.0, 2.0, 0.5]))
@example(10, 12, (0, 10, 0, 3), [(0, 0), (11.9, 9.9), (12, 5), (5, 10), (-0.5, 2)], 5, 1.0)  # image edges
@example(10, 12, (2, 5, 9, 12), [(-1, 3), (12, 3), (3, -1), (3, 10)], 30, 1.0)  # just outside every edge
def test_negative_point_reward_equals_the_brute_force_l1_oracle(height, width, rect, points, tau, scale):
    y1, y2 = sorted((rect[0] % height, rect[1] % height))
    x1, x2 = sorted((rect[2] % width, rect[3] % width))
    mask = np.zeros((height, width), dtype=bool)
    mask[y1:y2 + 1, x1:x2 + 1] = True
    threshold_size = max(height, width) * scale  # thresholds scale by max(image) / threshold_size = 1 / scale
    result = run(completion(bbox_2d_list=[[x1, y1, x2 + 1, y2 + 1]], point_2d_list=[[x1, y1]],
                            negative_point_2d_list=[list(p) for p in points]),
                 one_frame_gt(mask), components=("negative_point",), negative_point_tau=float(tau),
                 threshold_size=threshold_size)
    assert result["negative_point"] == pytest.approx(oracle_negative_reward(mask, points, tau / scale))


def test_negative_point_reward_without_a_target_is_zero():
    empty = np.zeros((20, 20), dtype=bool)
    text = completion(bbox_2d_list=[], point_2d_list=[], negative_point_2d_list=[[3, 3], [10, 10]])
    gt = json.loads(one_frame_gt(empty))
    gt["boxes"], gt["areas"] = [[None]], [[0.0]]
    assert run(text, json.dumps(gt), components=("negative_point",))["negative_point"] == 0.0


# --- non-repeat: VisionReasoner tolerates exactly one repeated sentence --------------------------------------


@pytest.mark.parametrize(("think", "expected"), [
    ("Look. It is red. It is red.", 1.0),  # one repeat (the first piece carries "<think>")
    ("Look. It is red. It is red. It is red.", 0.0),  # two repeats
    ("Look. A. B. A. B.", 0.0),  # two different sentences repeated once each
    ("Look.. It is red. It is red. It is red.", 0.0),  # a blank piece is skipped, not the end of the count
])
def test_non_repeat_tolerates_one_repeat(think, expected):
    text = (f"<think>{think}</think><answer>"
            + json.dumps({"bbox_2d_list": [], "point_2d_list": [], "negative_point_2d_list": []}) + "</answer>")
    assert run(text, one_frame_gt(np.ones((4, 4), bool)), components=("non_repeat",))["non_repeat"] == expected


# --- rcot_match: the ground-truth point per object ------------------------------------------------------------


@pytest.mark.parametrize(("gt_points", "pred_point", "expected"), [
    ([], [15, 15], 1.0),  # no KTG point stored: the box centre (15, 15) stands in
    ([], [19, 19], 2 / 3),  # 5.7 px from the centre (threshold 30 · 40/840 = 1.43 px)
    ([None], [15, 15], 1.0),  # a missing point: the box centre
    ([[12.0, 12.0]], [12, 12], 1.0),  # the stored point, not the centre
    ([[12.0, 12.0]], [15, 15], 2 / 3),
])
def test_rcot_match_point_falls_back_to_the_box_centre(gt_points, pred_point, expected):
    mask = np.zeros((40, 40), dtype=bool)
    mask[10:20, 10:20] = True
    text = completion(bbox_2d_list=[[10, 10, 20, 20]], point_2d_list=[pred_point])
    result = run(text, one_frame_gt(mask, task="rcot_ktg", points=gt_points), components=("rcot_match",))
    assert result["rcot_match"] == pytest.approx(expected)


def test_box_centres_literal():
    boxes = np.array([[0.0, 0.0, 10.0, 20.0], [4.0, 6.0, 8.0, 10.0], [3.0, 1.0, 3.0, 1.0]])
    assert box_centres(boxes).tolist() == [[5.0, 10.0], [6.0, 8.0], [3.0, 1.0]]
    assert box_centres(np.zeros((0, 4))).shape == (0, 2)


# --- params checks and the length penalty ---------------------------------------------------------------------


def test_check_params_accepts_the_boundary_values():
    check_params(RewardParams(components=("format", "spatial"), weights=RewardWeights(format=0.0, spatial=0.5),
                              failure_score=0.0, length_beta=0.0, threshold_size=1, negative_point_tau=0.5))


SIZES = "reward.length_beta must be ≥ 0, reward.threshold_size and reward.negative_point_tau > 0"


@pytest.mark.parametrize(("overrides", "message"), [
    ({"weights": RewardWeights(format=-0.1)}, "reward.weights.format must be ≥ 0"),
    ({"failure_score": 0.1},
     "reward.failure_score must be ≤ 0 (a malformed completion must not outscore a wrong one)"),
    ({"length_beta": -0.001}, SIZES), ({"threshold_size": 0}, SIZES), ({"negative_point_tau": 0.0}, SIZES),
])
def test_check_params_refuses_each_bad_value_with_its_message(overrides, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        check_params(RewardParams(**overrides))


@pytest.mark.parametrize(("used", "budget", "beta", "expected"), [
    (20, 20, 0.5, 1.0), (19, 20, 0.5, 1.0), (21, 20, 0.1, 0.9), (30, 20, 0.05, 0.5), (40, 20, 0.1, 0.0),
    (30, 20, -0.1, 1.0),  # clipped to [0, 1] whatever β
    (30, 20, 0.0, 1.0),
])
def test_length_penalty_literals(used, budget, beta, expected):
    assert length_penalty(used, budget, beta) == pytest.approx(expected)


def test_reasoning_counter_uses_the_named_tokenizer(monkeypatch):
    asked = []
    monkeypatch.setattr(score_module, "tokenizer_counter", lambda path: asked.append(path) or (lambda text: 99))
    assert reasoning_counter(RewardParams(length_tokenizer="models/tok"))("two words") == 99
    assert asked == ["models/tok"]
    assert reasoning_counter(RewardParams(length_tokenizer=""))("two words here") == 3


# --- verl's reward log join key -------------------------------------------------------------------------------


def test_rollout_key_literal():
    assert rollout_key("abc", '{"b":1}') == hashlib.sha1(b'abc\x00{"b":1}').hexdigest()
    # a dict ground truth is keyed by its sorted-key JSON, so the key does not depend on insertion order
    assert rollout_key("abc", {"b": 1, "a": [2]}) == hashlib.sha1(b'abc\x00{"a": [2], "b": 1}').hexdigest()
    assert rollout_key("abc", {"a": [2], "b": 1}) == rollout_key("abc", '{"a": [2], "b": 1}')


# --- rcot_match: each threshold is strict, the point's box test includes the box's edges ----------------------


def square_gt(x2: int, y2: int, size: int = 100) -> str:
    mask = np.zeros((size, size), dtype=bool)
    mask[0:y2, 0:x2] = True
    return one_frame_gt(mask, task="rcot_ktg")  # no KTG point: the box centre


@pytest.mark.parametrize(("gt_box", "box", "point", "expected"), [
    ((20, 20), [0, 0, 20, 10], [10, 5], 2 / 3),  # IoU exactly 0.5: not > 0.5
    ((20, 20), [10, 10, 30, 30], [10, 10], 1 / 3),  # box L1 exactly 10: not < 10 (IoU 100/700)
    ((80, 80), [0, 0, 80, 80], [70, 40], 2 / 3),  # point exactly 30 px from the centre: not < 30
    ((80, 80), [0, 0, 80, 80], [69.5, 40], 1.0),
    ((40, 40), [0, 0, 40, 40], [40, 20], 1.0),  # on the right edge x = x2: inside
    ((40, 40), [0, 0, 40, 40], [0, 20], 1.0),  # on the left edge
    ((40, 40), [0, 0, 40, 40], [20, 40], 1.0),  # on the bottom edge
    ((40, 40), [0, 0, 40, 40], [20, 0], 1.0),  # on the top edge
    ((40, 40), [0, 0, 40, 40], [40.5, 20], 2 / 3),  # just outside
])
def test_rcot_match_thresholds_are_strict_and_box_edges_count_as_inside(gt_box, box, point, expected):
    text = completion(bbox_2d_list=[box], point_2d_list=[point])
    result = run(text, square_gt(*gt_box), components=("rcot_match",), threshold_size=100)
    assert result["rcot_match"] == pytest.approx(expected)


def test_aks_option_without_ground_truth_option_names_the_data_bug():
    mask = np.ones((4, 4), dtype=bool)
    gt = json.loads(one_frame_gt(mask, task="rcot_aks"))
    gt["aks_option"] = None
    text = '<think>It is there.</think><answer>{"option": "A"}</answer>'
    message = "aks_option reward on a sample whose ground truth has no aks_option"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        run(text, json.dumps(gt), components=("aks_option",))


# --- the grouped scorer (TRL): SAM2 once per prompt, each distinct request once ------------------------------


def _videoseg_gt() -> tuple[np.ndarray, str]:
    mask = np.zeros((20, 30), dtype=bool)
    mask[5:15, 10:20] = True
    return mask, one_frame_gt(mask, task="videoseg")


GROUP_TEXTS = [
    "garbage",  # does not parse: no request
    completion(bbox_2d_list=[[10, 5, 20, 15]], point_2d_list=[[15, 10]], negative_point_2d_list=[[2, 2]]),
    completion(bbox_2d_list=[[25, 16, 30, 20]], point_2d_list=[[27, 18]], negative_point_2d_list=[]),  # no overlap
    completion(bbox_2d_list=[[12, 5, 20, 15], [0, 0, 2, 2]], point_2d_list=[[14, 9], [1, 1]],
               negative_point_2d_list=[]),  # the second box matches nothing
    completion(bbox_2d_list=[[10, 5, 20, 15]], point_2d_list=[[15, 10]], negative_point_2d_list=[[2, 2]]),  # repeat
]
REQUEST_A = (0, ((10.0, 5.0, 20.0, 15.0),), (((15.0, 10.0, 1), (2.0, 2.0, 0)),))
REQUEST_B = (0, ((12.0, 5.0, 20.0, 15.0),), (((14.0, 9.0, 1),),))


def test_rollout_groups_names_each_rollouts_request():
    from schemas.answer import GroundTruth

    gt = GroundTruth.from_json(_videoseg_gt()[1])
    assert score_module.rollout_groups(GROUP_TEXTS, gt) == [None, REQUEST_A, None, REQUEST_B, REQUEST_A]


class FakePropagation:
    """Stands in for `stages.sam2_wrapper.propagate_groups`: records its calls; group i's masks are (2 objects, 1 frame,
    H, W) with one pixel each, so the union over objects is known."""

    def __init__(self):
        self.calls = []

    @staticmethod
    def masks(i: int) -> np.ndarray:
        out = np.zeros((2, 1, 20, 30), dtype=bool)
        out[0, 0, i, 0] = True
        out[1, 0, 0, i + 3] = True
        return out

    def __call__(self, predictor, frames, groups, threshold=0.0):
        self.calls.append((predictor, frames, list(groups), threshold))
        return [self.masks(i) for i in range(len(groups))]


def test_precompute_masks_propagates_each_distinct_request_once(monkeypatch):
    from schemas.answer import GroundTruth
    from stages import sam2_wrapper
    from stages.rewards import precompute_masks

    fake = FakePropagation()
    monkeypatch.setattr(sam2_wrapper, "propagate_groups", fake)
    gt = GroundTruth.from_json(_videoseg_gt()[1])
    frames, predictor = [np.zeros((20, 30, 3), np.uint8)], object()
    masks_for = precompute_masks(GROUP_TEXTS, gt, frames, predictor)
    assert len(fake.calls) == 1
    got_predictor, got_frames, groups, threshold = fake.calls[0]
    assert got_predictor is predictor and got_frames is frames and threshold == 0.0  # SAM2's own threshold
    assert groups == [sam2_wrapper.BoxGroup(0, [(10.0, 5.0, 20.0, 15.0)], [[(15.0, 10.0, 1), (2.0, 2.0, 0)]]),
                      sam2_wrapper.BoxGroup(0, [(12.0, 5.0, 20.0, 15.0)], [[(14.0, 9.0, 1)]])]
    for i, request in enumerate((REQUEST_A, REQUEST_B)):
        union = masks_for(*request)
        assert union.shape == (1, 20, 30)  # the union over the objects, per frame
        assert set(zip(*np.nonzero(union), strict=True)) == {(0, 0, i + 3), (0, i, 0)}

    precompute_masks(GROUP_TEXTS, gt, frames, predictor, threshold=0.25)
    assert fake.calls[1][3] == 0.25
    precompute_masks(["garbage", GROUP_TEXTS[2]], gt, frames, predictor)  # no request: SAM2 is not run
    assert len(fake.calls) == 2


def test_precompute_masks_refuses_frames_of_another_size():
    from schemas.answer import GroundTruth
    from stages.rewards import precompute_masks

    gt = GroundTruth.from_json(_videoseg_gt()[1])
    frames = [np.zeros((21, 30, 3), np.uint8), np.zeros((20, 30, 3), np.uint8)]  # the first frame decides
    message = "frames are (21, 30), ground truth image_size is [20, 30]"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        precompute_masks(GROUP_TEXTS, gt, frames, object())


def test_score_group_runs_sam2_only_for_a_consistency_task_with_frames_and_predictor(monkeypatch):
    from schemas.answer import GroundTruth
    from stages.rewards import score_group

    mask, gt_json = _videoseg_gt()
    calls = []

    def fake(texts, gt, frames, predictor, threshold):
        calls.append((list(texts), gt, frames, predictor, threshold))
        return lambda position, boxes, prompts=(): mask[None]  # the ground truth itself: consistency 1

    monkeypatch.setattr(score_module, "precompute_masks", fake)
    params = RewardParams(components=("format", "consistency"), mask_threshold=0.3)
    texts, frames, predictor = GROUP_TEXTS[1:2], [np.zeros((20, 30, 3), np.uint8)], object()
    results = score_group(texts, gt_json, params, frames=frames, predictor=predictor)
    assert calls == [(texts, GroundTruth.from_json(gt_json), frames, predictor, 0.3)]
    assert [(r["format"], r["consistency"], r["score"]) for r in results] == [(1.0, 1.0, 2.0)]
    segmenter = "^" + re.escape("the consistency reward needs a SAM2 segmenter (masks_for); none was configured") + "$"
    for missing in ({"frames": None, "predictor": predictor}, {"frames": frames, "predictor": None}):
        with pytest.raises(RuntimeError, match=segmenter):  # nothing to segment with: not run, and said so
            score_group(texts, gt_json, params, **missing)
    ktg = one_frame_gt(mask, task="rcot_ktg")  # a task without the consistency component
    score_group([completion(bbox_2d_list=[[10, 5, 20, 15]], point_2d_list=[[15, 10]])], ktg, params, frames=frames,
                predictor=predictor)
    assert len(calls) == 1


# --- verl's entry: params from the file, the SAM2 service, one log line per rollout ------------------------------


def _params_file(folder, **reward) -> str:
    import yaml

    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump({"reward": reward}))
    score_module._params_from.cache_clear()
    return str(path)


@pytest.fixture
def fresh_params_cache():
    score_module._params_from.cache_clear()
    yield
    score_module._params_from.cache_clear()


def test_verl_entry_logs_one_sorted_json_line_per_rollout(tmp_path, fresh_params_cache):
    import os
    import socket

    from stages.rewards import verl_entry

    path = _params_file(tmp_path, components=["format", "non_repeat"])
    mask, gt_json = _videoseg_gt()
    log_dir = tmp_path / "logs" / "step"  # its parent does not exist yet
    texts = [GROUP_TEXTS[1], "garbage"]
    results = [verl_entry.compute_score("vrsflow/revos", t, gt_json, None, params_path=path, log_dir=str(log_dir))
               for t in texts]
    assert results == [compute_score("vrsflow/revos", t, gt_json, None, params_path=path) for t in texts]
    # the file's components, not the defaults, beside the answer flags
    assert set(results[0]) == {"score", "parsed", "no_boxes", "degenerate_boxes", "format", "non_repeat"}
    log = log_dir / f"reward-{socket.gethostname()}-{os.getpid()}.jsonl"
    assert [p.name for p in log_dir.iterdir()] == [log.name]
    lines = log.read_text().splitlines(keepends=True)
    seconds = [json.loads(line)["reward_s"] for line in lines]  # each call's own time (the bench's reward share)
    assert all(isinstance(t, float) and 0 <= t < 60 for t in seconds)
    expected = "".join(json.dumps({"key": rollout_key(t, gt_json), "reward_s": sec, **r}, sort_keys=True) + "\n"
                       for t, r, sec in zip(texts, results, seconds, strict=True))
    assert "".join(lines) == expected  # appended, one line each, keys sorted


def test_verl_entry_reads_params_yaml_in_its_folder_and_logs_nothing_by_default(tmp_path, monkeypatch,
                                                                                fresh_params_cache):
    from stages.rewards import verl_entry

    _params_file(tmp_path, components=["non_repeat"])
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.iterdir())
    result = verl_entry.compute_score("vrsflow/revos", GROUP_TEXTS[1], _videoseg_gt()[1])
    assert result == {"score": 1.0, "parsed": 1.0, "no_boxes": 0.0, "degenerate_boxes": 0.0, "non_repeat": 1.0}
    assert sorted(tmp_path.iterdir()) == before  # no log folder, no log file


def test_verl_entry_needs_the_sam2_service_and_the_sample_id_for_consistency(tmp_path, monkeypatch,
                                                                             fresh_params_cache):
    from stages.rewards import sam2_service, verl_entry

    path = _params_file(tmp_path, components=["consistency"])
    mask, gt_json = _videoseg_gt()
    asked = []
    monkeypatch.setattr(sam2_service, "ray_masks_for",
                        lambda name, sid: asked.append((name, sid)) or (lambda *a: mask[None]))
    message = ("the consistency reward under verl needs reward_kwargs.sam2_service and extra_info.sample_id in the "
               "parquet")
    for extra, service in ((None, "sam2"), ({"sample_id": 7}, ""), ({"other": 1}, "sam2")):
        with pytest.raises(RuntimeError, match=f"^{re.escape(message)}$"):
            verl_entry.compute_score("vrsflow/revos", GROUP_TEXTS[1], gt_json, extra, params_path=path,
                                     sam2_service=service)
    with pytest.raises(RuntimeError, match=f"^{re.escape(message)}$"):  # the service is not on by default
        verl_entry.compute_score("vrsflow/revos", GROUP_TEXTS[1], gt_json, {"sample_id": 7}, params_path=path)
    assert asked == []
    result = verl_entry.compute_score("vrsflow/revos", GROUP_TEXTS[1], gt_json, {"sample_id": 7}, params_path=path,
                                      sam2_service="vrsflow-sam2")
    assert asked == [("vrsflow-sam2", "7")] and result["consistency"] == 1.0


# --- VideoSeg-R1's SAM2 prompts: each negative point goes to the nearest matched box ----------------------------


def nearest_box_oracle(boxes: list, x: int, y: int) -> int:
    """Index of the box nearest to (x, y) in straight-line distance (0 inside or on it); the first on a tie."""
    gaps = []
    for x1, y1, x2, y2 in boxes:
        dx, dy = x - min(max(x, x1), x2), y - min(max(y, y1), y2)
        gaps.append(dx * dx + dy * dy)
    return gaps.index(min(gaps))


BOX = st.tuples(st.integers(0, 40), st.integers(0, 40), st.integers(1, 20), st.integers(1, 20)).map(
    lambda b: (b[0], b[1], b[0] + b[2], b[1] + b[3]))


@settings(max_examples=80, deadline=None)
@given(st.lists(BOX, min_size=1, max_size=4), st.data(),
       st.lists(st.tuples(st.integers(-10, 70), st.integers(-10, 70)), max_size=5))
@example([(0, 0, 10, 10), (20, 0, 30, 10)], None, [(13, 3), (16, 3), (5, 5), (15, 30)])  # even gap: the first
@example([(0, 0, 10, 10), (13, 12, 20, 20)], None, [(13, 10)])  # 3 px right of one, 2 px above the other
@example([(0, 0, 10, 10), (12, 14, 20, 20)], None, [(12.5, 10)])  # 2.5 px right (6.25) vs 4 px above (16)
@example([(0, 0, 10, 10), (10, 0, 20, 10)], None, [(10, 5), (10.5, 5)])  # on both edges; inside the second
def test_prompt_points_send_each_negative_point_to_the_nearest_matched_box(boxes, data, negatives):
    from types import SimpleNamespace

    from stages.rewards.components import Match, prompt_points

    rows = sorted(data.draw(st.sets(st.integers(0, len(boxes) - 1), min_size=1)) if data else range(len(boxes)))
    positives = [(float(10 * i + 1), float(i + 2)) for i in range(len(boxes))]
    match = Match(0, np.asarray(boxes, dtype=np.float64), np.zeros((0, 4)), (), np.asarray(rows[::-1]),
                  np.zeros(len(rows), dtype=int), np.zeros((len(boxes), 0)))
    answer = SimpleNamespace(points=positives, negative_points=[list(p) for p in negatives])
    expected = [[(*positives[r], 1)] for r in rows]
    for x, y in negatives:
        expected[nearest_box_oracle([boxes[r] for r in rows], x, y)].append((float(x), float(y), 0))
    assert prompt_points(answer, match) == tuple(tuple(p) for p in expected)
    # positives alone, negatives alone, neither
    assert prompt_points(SimpleNamespace(points=positives, negative_points=None), match) == tuple(
        ((*positives[r], 1),) for r in rows)
    if negatives:
        alone = prompt_points(SimpleNamespace(points=None, negative_points=negatives), match)
        assert alone == tuple(tuple(p[1:]) for p in expected)
    assert prompt_points(SimpleNamespace(points=None, negative_points=[]), match) == ()


def test_consistency_asks_the_segmenter_with_the_prompts_only_when_the_answer_has_points():
    mask, gt_json = _videoseg_gt()
    calls = []

    def masks_for(*args):
        calls.append(args)
        return mask[None]

    videoseg_text = GROUP_TEXTS[1]
    result = compute_score("vrsflow/revos", videoseg_text, gt_json, None, masks_for=masks_for,
                           params=RewardParams(components=("consistency",)))
    assert result["consistency"] == 1.0 and calls == [REQUEST_A]
    calls.clear()
    veason = json.loads(one_frame_gt(mask, task="veason"))
    text = '<think>It is there.</think><answer>{"keyframe_timestamp": 0, "bbox_2d_list": [[10, 5, 20, 15]]}</answer>'
    result = compute_score("vrsflow/revos", text, json.dumps(veason), None, masks_for=masks_for,
                           params=RewardParams(components=("consistency",)))
    assert result["consistency"] == 1.0 and calls == [(0, ((10.0, 5.0, 20.0, 15.0),))]  # boxes alone
    half = np.zeros_like(mask)
    half[5:15, 10:15] = True  # half the target: IoU 0.5
    result = compute_score("vrsflow/revos", text, json.dumps(veason), None, masks_for=lambda *a: half[None],
                           params=RewardParams(components=("consistency",)))
    assert result["consistency"] == 0.5
    two = "segmenter returned 2 frames for 1 shown frames"
    with pytest.raises(RuntimeError, match=f"^{two}$"):
        compute_score("vrsflow/revos", text, json.dumps(veason), None, masks_for=lambda *a: np.stack([mask, mask]),
                      params=RewardParams(components=("consistency",)))
    far = text.replace("[[10, 5, 20, 15]]", "[[22, 16, 30, 20]]")  # no overlap: nothing to propagate, 0
    result = compute_score("vrsflow/revos", far, json.dumps(veason), None, masks_for=masks_for,
                           params=RewardParams(components=("consistency",)))
    assert result["consistency"] == 0.0 and len(calls) == 1


def test_keyframe_reward_on_a_one_pixel_target():
    gt = json.loads(one_frame_gt(np.pad(np.ones((1, 1), bool), ((3, 4), (2, 5)))))
    empty = rle.encode(np.zeros((8, 8), bool))
    gt.update(timestamps=[0, 1], boxes=gt["boxes"] + [[None]], areas=[[1.0], [0.0]], union_areas=[1.0, 0.0],
              masks=gt["masks"] + [empty])
    for t, expected in ((0, 1.0), (1, 0.0)):  # the target's largest area is 1 pixel
        text = completion(keyframe_timestamp=t, bbox_2d_list=[[2, 3, 3, 4]])
        assert run(text, json.dumps({**gt, "task": "veason"}), components=("keyframe",))["keyframe"] == expected


# --- geometry literals --------------------------------------------------------------------------------------------


def test_clip_boxes_areas_and_iou_literals():
    from stages.rewards.geometry import box_areas, clip_boxes, iou_matrix, mask_iou

    clipped = clip_boxes([[-5, -3, 70, 80], [10, 50, 5, 20]], height=40, width=60)
    assert clipped.tolist() == [[0.0, 0.0, 60.0, 40.0], [10.0, 40.0, 5.0, 20.0]]  # swapped corners stay swapped
    assert box_areas(clipped).tolist() == [2400.0, 0.0]
    assert box_areas(np.array([[0.0, 0.0, 3.0, 4.0], [5.0, 1.0, 2.0, 9.0], [1.0, 9.0, 4.0, 2.0]])).tolist() == [
        12.0, 0.0, 0.0]
    pred = np.array([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.5, 0.5]])
    gt = np.array([[5.0, 0.0, 15.0, 10.0], [2.0, 2.0, 2.0, 2.0], [0.0, 0.0, 0.5, 0.5]])
    iou = iou_matrix(pred, gt)
    assert iou.tolist() == [[50 / 150, 0.0, 0.25 / 100], [0.0, 0.0, 0.0], [0.0, 0.0, 1.0]]  # empty union: 0
    assert iou_matrix(pred, np.zeros((0, 4))).shape == (3, 0) and iou_matrix(np.zeros((0, 4)), gt).shape == (0, 3)
    one = np.zeros((3, 3), dtype=bool)
    one[1, 1] = True
    assert (mask_iou(one, np.zeros_like(one)), mask_iou(one, one), mask_iou(~one, ~one)) == (0.0, 1.0, 1.0)
    assert mask_iou(np.zeros_like(one), np.zeros_like(one)) == 1.0
    assert mask_iou(one, np.ones_like(one)) == 1 / 9


def test_rcot_match_pairs_several_boxes_and_divides_by_the_larger_count():
    mask = np.zeros((100, 100), dtype=bool)
    mask[0:20, 0:20] = True
    mask[50:80, 50:80] = True
    gt = one_frame_gt(mask, task="rcot_ktg", boxes=[[0, 0, 20, 20], [50, 50, 80, 80]])
    text = completion(bbox_2d_list=[[50, 50, 80, 80], [0, 0, 20, 20], [90, 90, 100, 100]],
                      point_2d_list=[[65, 65], [10, 10], [95, 95]])
    # pred 0 = object 1, pred 1 = object 0 (each 3 of 3), pred 2 matches nothing: (3 + 3) / (3 · 3)
    assert run(text, gt, components=("rcot_match",), threshold_size=100)["rcot_match"] == pytest.approx(2 / 3)
    # two predictions for one object: one is matched (3 of 3), the sum divided by 3 · 2
    text = completion(bbox_2d_list=[[52, 50, 80, 80], [50, 50, 80, 80]], point_2d_list=[[65, 65], [65, 65]])
    one = one_frame_gt(np.pad(np.ones((30, 30), bool), ((50, 20), (50, 20))), task="rcot_ktg")
    assert run(text, one, components=("rcot_match",), threshold_size=100)["rcot_match"] == pytest.approx(3 / 6)


# --- score_answer's bookkeeping, the registry's messages, compute_score's default params ------------------------


def test_an_unparsed_completion_under_the_length_penalty_reports_no_factor():
    mask, gt_json = _videoseg_gt()
    gt = json.loads(gt_json)
    gt["token_budget"] = 4
    result = run("<think>a b c</think><answer>{broken</answer>", json.dumps(gt), components=("format", "non_repeat"),
                 length_penalty=True, failure_score=-1.0)
    assert result == {"score": -1.0 + 0.5, "parsed": 0.0, "no_boxes": 0.0, "degenerate_boxes": 0.0, "format": 0.5,
                      "non_repeat": 0.0, "length_penalty": 0.0}
    message = "reward.length_penalty needs ground-truth token_budget (difficulty stage)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        run(GROUP_TEXTS[1], gt_json, components=("format",), length_penalty=True)


@pytest.mark.parametrize(("names", "message"), [
    (["format", "iou", "spatial", "area"],
     "unknown reward component(s) ['iou', 'area']; known: ['aks_option', 'consistency', 'format', 'keyframe', "
     "'negative_point', 'non_repeat', 'rcot_match', 'spatial']"),
    (["format", "spatial", "format"], "reward components repeat: ['format', 'spatial', 'format']"),
    ([], "reward.components is empty"),
])
def test_resolve_components_messages(names, message):
    from stages.rewards import resolve_components

    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        resolve_components(names)


def test_compute_score_without_params_uses_the_embedded_defaults():
    mask, gt_json = _videoseg_gt()
    default = compute_score("vrsflow/revos", GROUP_TEXTS[1], gt_json, None, masks_for=lambda *a: mask[None])
    assert default == compute_score("vrsflow/revos", GROUP_TEXTS[1], gt_json, None, params=RewardParams(),
                                    masks_for=lambda *a: mask[None])
    assert set(default) == {"score", "parsed", "no_boxes", "degenerate_boxes", *RewardParams().components}


# --- third round: rcot_match without a target, a Veason-R1 rollout's request, a short segmenter reply -------------


def test_rcot_match_without_a_target_or_without_a_box():
    empty = np.zeros((40, 40), dtype=bool)
    no_target = json.loads(one_frame_gt(empty, task="rcot_ktg"))
    no_target["boxes"], no_target["areas"] = [[None]], [[0.0]]
    mask = np.zeros((40, 40), dtype=bool)
    mask[10:20, 10:20] = True
    target = one_frame_gt(mask, task="rcot_ktg")
    nothing = completion(bbox_2d_list=[], point_2d_list=[])
    a_box = completion(bbox_2d_list=[[10, 10, 20, 20]], point_2d_list=[[15, 15]])
    for text, gt, expected in ((nothing, json.dumps(no_target), 1.0),  # nothing to find, nothing claimed
                               (a_box, json.dumps(no_target), 0.0), (nothing, target, 0.0), (a_box, target, 1.0)):
        assert run(text, gt, components=("rcot_match",))["rcot_match"] == expected


def test_rollout_groups_reads_a_veason_answers_own_keyframe():
    from schemas.answer import GroundTruth

    mask = np.zeros((20, 30), dtype=bool)
    mask[5:15, 10:20] = True
    gt = json.loads(one_frame_gt(mask, task="veason"))
    gt.update(timestamps=[0, 4], boxes=gt["boxes"] * 2, areas=gt["areas"] * 2, union_areas=gt["union_areas"] * 2,
              masks=gt["masks"] * 2)
    text = '<think>It is there.</think><answer>{"keyframe_timestamp": 4, "bbox_2d_list": [[10, 5, 20, 15]]}</answer>'
    unshown = text.replace('"keyframe_timestamp": 4', '"keyframe_timestamp": 2')
    assert score_module.rollout_groups([text, unshown], GroundTruth.from_json(json.dumps(gt))) == [
        (1, ((10.0, 5.0, 20.0, 15.0),), ()), None]  # the answer's frame (position 1); a frame not shown: none


def test_precompute_masks_refuses_a_segmenter_reply_short_of_a_group(monkeypatch):
    from schemas.answer import GroundTruth
    from stages import sam2_wrapper
    from stages.rewards import precompute_masks

    monkeypatch.setattr(sam2_wrapper, "propagate_groups", lambda predictor, frames, groups, threshold: [
        FakePropagation.masks(0)])  # one group's masks for two groups
    gt = GroundTruth.from_json(_videoseg_gt()[1])
    with pytest.raises(ValueError, match="zip"):
        precompute_masks(GROUP_TEXTS, gt, [np.zeros((20, 30, 3), np.uint8)], object())


# --- fourth round: IoU of boxes apart in one direction, the empty matching, clipping at the bottom, spatial's pairs -


def test_iou_is_zero_for_boxes_that_overlap_in_x_only_and_the_empty_matching_is_empty():
    from stages.rewards.geometry import hungarian, iou_matrix

    pred = np.array([[0.0, 0.0, 10.0, 10.0]])
    assert iou_matrix(pred, np.array([[2.0, 20.0, 8.0, 30.0]])).tolist() == [[0.0]]  # below it
    assert iou_matrix(pred, np.array([[20.0, 2.0, 30.0, 8.0]])).tolist() == [[0.0]]  # beside it
    for shape in ((0, 3), (3, 0), (0, 0)):
        rows, cols = hungarian(np.zeros(shape))
        assert rows.tolist() == [] and cols.tolist() == [] and rows.dtype.kind == cols.dtype.kind == "i"


def test_spatial_clips_a_box_at_the_image_bottom_and_sums_the_matched_pairs_only():
    mask = np.zeros((20, 30), dtype=bool)
    mask[5:15, 10:20] = True
    gt = json.loads(one_frame_gt(mask, task="veason"))
    text = '<think>It is there.</think><answer>{"keyframe_timestamp": 0, "bbox_2d_list": [[10, 5, 20, 40]]}</answer>'
    assert run(text, json.dumps(gt), components=("spatial",))["spatial"] == pytest.approx(100 / 150)  # y2 40 → 20
    two = np.zeros((20, 30), dtype=bool)
    two[0:10, 0:20] = True
    gt = json.loads(one_frame_gt(two, task="veason", boxes=[[0, 0, 10, 10], [10, 0, 20, 10]]))
    text = ('<think>It is there.</think><answer>{"keyframe_timestamp": 0, "bbox_2d_list": [[0, 0, 10, 10], '
            '[5, 0, 20, 10]]}</answer>')
    # pairs: box 0 – object 0 (IoU 1), box 1 – object 1 (IoU 100/150); box 1 – object 0 (50/200) is not a pair
    assert run(text, json.dumps(gt), components=("spatial",))["spatial"] == pytest.approx((1 + 100 / 150) / 2)
