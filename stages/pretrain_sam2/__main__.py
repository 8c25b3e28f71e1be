"""One seed of the pretrain_sam2 stage: `python -m stages.pretrain_sam2 --job JOB` (started by the stage through
`stages.models.seed_runs.run_seeds`, one process per seed)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from stages.core.io import write_json
from stages.core.params import PretrainSam2Params
from stages.core.typed_config import build
from stages.models.seed_runs import RESULT_KEY
from stages.pretrain_sam2 import train_seed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="one seed of the pretrain_sam2 stage")
    parser.add_argument("--job", type=Path, required=True, help="job file written by the pretrain_sam2 stage")
    args = parser.parse_args(argv)
    job = json.loads(args.job.read_text())
    figures = train_seed(build(PretrainSam2Params, job["pretrain_sam2"], "pretrain_sam2"), int(job["seed"]))
    write_json(Path(job[RESULT_KEY]), figures)


if __name__ == "__main__":
    main()
