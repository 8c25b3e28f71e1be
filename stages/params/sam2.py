"""`sam2`: the SAM2 checkpoint the consistency reward and the evaluation segment with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from stages.core.typed_config import Exp, ExpPath


@dataclass(frozen=True)
class Sam2Params:
    checkpoint: ExpPath[str] = "models/tiny/sam2/model.pt"  # {"model": state_dict}, as the official sam2.1_hiera_*.pt
    config: ExpPath[str] = "models/tiny/sam2/config.yaml"  # a sam2 package config name or a vrsflow config file
    dtype: Exp[Literal["auto", "float32", "bfloat16"]] = "auto"
