"""`finetune_sam2`: the pre-trained SAM2 trained further, one mask on tracked frames."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from annotated_types import Ge, Le, MinLen

from stages.core.params import PosFloat, PosInt, Seed
from stages.core.typed_config import Exp, ExpPath, Server
from stages.params.pretrain_sam2 import PretrainSam2Params


@dataclass(frozen=True)
class FinetuneSam2Params(PretrainSam2Params):
    """The pre-trained SAM2 trained further (`finetune_sam2`): pretrain_sam2's loop and recipe from its output, with
    the decoder giving one mask on tracked frames. Three candidates on a tracked frame leave the memory unsure which
    one is the target (the loss trains only the best; the IoU head picks the kept one, on another object on 55 % of
    tracked frames); with one, the loss falls on the mask the memory is built from."""

    seeds: Exp[Annotated[tuple[Seed, ...], MinLen(1)]] = (10,)
    base: ExpPath[str] = "models/pretrain_sam2"  # the SAM2 it starts from (pretrain_sam2's committed output)
    # model.pt + config.yaml; runs only when sam2.checkpoint is in it. Under models/pretrain*/: the frozen pre-trained
    # weights are the only files over 5 MB git tracks
    out_dir: ExpPath[str] = "models/pretrain_sam2_finetuned"
    checkpoint_dir: Server[str] = "models/checkpoints/finetune_sam2"
    steps: Exp[PosInt] = 400
    clips_per_step: Exp[Annotated[int, Ge(1), Le(64)]] = 4
    clip_frames: Exp[Annotated[int, Ge(2)]] = 8
    learning_rate: Exp[PosFloat] = 1.0e-4
    # the model trained, checked and published answers a tracked frame with one mask
    # (`++model.multimask_output_for_tracking=false` added to the base's config); false: as the base does (three)
    one_mask_tracking: Exp[bool] = True
