"""`filter`: the checks a reasoning trace must pass."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from stages.core.params import Fraction, NonNegInt, PosInt
from stages.core.typed_config import Exp


@dataclass(frozen=True)
class FilterParams:
    min_chars: Exp[NonNegInt] = 120  # length bounds of a trace
    max_chars: Exp[PosInt] = 4000
    near_duplicate_ratio: Exp[Fraction] = 0.9  # difflib ratio at/above which a second trace of a sample is dropped
    check_faithfulness: Exp[bool] = True  # step-3 location words must agree with the ground-truth box

    def _rules(self) -> Iterator[tuple[str, str]]:
        if self.min_chars > self.max_chars:
            yield "min_chars", f"must be ≤ max_chars ({self.max_chars}), got {self.min_chars}"
