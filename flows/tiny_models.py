"""Flow `dvc-tiny_models`: build the tiny random Qwen2.5-VL and SAM2 the default pipeline trains."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.common import run_stage
from stages.params import load_params
from stages.tiny_models import build_tiny_models


@flow(name="dvc-tiny_models")
def tiny_models_flow(params_path: str = "params.yaml") -> dict:
    """Write models/tiny and metrics/tiny_models.json."""
    params = load_params(params_path)
    report = run_stage("tiny_models", build_tiny_models, params.tiny_models, Path(params.tiny_models.out_dir))
    report.write_metrics(Path("metrics/tiny_models.json"))
    return report.metrics


run = tiny_models_flow
