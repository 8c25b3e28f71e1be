"""Flow `dvc-filter`: accept or reject reasoning traces, with reasons."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.common import run_stage
from stages.filter import filter_traces
from stages.params import load_params


@flow(name="dvc-filter")
def filter_flow(params_path: str = "params.yaml") -> dict:
    """Filter data/cot traces into data/filter and write metrics/filter.json."""
    params = load_params(params_path)
    report = run_stage("filter", filter_traces, params.filter, Path("data/cot"), Path("data/keyframes"),
                       Path("data/filter"))
    report.write_metrics(Path("metrics/filter.json"))
    return report.metrics


run = filter_flow
