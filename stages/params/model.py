"""`model`: the Qwen2.5-VL checkpoint the training stages start from and the evaluation falls back to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from stages.core.typed_config import Exp, ExpPath


@dataclass(frozen=True)
class ModelParams:
    path: ExpPath[str] = "models/tiny/qwen25vl"  # local Qwen2.5-VL checkpoint folder (config, weights, processor)
    dtype: Exp[Literal["auto", "float32", "bfloat16"]] = "auto"  # auto: bf16 on GPU, fp32 on CPU
