"""One seed of the finetune_sam2 stage: `python -m stages.finetune_sam2 --job JOB` (started by the stage through
stages.models.seed_runs when several seeds train at once)."""

from __future__ import annotations

from stages.finetune_sam2 import STAGE, architecture
from stages.models.seed_runs import seed_process
from stages.params.finetune_sam2 import FinetuneSam2Params
from stages.pretrain_sam2 import train_seed

if __name__ == "__main__":
    seed_process(STAGE, FinetuneSam2Params,
                 lambda params, job: train_seed(params, int(job["seed"]), STAGE, architecture(params)))
