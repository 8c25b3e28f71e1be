"""Study (issue 61): where a pretrain stage run stands mid-way, read from a seed's saved state.

    python research/issue61/check_state.py WORKTREE SEED OUT.json

The stage checks a seed only when it ends. This loads `WORKTREE/<pretrain.checkpoint_dir>/seed-SEED/state.pt` (the
fp32 weights the stage saves every `save_every_steps`) into the stage's own `fresh_model` under WORKTREE's
params.yaml, and scores greedy answers with the stage's `grounding_check` on two held-out sets of that run's frames
(`synth.<synth.size>`): 96 one-frame shape scenes asked by colour and kind, all six colours (the first phase's
task, on the shapes probe's held-out seed stream; OBJ=k in the environment: k shapes per scene instead), and the
stage's own check samples (the last phase). Appends one row per call to OUT.json.
"""

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from stages.core.io import derive_seed
from stages.models.seed_runs import seed_folder
from stages.params import load_params
from stages.params.pretrain import PLAIN_COLOURS
from stages.pretrain import fresh_model, grounding_check
from stages.pretrain.scenes import shape_sample
from stages.pretrain.stream import check_samples


def saved_seed(worktree: Path, seed: int):
    """(WORKTREE's params, the seed's saved step, its model with the saved fp32 weights, the processor)."""
    params = load_params(worktree / "params.yaml")
    pre = params.pretrain
    state = torch.load(seed_folder(worktree / pre.checkpoint_dir, seed) / "state.pt", map_location="cpu",
                       weights_only=True)
    model, processor = fresh_model(dataclasses.replace(pre, base=str(worktree / pre.base)))
    model.load_state_dict(state["model"])
    return params, int(state["step"]), model, processor


def shape_scenes(size: int, scale, objects: int, count: int = 96) -> list:
    """The shapes probe's held-out one-frame scenes: `objects` shapes each, asked by colour and kind, all six
    colours (the probe's check stream, so every study's figures are on the same scenes)."""
    return [shape_sample(np.random.default_rng(derive_seed(7, "describe", "check", i)), f"check/{i}/shapes", 1, size,
                         scale, (objects,), PLAIN_COLOURS) for i in range(count)]


def main() -> None:
    worktree, seed, out = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    torch.set_num_threads(1)
    objects = int(os.environ.get("OBJ", "3"))
    params, step, model, processor = saved_seed(worktree, seed)
    pre = params.pretrain
    size, scale = params.keyframes.train_size, params.synth.scale
    shapes = shape_scenes(size, scale, objects)
    started = time.time()
    row = {"seed": seed, "step": step, "shapes_objects": objects,
           "shapes_1_frame": grounding_check(model, processor, shapes, pre.max_new_tokens),
           "stage_check": grounding_check(model, processor, check_samples(pre, size, scale), pre.max_new_tokens)}
    row["check_s"] = round(time.time() - started)
    rows = json.loads(out.read_text())["rows"] if out.is_file() else []
    out.write_text(json.dumps({"what": __doc__.split("\n")[0], "rows": [*rows, row]}, indent=1) + "\n")
    print(json.dumps(row))


if __name__ == "__main__":
    main()
