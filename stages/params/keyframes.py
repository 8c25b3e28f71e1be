"""`keyframes`: the frames shown to the model and the keyframe drawn among them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from stages.core.params import NonNegInt, PosInt
from stages.core.typed_config import Exp


@dataclass(frozen=True)
class KeyframesParams:
    n_frames: Exp[PosInt] = 6  # N frames shown to the model (Veason-R1: 6)
    top_k: Exp[PosInt] = 5  # keyframe drawn among the top-k frames by target area (Veason-R1: 5)
    mode: Exp[Literal["topk_random", "max_area"]] = "topk_random"  # max_area: RCoT-Seg's largest-area frame
    # anchor: N frames around the keyframe (the papers' sampling); uniform: the evaluation's spread over the whole
    # video, the keyframe drawn among those shown frames
    frames: Exp[Literal["anchor", "uniform"]] = "anchor"
    train_size: Exp[PosInt] = 112  # frames resized to train_size² for training (paper: 560; small on CPU)
    # side of single-frame task views (AKS, KTG, VideoSeg-R1); 0 = train_size (RCoT: 840)
    keyframe_size: Exp[NonNegInt] = 0
