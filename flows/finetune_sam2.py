"""Flow `dvc-finetune_sam2`: train the pre-trained tiny SAM2 further with one mask on tracked frames (skipped unless
sam2.checkpoint is in its output)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.common import run_stage
from stages.finetune_sam2 import finetune_sam2
from stages.params import load_params


@flow(name="dvc-finetune_sam2")
def finetune_sam2_flow(params_path: str = "params.yaml") -> dict:
    """Write models/pretrain_sam2_finetuned, metrics/finetune_sam2_curve.tsv and metrics/finetune_sam2.json."""
    params = load_params(params_path)
    report = run_stage("finetune_sam2", finetune_sam2, params.finetune_sam2, params.sam2,
                       Path(params.finetune_sam2.out_dir), Path("metrics"))
    report.write_metrics(Path("metrics/finetune_sam2.json"))
    return report.metrics


run = finetune_sam2_flow
