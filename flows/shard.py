"""Flow `dvc-shard`: WebDataset shards, manifest and exports."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.common import run_stage
from stages.core.frames_root import frames_root
from stages.params import load_params
from stages.shard import write_shards


@flow(name="dvc-shard")
def shard_flow(params_path: str = "params.yaml") -> dict:
    """Write data/shards and metrics/shard.json."""
    params = load_params(params_path)
    report = run_stage("shard", write_shards, params.shard, frames_root(params.data), Path("data/keyframes"),
                       Path("data/filter"), Path("data/difficulty"), Path("data/shards"), params.runner,
                       tuple(s.name for s in params.data.sources))
    report.write_metrics(Path("metrics/shard.json"))
    return report.metrics


run = shard_flow
