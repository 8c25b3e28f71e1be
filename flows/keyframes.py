"""Flow `dvc-keyframes`: keyframes, sampled frames and train-size geometry per sample."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.common import run_stage
from stages.keyframes import select_keyframes
from stages.params import load_params


@flow(name="dvc-keyframes")
def keyframes_flow(params_path: str = "params.yaml") -> dict:
    """Select keyframes into data/keyframes and write metrics/keyframes.json."""
    params = load_params(params_path)
    report = run_stage("keyframes", select_keyframes, params.keyframes, params.seed, Path(params.data.root),
                       Path(params.data.index_dir), Path("data/sample"), Path("data/keyframes"), params.runner)
    report.write_metrics(Path("metrics/keyframes.json"))
    return report.metrics


run = keyframes_flow
