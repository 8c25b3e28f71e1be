"""Flow `dvc-difficulty`: five-dimension difficulty, level and token budget per sample."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.common import run_stage
from stages.core.frames_root import frames_root
from stages.difficulty import score_difficulty
from stages.params import load_params


@flow(name="dvc-difficulty")
def difficulty_flow(params_path: str = "params.yaml") -> dict:
    """Score every sample into data/difficulty and write metrics/difficulty.json."""
    params = load_params(params_path)
    report = run_stage("difficulty", score_difficulty, params.difficulty, params.teacher, frames_root(params.data),
                       Path(params.data.index_dir), Path("data/keyframes"), Path("data/difficulty"))
    report.write_metrics(Path("metrics/difficulty.json"))
    return report.metrics


run = difficulty_flow
