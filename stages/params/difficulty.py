"""`difficulty`: the difficulty rating and the reasoning-token budget it sets."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Literal

from annotated_types import Ge, Le

from stages.core.params import Fraction, NonNegInt, PosInt
from stages.core.typed_config import Exp, ExpPath, Server


@dataclass(frozen=True)
class DifficultyParams:
    backend: Server[Literal["heuristic", "mllm"]] = "heuristic"  # mllm: the teacher client rates (JSON output)
    easy_below: Exp[Annotated[float, Ge(1), Le(10)]] = 4.0  # D < easy_below → easy (VideoSeg-R1 uses two thresholds)
    hard_from: Exp[Annotated[float, Ge(1), Le(10)]] = 6.5  # D ≥ hard_from → hard
    min_budget: Exp[PosInt] = 128  # reasoning-token budget L(D) at D = 1
    max_budget: Exp[PosInt] = 768  # L(D) at D = 10 (linear in between, multiples of 16)
    json_retries: Exp[NonNegInt] = 2  # extra MLLM calls when the rating JSON does not validate
    cache_dir: ExpPath[str] = "data/difficulty/cache"
    max_error_share: Exp[Fraction] = 0.2  # mllm: above this share of unanswered samples the stage fails

    def _rules(self) -> Iterator[tuple[str, str]]:
        if self.easy_below > self.hard_from:
            yield "easy_below", f"must be ≤ hard_from ({self.hard_from:g}), got {self.easy_below:g}"
        if self.min_budget > self.max_budget:
            yield "min_budget", f"must be ≤ max_budget ({self.max_budget}), got {self.min_budget}"
