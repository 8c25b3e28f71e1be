"""The registry of reward components, `compute_score` (verl's custom_reward_function signature) and the
grouped scorer that runs SAM2 once per prompt for all its rollouts (TRL, the SAM2 service).

Which components score a rollout is the task's (stages/tasks, named by the ground truth's `task`): the
components it declares that `reward.components` enables, weighted by `reward.weights`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from schemas.answer import DEGENERATE_BOXES, NO_BOXES, GroundTruth, box_status
from stages.params import load_params
from stages.params.reward import RewardParams
from stages.rewards import components as c
from stages.tasks import Task, get_task

log = logging.getLogger(__name__)

Component = Callable[[c.RewardContext], float]
REGISTRY: Mapping[str, Component] = {
    "format": c.format_reward,
    "keyframe": c.keyframe_reward,
    "spatial": c.spatial_reward,
    "consistency": c.consistency_reward,
    "rcot_match": c.rcot_match_reward,
    "aks_option": c.aks_option_reward,
    "negative_point": c.negative_point_reward,
    "non_repeat": c.non_repeat_reward,
}
LENGTH_PENALTY = "length_penalty"
# per rollout, beside the score: 1/0 for an answer that parsed, that parsed with no box, and that parsed with boxes
# none of which covers any area inside the frame (the evaluation's answer statuses; the engines log their means)
ANSWER_FLAGS = ("parsed", NO_BOXES, DEGENERATE_BOXES)
TokenCounter = Callable[[str], int]


def resolve_components(names: Sequence[str]) -> dict[str, Component]:
    """The component functions for `names`, in order.

    Raises:
        ValueError: an unknown or repeated name (listing the known ones).
    """
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        raise ValueError(f"unknown reward component(s) {unknown}; known: {sorted(REGISTRY)}")
    if len(set(names)) != len(names):
        raise ValueError(f"reward components repeat: {list(names)}")
    if not names:
        raise ValueError("reward.components is empty")
    return {n: REGISTRY[n] for n in names}


def task_components(task: Task, params: RewardParams) -> dict[str, Component]:
    """The components that score `task`: those it declares that params enable, in the task's order."""
    enabled = resolve_components(params.components)
    return {n: enabled[n] for n in task.components if n in enabled}


def check_params(params: RewardParams) -> None:
    """Validate the reward block once, before training starts.

    Raises:
        ValueError: unknown components, negative weights or thresholds.
    """
    resolve_components(params.components)
    for name in params.components:
        if getattr(params.weights, name) < 0:
            raise ValueError(f"reward.weights.{name} must be ≥ 0")
    if params.failure_score > 0:
        raise ValueError("reward.failure_score must be ≤ 0 (a malformed completion must not outscore a wrong one)")
    if params.length_beta < 0 or params.threshold_size <= 0 or params.negative_point_tau <= 0:
        raise ValueError("reward.length_beta must be ≥ 0, reward.threshold_size and reward.negative_point_tau > 0")


def max_score(params: RewardParams, task: Task | None = None) -> float:
    """The largest total the params allow for `task` (every scoring component 1, no length penalty);
    without a task, over every enabled component."""
    names = task_components(task, params) if task is not None else params.components
    return float(sum(getattr(params.weights, n) for n in names))


def length_penalty(used: int, budget: int, beta: float) -> float:
    """VideoSeg-R1 soft length penalty: 1 − β·(used − budget) over budget, else 1; clipped to [0, 1]."""
    return float(min(max(1.0 - beta * max(used - budget, 0), 0.0), 1.0))


def whitespace_tokens(text: str) -> int:
    """Reasoning length in whitespace-separated words (the default counter)."""
    return len(text.split())


