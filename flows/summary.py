"""Flow `dvc-summary`: the headline figures of the run in metrics/summary.json."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.common import run_stage
from stages.summary import summarize


@flow(name="dvc-summary")
def summary_flow(params_path: str = "params.yaml") -> dict:
    """Collect the headline figures of metrics/*.json into metrics/summary.json (written in order, not sorted)."""
    report = run_stage("summary", summarize, Path("metrics"), Path("metrics/summary.json"))
    return report.metrics


run = summary_flow
