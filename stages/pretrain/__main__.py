"""One seed of the pretrain stage: `python -m stages.pretrain --job JOB` (started by the stage through
`stages.models.seed_runs.run_seeds`, one process per seed)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from stages.core.io import write_json
from stages.core.params import PretrainParams
from stages.core.typed_config import build
from stages.models.seed_runs import RESULT_KEY
from stages.pretrain import train_seed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="one seed of the pretrain stage")
    parser.add_argument("--job", type=Path, required=True, help="job file written by the pretrain stage")
    args = parser.parse_args(argv)
    job = json.loads(args.job.read_text())
    figures = train_seed(build(PretrainParams, job["pretrain"], "pretrain"), int(job["seed"]), int(job["train_size"]))
    write_json(Path(job[RESULT_KEY]), figures)


if __name__ == "__main__":
    main()
