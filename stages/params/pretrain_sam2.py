"""`pretrain_sam2`: the tiny SAM2's pre-training on generated clips."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

from annotated_types import Ge, Le, MinLen

from stages.core.params import Fraction, NonNegFloat, NonNegInt, PosFloat, PosInt, SceneObjects, Seed
from stages.core.typed_config import Exp, ExpPath, Server
from stages.params.pretrain import seed_rules


@dataclass(frozen=True)
class PretrainSam2Params:
    # training seeds (initialisation order and clip stream); each trains apart and the one with the best held-out
    # tracking J is kept (at 1e-3, one seed of three did not learn)
    seeds: Exp[Annotated[tuple[Seed, ...], MinLen(1)]] = (0, 1, 2)
    # seeds trained at once, a process each: 0 = all of them on a GPU (up to 8), one per core on the CPU (fixed at
    # serve time: it sets how many processes a run starts)
    parallel: Server[NonNegInt] = 0
    base: ExpPath[str] = "models/tiny/sam2"  # folder of the random tiny SAM2 (model.pt + config.yaml; tiny_models)
    out_dir: ExpPath[str] = "models/pretrain_sam2"  # model.pt + config.yaml; runs only when sam2.checkpoint is in it
    # resumable training state, one folder per seed, kept across runs and a listed seed's removed when the stage
    # publishes: fixed at serve time, since the stage deletes in it and it is no DVC output that DVC would guard
    checkpoint_dir: Server[str] = "models/checkpoints/pretrain_sam2"
    steps: Exp[PosInt] = 600  # optimizer steps, clips_per_step generated clips each
    # clips per optimizer step, the visible objects of all of them one SAM2 batch. One clip's step is a chain of
    # small kernels that leaves a GPU waiting on launches (1.5 steps/s per seed on an H200, 0.4 on one CPU core), so
    # a GPU takes several clips for about the time of one; > 1 draws full-length clips only (they share a frame count)
    clips_per_step: Exp[Annotated[int, Ge(1), Le(64)]] = 1
    clip_frames: Exp[Annotated[int, Ge(2)]] = 4  # frames per training clip: the prompted frame, then tracked ones
    # objects in a generated training scene (the held-out check and the evaluation keep the synth default, 2-4).
    # With at most 4 objects, SAM2's three candidate masks on a tracked frame cover what is in view whatever the
    # memory holds, and the loss (its best candidate) never asks which one is the target; SAM2 trains on videos
    # with many objects, a few of them targets (its max_num_objects: 3)
    min_objects: Exp[SceneObjects] = 2
    max_objects: Exp[SceneObjects] = 4
    # targets per training clip: 0 = every object visible on its first frame; N = at most N of them, drawn from
    # the clip's own stream (the others stay in the frames as distractors)
    max_targets: Exp[Annotated[int, Ge(0), Le(16)]] = 0
    # share of clips whose targets are prompted with one click inside each (SAM2's training mixes clicks and boxes:
    # a click takes SAM2's three-candidate path, whose output tokens a box prompt falls back to when its own mask
    # is unstable); the other clips are prompted with boxes
    point_prompt_share: Exp[Fraction] = 0.5
    box_noise: Exp[NonNegFloat] = 0.1  # jitter of a prompted box's corners, a share of its size (SAM2's: 0.1)
    # clicks that correct the prompted frame one at a time, each where the last mask is wrong, the loss taken on
    # every pass (SAM2's training: 7); they teach the mask heads to follow a prompt rather than the likeliest object
    correction_clicks: Exp[Annotated[int, Ge(0), Le(16)]] = 7  # at most 16: each is another pass of the mask heads
    # weight of the loss's IoU term (L1 of each candidate's predicted IoU; SAM2.1's: 1). On a tracked frame the mask
    # terms train only the best of the three candidates, so the IoU head, which picks the one kept, is what is taught
    # which candidate is the target
    iou_loss_weight: Exp[Annotated[float, Ge(0), Le(100)]] = 1.0
    # AdamW peak LR, linear warm-up then cosine (at 1e-3 seed 1 of 3 did not learn: held-out J 0.008; at 3e-4 it did)
    learning_rate: Exp[PosFloat] = 3.0e-4
    warmup_steps: Exp[NonNegInt] = 50
    weight_decay: Exp[NonNegFloat] = 0.01
    grad_clip: Exp[PosFloat] = 1.0
    check_videos: Exp[PosInt] = 8  # held-out clips (another seed stream) for the before/after tracking check
    save_every_steps: Exp[PosInt] = 50  # resumable-state interval (resume after a kill)
    cpu_threads: Exp[NonNegInt] = 1  # torch threads on CPU; results depend on it; 0 = torch default

    def _rules(self) -> Iterator[tuple[str, str]]:
        yield from seed_rules(self.seeds)
        if self.min_objects > self.max_objects:
            yield "min_objects", f"must be ≤ max_objects ({self.max_objects}), got {self.min_objects}"
