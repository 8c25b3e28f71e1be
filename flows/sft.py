"""Flow `dvc-sft`: LoRA SFT of the VLM on the SFT shards, with the before/after answer-format rate."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.common import run_stage
from stages.params import load_params
from stages.sft import train_sft


@flow(name="dvc-sft")
def sft_flow(params_path: str = "params.yaml") -> dict:
    """Write models/sft (adapter, merged), the live curves metrics/live/sft (DVCLive, TensorBoard) and
    metrics/sft.json."""
    params = load_params(params_path)
    report = run_stage("sft", train_sft, params.sft, params.model, Path("data/shards"), Path(params.sft.out_dir),
                       Path(params.sft.checkpoint_dir), Path("metrics"))
    report.write_metrics(Path("metrics/sft.json"))
    return report.metrics


run = sft_flow
