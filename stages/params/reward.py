"""`reward`: the verifiable reward GRPO trains on (components, weights, thresholds)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, fields

from stages.core.params import Fraction, NonEmptyNames, NonNegFloat, NonPosFloat, PosFloat, PosInt
from stages.core.typed_config import Exp, ExpPath


@dataclass(frozen=True)
class RewardWeights:
    format: Exp[NonNegFloat] = 1.0  # weight of each reward component (Veason-R1 / RCoT-Seg / VideoSeg-R1: all 1)
    keyframe: Exp[NonNegFloat] = 1.0
    spatial: Exp[NonNegFloat] = 1.0
    consistency: Exp[NonNegFloat] = 1.0
    rcot_match: Exp[NonNegFloat] = 1.0
    aks_option: Exp[NonNegFloat] = 2.0  # RCoT-Seg λ_a = 2 (λ_f = the format weight = 1)
    negative_point: Exp[NonNegFloat] = 1.0
    non_repeat: Exp[NonNegFloat] = 1.0


@dataclass(frozen=True)
class RewardParams:
    components: Exp[NonEmptyNames] = ("format", "keyframe", "spatial", "consistency")  # Veason-R1's four
    weights: RewardWeights = field(default_factory=RewardWeights)
    failure_score: Exp[NonPosFloat] = 0.0  # base total of an unparseable completion (≤ 0), plus its format credit
    iou_threshold: Exp[Fraction] = 0.5  # RCoT-Seg / VisionReasoner: a match counts when IoU > 0.5
    box_l1_threshold: Exp[PosFloat] = 10.0  # mean box-corner L1 in pixels at threshold_size (VisionReasoner: 10)
    point_l1_threshold: Exp[PosFloat] = 30.0  # point distance in pixels at threshold_size (VisionReasoner: 30)
    threshold_size: Exp[PosInt] = 840  # image side the pixel thresholds are stated at (RCoT-Seg: 840)
    # VideoSeg-R1 τ_neg: negative points count within this many px of the target
    negative_point_tau: Exp[PosFloat] = 40.0
    length_penalty: Exp[bool] = False  # VideoSeg-R1 soft length penalty (multiplies the total)
    length_beta: Exp[NonNegFloat] = 0.002  # penalty per token over the difficulty budget
    # tokenizer folder counting reasoning tokens in both engines; "" = whitespace words
    length_tokenizer: ExpPath[str] = ""
    mask_threshold: Exp[float] = 0.0  # SAM2 mask logit threshold for the consistency reward

    def _rules(self) -> Iterator[tuple[str, str]]:
        known = [f.name for f in fields(RewardWeights)]
        for name in self.components:
            if name not in known:
                yield "components", f"unknown component '{name}' (known: {', '.join(known)})"
        if len(set(self.components)) != len(self.components):
            yield "components", f"a component is listed twice: {list(self.components)}"
