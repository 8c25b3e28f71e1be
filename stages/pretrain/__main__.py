"""One process of the pretrain stage: `python -m stages.pretrain --job JOB` under torchrun (pretrain.processes > 1)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from stages.core.io import write_json
from stages.core.params import ModelParams, PretrainParams
from stages.core.typed_config import build
from stages.pretrain import pretrain


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="one process of the pretrain stage (under torchrun)")
    parser.add_argument("--job", type=Path, required=True, help="job file written by the pretrain stage")
    args = parser.parse_args(argv)
    job = json.loads(args.job.read_text())
    report = pretrain(build(PretrainParams, job["pretrain"], "pretrain"), build(ModelParams, job["model"], "model"),
                      int(job["train_size"]), Path(job["out_dir"]), Path(job["metrics_dir"]))
    if report.metrics:
        write_json(Path(job["result"]), report.metrics)


if __name__ == "__main__":
    main()
