"""Study (issue 61): what the last phase does to a base that found the shapes, one change at a time.

    python research/issue61/phase_from_state.py WORKTREE SEED STATE.pt STEPS CHECK_EVERY OUT.json

A pretrain stage run's saved state (a copy of `seed-SEED/state.pt` taken at the end of a phase: weights, AdamW, the
schedule and the torch RNG, all as the stage saved them) is trained on for STEPS more optimizer steps by the stage's
own pieces (`fresh_model`, `StepBatches`, `train_step`, the clip, AdamW, `warmup_cosine` over the run's `steps`), on
WORKTREE's params.yaml with its last phase changed by the environment: THINK (sentence | compact), FRAMES, SHARE (its
synth_share). With none set, the samples are the stage's own, byte for byte. Every CHECK_EVERY steps the stage's
`grounding_check` answers (greedy) 48 held-out samples of the changed phase (the stage's selection stream) and 96
one-frame scenes of three shapes (all six colours, the shapes probe's held-out stream), and a row is appended to
OUT.json.
"""

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from research.issue61.check_state import shape_scenes
from stages.models.train_state import load_state, warmup_cosine
from stages.params import load_params
from stages.pretrain import CURVE_KEYS, fresh_model, grounding_check, train_step
from stages.pretrain.stream import StepBatches, select_samples


def main() -> None:
    worktree, seed, state_path = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    steps, every, out = int(sys.argv[4]), int(sys.argv[5]), Path(sys.argv[6])
    torch.set_num_threads(1)
    params = load_params(worktree / "params.yaml")
    pre = params.pretrain
    last = pre.curriculum[-1]
    change = {k: v for k, v in (("think", os.environ.get("THINK")), ("frames", os.environ.get("FRAMES")),
                                ("synth_share", os.environ.get("SHARE"))) if v is not None}
    changed = dataclasses.replace(last, **{k: (v if k == "think" else int(v) if k == "frames" else float(v))
                                           for k, v in change.items()})
    pre = dataclasses.replace(pre, base=str(worktree / pre.base), curriculum=(*pre.curriculum[:-1], changed))
    size, scale = params.keyframes.train_size, params.synth.scale

    model, processor = fresh_model(pre)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=pre.learning_rate, weight_decay=pre.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, pre.warmup_steps, pre.steps))
    # the stage's own resume (weights, AdamW, schedule, RNG); the state's fingerprint is its own run's, read lazily
    own = torch.load(state_path, map_location="cpu", weights_only=True, mmap=True)["fingerprint"]
    start, _, _ = load_state(state_path, own, model, optimizer, scheduler, CURVE_KEYS)

    held_out = select_samples(pre, size, scale)
    shapes = [dataclasses.replace(s, think=changed.think) for s in shape_scenes(size, scale, 3)]
    batches = StepBatches(pre, seed, size, scale, processor)
    rows = json.loads(out.read_text())["rows"] if out.is_file() else []
    started, losses = time.time(), []
    for step in range(start, start + steps):
        losses.append(train_step(model, batches[step], "cpu"))
        torch.nn.utils.clip_grad_norm_(model.parameters(), pre.grad_clip)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if (step + 1 - start) % every == 0:
            model.eval()
            row = {"from_step": start, "step": step + 1, "change": change or "none",
                   "loss": round(float(np.mean(losses[-every:])), 4),
                   "last_phase": grounding_check(model, processor, held_out, pre.max_new_tokens),
                   "shapes_1_frame_3_objects": grounding_check(model, processor, shapes, pre.max_new_tokens),
                   "wall_s": round(time.time() - started)}
            model.train()
            rows.append(row)
            out.write_text(json.dumps({"what": __doc__.split("\n")[0], "branch": worktree.name, "seed": seed,
                                       "rows": rows}, indent=1) + "\n")
            print(json.dumps({"step": row["step"], "loss": row["loss"],
                              "last_phase_box_iou": row["last_phase"]["box_iou"],
                              "last_phase_keyframe_hit": row["last_phase"]["keyframe_hit_rate"],
                              "shapes_box_iou": row["shapes_1_frame_3_objects"]["box_iou"],
                              "shapes_on_target": row["shapes_1_frame_3_objects"]["on_target"]}), flush=True)


if __name__ == "__main__":
    main()
