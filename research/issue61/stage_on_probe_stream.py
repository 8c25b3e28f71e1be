"""Study (issue 61): the pretrain stage's own train_seed, fed the shapes probe's exact samples (seed 0, OBJ=1, the
sentence thought) in the probe's order with the probe's 1,500-step schedule: does it find the shape as the probe did?

    python research/issue61/stage_on_probe_stream.py WORKTREE OUT

WORKTREE: a checkout whose params.yaml holds the run's settings (session 28: the pt66 branch's, plain look at object
scale 1.4) and whose tiny_models stage has written `pretrain.base`; OUT: a folder for the seed's state and model.
"""

import json
import logging
import os
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

os.environ.update(SCENE="shapes", OBJ="1", GROW="0")  # the probe reads its settings when imported
ARGS, sys.argv = sys.argv, ["probe"]  # the probe reads no arguments when imported
import research.issue61.probe_describe as pd  # noqa: E402
import stages.pretrain as stage  # noqa: E402
import stages.pretrain.stream as stream  # noqa: E402
from stages.core.io import derive_seed  # noqa: E402
from stages.params import load_params  # noqa: E402
from stages.params.pretrain import PretrainPhase, PretrainScreen  # noqa: E402


def probe_samples(params, seed, step, size, scale):
    """The probe's samples of `step`, in its order (seed 0's stream), in place of the stage's."""
    return [pd.sample(np.random.default_rng(derive_seed(0, "describe", "train", step, i)), f"train/{step}/{i}",
                      step)[0] for i in range(params.batch_size)]


def main() -> None:
    stream.step_samples = probe_samples
    worktree, out = Path(ARGS[1]), Path(ARGS[2])
    p = load_params(worktree / "params.yaml")
    params = replace(p.pretrain, base=str(worktree / p.pretrain.base), seeds=(0,), steps=1500,
                     curriculum=(PretrainPhase(steps=1500, frames=1, scene="shapes", objects=(1,), think="sentence"),),
                     checkpoint_dir=str(out / "ckpt"), out_dir=str(out / "model"), select_every_steps=0,
                     screen=(PretrainScreen(step=1000, min_box_iou=0.2),), max_new_tokens=48, check_samples=48)
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO)
    print(json.dumps(stage.train_seed(params, 0, p.keyframes.train_size, p.synth.scale).get("screens")))


if __name__ == "__main__":
    main()
