"""Flow `dvc-sample`: stratified SFT / GRPO / evaluation pools."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.common import run_stage
from stages.params import load_params
from stages.sample import sample_pools


@flow(name="dvc-sample")
def sample_flow(params_path: str = "params.yaml") -> dict:
    """Draw the pools into data/sample and write metrics/sample.json."""
    params = load_params(params_path)
    report = run_stage("sample", sample_pools, params.sample, params.seed, Path(params.data.index_dir),
                       Path("data/sample"))
    report.write_metrics(Path("metrics/sample.json"))
    return report.metrics


run = sample_flow
