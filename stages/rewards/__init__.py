"""The engine-neutral verifiable reward (Veason-R1, RCoT-Seg, VideoSeg-R1 components).

`compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw)` is verl's
custom_reward_function; `score_group` scores the rollouts of one prompt with one SAM2 pass (TRL, the
SAM2 service). Components live in `components.py`, the name → function registry in `score.py`.
"""

from stages.rewards.components import RewardContext, match_boxes
from stages.rewards.score import (
    ANSWER_FLAGS,
    LENGTH_PENALTY,
    REGISTRY,
    check_params,
    compute_score,
    length_penalty,
    max_score,
    precompute_masks,
    reasoning_counter,
    resolve_components,
    score_answer,
    score_group,
    task_components,
)

__all__ = ["ANSWER_FLAGS", "LENGTH_PENALTY", "REGISTRY", "RewardContext", "check_params", "compute_score",
           "length_penalty", "match_boxes", "max_score", "precompute_masks", "reasoning_counter", "resolve_components",
           "score_answer", "score_group", "task_components"]
