"""Flow `dvc-grpo`: GRPO with the verifiable reward (engine trl or verl)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.common import run_stage
from stages.grpo import run_grpo
from stages.params import load_params


@flow(name="dvc-grpo")
def grpo_flow(params_path: str = "params.yaml") -> dict:
    """Write models/grpo, the live curves metrics/live/grpo (DVCLive, TensorBoard) and metrics/grpo.json."""
    params = load_params(params_path)
    report = run_stage("grpo", run_grpo, params.grpo, params.reward, params.sam2, Path("metrics/live/grpo"),
                       Path(params_path))
    report.write_metrics(Path("metrics/grpo.json"))
    return report.metrics


run = grpo_flow
