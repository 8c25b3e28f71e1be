"""Flow `dvc-pretrain`: pre-train the tiny Qwen2.5-VL on generated grounding scenes (skipped for a real model.path)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.common import run_stage
from stages.params import load_params
from stages.pretrain import pretrain


@flow(name="dvc-pretrain")
def pretrain_flow(params_path: str = "params.yaml") -> dict:
    """Write models/pretrain, metrics/pretrain_curve.tsv and metrics/pretrain.json."""
    params = load_params(params_path)
    report = run_stage("pretrain", pretrain, params.pretrain, params.model, params.keyframes.train_size,
                       params.synth.scale, Path(params.pretrain.out_dir), Path("metrics"))
    report.write_metrics(Path("metrics/pretrain.json"))
    return report.metrics


run = pretrain_flow
