"""Flow `dvc-cot`: teacher chain-of-thought generation."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.common import run_stage
from stages.core.frames_root import frames_root
from stages.cot import generate_cot
from stages.params import load_params


@flow(name="dvc-cot")
def cot_flow(params_path: str = "params.yaml") -> dict:
    """Generate reasoning traces into data/cot and write metrics/cot.json."""
    params = load_params(params_path)
    report = run_stage("cot", generate_cot, params.teacher, params.cot, params.seed, frames_root(params.data),
                       Path("data/keyframes"), Path("data/cot"))
    report.write_metrics(Path("metrics/cot.json"))
    return report.metrics


run = cot_flow
