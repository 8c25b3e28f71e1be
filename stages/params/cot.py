"""`cot`: which pools get teacher reasoning traces, and how many."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from annotated_types import MinLen

from stages.core.params import Fraction, PosInt
from stages.core.typed_config import Exp, ExpPath

PoolName = Literal["sft", "grpo", "eval"]


@dataclass(frozen=True)
class CotParams:
    pools: Exp[Annotated[tuple[PoolName, ...], MinLen(1)]] = ("sft",)  # pools that get reasoning traces
    traces_per_sample: Exp[PosInt] = 1  # teacher calls per sample (different template draws / seeds)
    cache_dir: ExpPath[str] = "data/cot/cache"  # persistent response cache (DVC persist: true)
    max_error_share: Exp[Fraction] = 0.2  # above this share of unanswered requests the stage fails (nothing recorded)
