"""One seed of the pretrain stage: `python -m stages.pretrain --job JOB` (started by the stage through
`stages.models.seed_runs.run_seeds`, one process per seed)."""

from __future__ import annotations

from stages.core.typed_config import build
from stages.models.seed_runs import seed_process
from stages.params.pretrain import PretrainParams
from stages.params.synth import SynthScale
from stages.pretrain import train_seed

if __name__ == "__main__":
    seed_process("pretrain", PretrainParams,
                 lambda params, job: train_seed(params, int(job["seed"]), int(job["train_size"]),
                                                 build(SynthScale, job["synth"], "synth")))
