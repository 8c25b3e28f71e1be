"""`benchmarks`: the `bench@<name>` stages (one per public benchmark) and the models they score."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from stages.core.params import NonEmptyNames, NonNegInt
from stages.core.typed_config import Exp, ExpPath

BENCHMARK_NAMES = ("revos", "mevis", "reasonvos", "refytvos", "refdavis")


@dataclass(frozen=True)
class BenchmarksParams:
    names: Exp[NonEmptyNames] = BENCHMARK_NAMES  # one `bench@<name>` DVC stage each (docs/benchmarks.md)
    models: ExpPath[dict[str, str]] = field(default_factory=lambda: {  # table rows: label → Qwen2.5-VL folder
        "base": "models/tiny/qwen25vl", "sft": "models/sft/merged", "grpo": "models/grpo/merged"})
    # name → published root; missing = synthetic from data.root
    roots: ExpPath[dict[str, str]] = field(default_factory=dict)
    # name → split of a given root; missing = evaluation split
    splits: Exp[dict[str, str]] = field(default_factory=dict)
    videos: Exp[NonNegInt] = 1  # first videos per benchmark; 0 = all
    expressions: Exp[NonNegInt] = 2  # first expressions of those (Ref-DAVIS17: whole objects, 4 each); 0 = all
    # mevis / reasonvos: an expression whose prediction video folder is missing scores 0 (zero) or is left out
    # (skip); authors = the dataset authors' script (mevis: zero, reasonvos: skip)
    missing: Exp[Literal["authors", "zero", "skip"]] = "authors"
    # a `ground_truth` row (the ground-truth answers through the same segmenter and protocol: the ceiling), an
    # `empty_answer` row (no boxes: empty masks, what answering nothing scores) and, in the pipeline, a
    # `constant_answer` row (the SFT traces' prior given to every query)
    reference: Exp[bool] = True

    def _rules(self) -> Iterator[tuple[str, str]]:
        for name in (*self.names, *self.roots, *self.splits):
            if name not in BENCHMARK_NAMES:
                yield "names", f"unknown benchmark {name!r} (one of {', '.join(BENCHMARK_NAMES)})"
        if not self.models:
            yield "models", "needs at least one model"
        for label in ("ground_truth", "empty_answer", "constant_answer"):
            if label in self.models:
                yield "models", f"{label!r} is the label of a reference row (benchmarks.reference): rename it"
