"""What each training process runs: `python -m stages.sft` under `accelerate launch` or torchrun.

    accelerate launch --config_file configs/accelerate/fsdp.yaml --num_processes 8 -m stages.sft --params params.yaml
    torchrun --nnodes 2 --nproc_per_node 8 … -m stages.sft --params params.yaml

`--params` reads the `sft` and `model` blocks and writes the stage's usual outputs (`sft.out_dir`,
`metrics/live/sft`, `metrics/sft.json`); `--job` is the file the stage itself writes when
`sft.processes > 1`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from stages.core.io import write_json
from stages.core.typed_config import build
from stages.params import load_params
from stages.params.model import ModelParams
from stages.params.sft import SftParams
from stages.sft import train_sft


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="one process of the sft stage (under accelerate / torchrun)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--params", type=Path, help="params.yaml (writes the stage's outputs and metrics)")
    source.add_argument("--job", type=Path, help="job file written by the sft stage")
    args = parser.parse_args(argv)
    if args.params:
        params = load_params(args.params)
        report = train_sft(params.sft, params.model, Path("data/shards"), Path(params.sft.out_dir),
                           Path(params.sft.checkpoint_dir), Path("metrics"))
        if report.metrics:  # the main process
            report.write_metrics(Path("metrics/sft.json"))
        return
    job = json.loads(args.job.read_text())
    report = train_sft(build(SftParams, job["sft"], "sft"), build(ModelParams, job["model"], "model"),
                       Path(job["shards_dir"]), Path(job["out_dir"]), Path(job["checkpoint_dir"]),
                       Path(job["metrics_dir"]))
    if report.metrics:
        write_json(Path(job["result"]), report.metrics)


if __name__ == "__main__":
    main()
