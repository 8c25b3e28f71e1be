"""Flow `dvc-pretrain_sam2`: pre-train the tiny SAM2 on generated clips (skipped unless sam2.checkpoint is in it or in
finetune_sam2's output started from it)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.common import run_stage
from stages.params import load_params
from stages.pretrain_sam2 import pretrain_sam2


@flow(name="dvc-pretrain_sam2")
def pretrain_sam2_flow(params_path: str = "params.yaml") -> dict:
    """Write models/pretrain_sam2, metrics/pretrain_sam2_curve.tsv and metrics/pretrain_sam2.json."""
    params = load_params(params_path)
    report = run_stage("pretrain_sam2", pretrain_sam2, params.pretrain_sam2, params.sam2,
                       Path(params.pretrain_sam2.out_dir), Path("metrics"), params.finetune_sam2)
    report.write_metrics(Path("metrics/pretrain_sam2.json"))
    return report.metrics


run = pretrain_sam2_flow
