"""Flow `dvc-bench_table`: metrics/bench/*.json → reports/benchmarks.md and metrics/benchmarks.json (rows =
models, columns = J&F per benchmark, R for ReVOS, and the gain over the SFT model)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.common import run_stage
from stages.bench import write_benchmark_table
from stages.params import load_params


@flow(name="dvc-bench_table")
def bench_table_flow(params_path: str = "params.yaml") -> dict:
    """Write reports/benchmarks.md and metrics/benchmarks.json."""
    params = load_params(params_path)
    report = run_stage("bench_table", write_benchmark_table, params.benchmarks, Path("metrics/bench"),
                       Path("reports/benchmarks.md"))
    report.write_metrics(Path("metrics/benchmarks.json"))
    return report.metrics


run = bench_table_flow
