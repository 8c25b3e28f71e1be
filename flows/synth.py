"""Flow `dvc-synth`: generate the synthetic ReVOS-layout dataset."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.common import run_stage
from stages.params import load_params
from stages.synth import generate_synthetic


@flow(name="dvc-synth")
def synth_flow(params_path: str = "params.yaml") -> dict:
    """Generate the dataset into `synth.out_dir` and write metrics/synth.json."""
    params = load_params(params_path)
    report = run_stage("synth", generate_synthetic, params.synth, Path(params.synth.out_dir), params.runner)
    report.write_metrics(Path("metrics/synth.json"))
    return report.metrics


run = synth_flow
