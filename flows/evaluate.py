"""Flow `dvc-evaluate`: model + SAM2 on the eval pool → predictions, metrics/eval.json, reports/eval.md."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.common import run_stage
from stages.evaluate import evaluate
from stages.params import load_params


@flow(name="dvc-evaluate")
def evaluate_flow(params_path: str = "params.yaml") -> dict:
    """Write data/evaluate, reports/eval.md (+ pictures) and metrics/eval.json."""
    params = load_params(params_path)
    report = run_stage("evaluate", evaluate, params.evaluate, params.model, params.sam2, params.keyframes.train_size,
                       Path(params.data.root), Path("data/keyframes/eval.parquet"), Path("data/evaluate"),
                       Path("reports/eval.md"), params.runner, index_dir=Path(params.data.index_dir),
                       traces=(Path("data/filter/accepted.parquet"), Path("data/keyframes/sft.parquet")))
    report.write_metrics(Path("metrics/eval.json"))
    return report.metrics


run = evaluate_flow
