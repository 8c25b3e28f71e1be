"""The file verl loads as `reward.custom_reward_function.path` (name: `compute_score`).

verl calls `compute_score(data_source, solution_str, ground_truth, extra_info, **reward_kwargs)` once per
rollout in a CPU-only reward worker. reward_kwargs (set by stages/grpo/verl_engine.py):
`params_path` (params.yaml → the `reward` block), `sam2_service` (named Ray actor for the consistency
reward; "" = not used) and `log_dir` (every result is appended there as JSON lines keyed by a hash of
(completion, ground truth), so per-step reward components can be joined with verl's rollout dumps —
verl's v1 trainer does not log them).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stages.rewards.score import _params_from
from stages.rewards.score import compute_score as _score


def rollout_key(solution_str: str, ground_truth: str | Mapping) -> str:
    """Join key between a reward log line and verl's dumped rollout (completion, ground truth)."""
    gt = ground_truth if isinstance(ground_truth, str) else json.dumps(ground_truth, sort_keys=True)
    return hashlib.sha1(f"{solution_str}\0{gt}".encode()).hexdigest()


def compute_score(data_source: str, solution_str: str, ground_truth: str | Mapping, extra_info: Mapping | None = None,
                  params_path: str = "params.yaml", sam2_service: str = "", log_dir: str = "",
                  **kwargs: Any) -> dict[str, float]:
    """verl's custom reward: `stages.rewards.compute_score` + SAM2 service + per-rollout log line."""
    params = _params_from(params_path)
    masks_for = None
    if "consistency" in params.components:
        sample_id = (extra_info or {}).get("sample_id")
        if not sam2_service or sample_id is None:
            raise RuntimeError("the consistency reward under verl needs reward_kwargs.sam2_service and "
                               "extra_info.sample_id in the parquet")
        from stages.rewards.sam2_service import ray_masks_for

        masks_for = ray_masks_for(sam2_service, str(sample_id))
    started = time.perf_counter()
    result = _score(data_source, solution_str, ground_truth, extra_info, params=params, masks_for=masks_for)
    if log_dir:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        # reward_s: this call's time (SAM2 included); verl times the reward only inside its rollout phase
        line = json.dumps({"key": rollout_key(solution_str, ground_truth),
                           "reward_s": round(time.perf_counter() - started, 6), **result}, sort_keys=True)
        with open(Path(log_dir) / f"reward-{socket.gethostname()}-{os.getpid()}.jsonl", "a") as handle:
            handle.write(line + "\n")
    return result