@lru_cache(maxsize=4)
def tokenizer_counter(path: str) -> TokenCounter:
    """Reasoning length in tokens of the tokenizer saved in `path` (special tokens not added)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


def reasoning_counter(params: RewardParams) -> TokenCounter:
    """THE way both engines count the reasoning tokens the length penalty sees: the `<think>` text,
    tokenized by `reward.length_tokenizer` (whitespace words when it is empty)."""
    return tokenizer_counter(params.length_tokenizer) if params.length_tokenizer else whitespace_tokens


def score_answer(text: str, gt: GroundTruth, params: RewardParams,
                 masks_for: c.MasksFor | None = None) -> dict[str, float]:
    """Score one completion against loaded ground truth: {"score", "parsed", "no_boxes", "degenerate_boxes",
    <component>: value, …}.

    Every enabled component is a key (0 for the ones the sample's task does not use). A completion that
    does not parse under the task's schema scores `params.failure_score` plus its format credit (right
    tags around broken JSON, as the released Veason-R1 reward); every other component is 0. `no_boxes` and
    `degenerate_boxes` (1 or 0, not part of the score) tell a parsed answer without boxes from one whose boxes
    all cover no area in the frame shown (`schemas.answer.box_status`); 0 for a task whose answer has no boxes.

    Raises:
        ValueError: an unknown task, or length_penalty without a token budget.
    """
    task = get_task(gt.task)
    fns = task_components(task, params)
    result = {name: 0.0 for name in params.components}
    if params.length_penalty:
        result[LENGTH_PENALTY] = 0.0
    answer = task.parse(text)
    if answer is None:
        total = float(params.failure_score)
        if "format" in fns:
            result["format"] = c.format_score(text, task.schema, gt)
            total += params.weights.format * result["format"]
        return {"score": total, "parsed": 0.0, NO_BOXES: 0.0, DEGENERATE_BOXES: 0.0, **result}
    height, width = gt.image_size
    status = box_status(answer.boxes, width, height) if "bbox_2d_list" in task.schema.keys else None
    flags = {NO_BOXES: float(status == NO_BOXES), DEGENERATE_BOXES: float(status == DEGENERATE_BOXES)}
    ctx = c.RewardContext(answer, gt, params, task.schema, masks_for=masks_for)
    total = 0.0
    for name, fn in fns.items():
        result[name] = float(fn(ctx))
        total += getattr(params.weights, name) * result[name]
    if params.length_penalty:
        if gt.token_budget is None:
            raise ValueError("reward.length_penalty needs ground-truth token_budget (difficulty stage)")
        factor = length_penalty(reasoning_counter(params)(answer.think), gt.token_budget, params.length_beta)
        result[LENGTH_PENALTY] = factor
        total *= factor
    return {"score": float(total), "parsed": 1.0, **flags, **result}


@lru_cache(maxsize=8)
def _params_from(path: str) -> RewardParams:
    return load_params(Path(path)).reward


def compute_score(data_source: str, solution_str: str, ground_truth: str | Mapping, extra_info: Mapping | None = None,
                  *, params: RewardParams | None = None, params_path: str | None = None,
                  masks_for: c.MasksFor | None = None, **kwargs: Any) -> dict[str, float]:
    """verl's `custom_reward_function`: {"score": total, "parsed": 0|1, "no_boxes": 0|1, "degenerate_boxes": 0|1,
    <component>: value, …}.

    Args:
        data_source: the parquet row's data source (logged only; the task comes from the ground truth).
        solution_str: the decoded completion.
        ground_truth: the GroundTruth JSON (docs/contracts.md) or its dict; its `task` picks the answer
            schema and the components.
        extra_info: the row's extra_info (not needed for scoring).
        params: the reward block; else loaded from `params_path` (verl passes it through
            `reward.custom_reward_function.reward_kwargs`), else the embedded defaults.
        masks_for: SAM2 propagation for the consistency component.

    Returns:
        The total and every enabled component. A malformed completion gets `failure_score` plus its
        format credit.

    Raises:
        ValueError: bad ground truth or bad params (data / configuration bugs, never model output).
    """
    if params is None:
        params = _params_from(params_path) if params_path else RewardParams()
    gt = GroundTruth.from_json(ground_truth)
    return score_answer(solution_str, gt, params, masks_for=masks_for)


def rollout_groups(texts: Sequence[str], gt: GroundTruth) -> list[tuple | None]:
    """Per rollout: (frame position, matched boxes, point prompts) that the consistency reward will propagate,
    or None."""
    task = get_task(gt.task)
    out: list[tuple | None] = []
    for text in texts:
        answer = task.parse(text)
        match = c.match_boxes(answer, gt, c.answer_position(answer, gt, task.schema)) if answer is not None else None
        if match is None or len(match.rows) == 0:
            out.append(None)
            continue
        boxes = tuple(tuple(float(v) for v in match.pred[r]) for r in sorted(match.rows))
        out.append((match.position, boxes, c.prompt_points(answer, match)))
    return out


def precompute_masks(texts: Sequence[str], gt: GroundTruth, frames: Sequence[np.ndarray], predictor,
                     threshold: float = 0.0) -> c.MasksFor:
    """SAM2 masks for every rollout of one prompt at once (shared frame encoding), as a `masks_for` lookup.

    The frames are the shown frames at the ground truth's image size. Rollouts that chose the same
    keyframe are tracked as objects of one SAM2 state; identical requests are computed once. A VideoSeg-R1
    answer's positive and negative points prompt SAM2 with its boxes (`components.prompt_points`).
    """
    from stages.sam2_wrapper import BoxGroup, propagate_groups

    height, width = gt.image_size
    if frames and tuple(frames[0].shape[:2]) != (height, width):
        raise ValueError(f"frames are {frames[0].shape[:2]}, ground truth image_size is {gt.image_size}")
    requests = sorted({r for r in rollout_groups(texts, gt) if r is not None})
    groups = [BoxGroup(k, list(b), [list(p) for p in prompts]) for k, b, prompts in requests]
    masks = propagate_groups(predictor, frames, groups, threshold) if requests else []
    table = {req: m.any(axis=0) for req, m in zip(requests, masks, strict=True)}

    def masks_for(position: int, boxes: tuple[tuple[float, ...], ...], prompts: c.Prompts = ()) -> np.ndarray:
        return table[(position, boxes, prompts)]

    return masks_for


def score_group(texts: Sequence[str], ground_truth: str | Mapping, params: RewardParams,
                frames: Sequence[np.ndarray] | None = None, predictor=None) -> list[dict[str, float]]:
    """Score the rollouts of ONE prompt; SAM2 runs once for the group when its task scores `consistency`.

    Raises:
        ValueError: bad ground truth; RuntimeError: consistency configured without frames and predictor.
    """
    gt = GroundTruth.from_json(ground_truth)
    masks_for = None
    if "consistency" in task_components(get_task(gt.task), params) and predictor is not None and frames is not None:
        masks_for = precompute_masks(texts, gt, frames, predictor, params.mask_threshold)
    return [score_answer(t, gt, params, masks_for=masks_for) for t in texts]
