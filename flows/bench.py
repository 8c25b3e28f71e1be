"""Flow `dvc-bench`: one benchmark (`vrsflow stage bench --item NAME`, the DVC stage bench@NAME) for every model
of `benchmarks.models` → data/bench/NAME, metrics/bench/NAME.json."""

from __future__ import annotations

import os
from pathlib import Path

from prefect import flow

from flows.common import run_stage
from stages.bench import run_benchmark
from stages.params import load_params

ITEM_ENV = "VRSFLOW_STAGE_ITEM"  # set by `vrsflow stage NAME --item ITEM` (DVC foreach stages)


@flow(name="dvc-bench")
def bench_flow(params_path: str = "params.yaml") -> dict:
    """Write data/bench/<name>/ (predictions, answers, scores or the submission zip) and metrics/bench/<name>.json."""
    name = os.environ.get(ITEM_ENV, "")
    if not name:
        raise ValueError("stage bench needs the benchmark: vrsflow stage bench --item NAME")
    params = load_params(params_path)
    report = run_stage(f"bench-{name}", run_benchmark, name, params.benchmarks, params.evaluate, params.model,
                       params.sam2, params.keyframes.train_size, Path(params.data.root), Path("data/bench") / name,
                       traces=(Path("data/filter/accepted.parquet"), Path("data/keyframes/sft.parquet")))
    report.write_metrics(Path("metrics/bench") / f"{name}.json")
    return report.metrics


run = bench_flow
