"""Flow `dvc-ingest`: validate and index a ReVOS-layout root, or several training sources (data.sources)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.common import run_stage
from stages.ingest.sources import ingest_data
from stages.params import load_params


@flow(name="dvc-ingest")
def ingest_flow(params_path: str = "params.yaml") -> dict:
    """Index `data.root` (and `data.sources`) into `data.index_dir` and write metrics/ingest.json."""
    params = load_params(params_path)
    report = run_stage("ingest", ingest_data, params.ingest, params.data, params.runner)
    report.write_metrics(Path("metrics/ingest.json"))
    return report.metrics


run = ingest_flow
