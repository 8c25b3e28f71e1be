"""One seed of the pretrain_sam2 stage: `python -m stages.pretrain_sam2 --job JOB` (started by the stage through
`stages.models.seed_runs.run_seeds`, one process per seed)."""

from __future__ import annotations

from stages.models.seed_runs import seed_process
from stages.params.pretrain_sam2 import PretrainSam2Params
from stages.pretrain_sam2 import train_seed

if __name__ == "__main__":
    seed_process("pretrain_sam2", PretrainSam2Params, lambda params, job: train_seed(params, int(job["seed"])))
