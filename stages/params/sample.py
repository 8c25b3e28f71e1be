"""`sample`: the SFT / GRPO / evaluation pools drawn from the index."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from stages.core.params import NonEmptyNames, NonEmptyWeights, NonNegFloat, NonNegInt, PosFloat
from stages.core.typed_config import Exp, ExpPath


@dataclass(frozen=True)
class SampleParams:
    sft_first_k: Exp[NonNegInt] = 12  # SFT candidates: the first k expressions of each training video (Veason-R1: 10)
    sft_size: Exp[NonNegInt] = 0  # SFT pool size after the first-k rule; 0 = all (ReVOS: ~5.8K)
    grpo_size: Exp[NonNegInt] = 24  # GRPO pool size (paper: 10K)
    eval_size: Exp[NonNegInt] = 0  # evaluation pool size from the valid split; 0 = all
    disjoint: Exp[bool] = True  # no expression in two pools
    include_no_target_train: Exp[bool] = False  # Veason-R1 skips type 2 in training
    include_no_target_eval: Exp[bool] = True  # kept for evaluation (excluded from J&F aggregates there)
    motion_strata: Exp[bool] = False  # add a motion-heavy / static split to the strata
    motion_threshold: Exp[PosFloat] = 0.25  # target box-centre travel ÷ frame diagonal that counts as motion-heavy
    difficulty_table: ExpPath[str] = ""  # a difficulty scores parquet to stratify by level too; "" = off
    sft_tasks: Exp[NonEmptyNames] = ("veason",)  # tasks every SFT sample is trained on (stages/tasks)
    grpo_tasks: Exp[NonEmptyNames] = ("veason",)  # tasks of GRPO and eval samples, one per sample, by grpo_task_weights
    grpo_task_weights: Exp[NonEmptyWeights] = (1.0,)  # shares of grpo_tasks (RCoT-Seg: AKS 4K : KTG 6K)
    # single:multi-instance expressions in SFT/GRPO; 0 = as the source (RCoT: 3)
    single_multi_ratio: Exp[NonNegFloat] = 0.0

    def _rules(self) -> Iterator[tuple[str, str]]:
        if len(self.grpo_task_weights) != len(self.grpo_tasks):
            yield "grpo_task_weights", f"needs one weight per grpo task ({len(self.grpo_tasks)}), " \
                f"got {len(self.grpo_task_weights)}"
