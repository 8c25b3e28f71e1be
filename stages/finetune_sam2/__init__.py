"""`finetune_sam2` stage: train the pre-trained tiny SAM2 further, with one mask on tracked frames.

`pretrain_sam2` trains SAM2 as SAM2 is trained: on a tracked frame the decoder gives three candidate masks, the
loss trains the best of them and the IoU head chooses the one kept, so nothing teaches the memory which candidate
is the target — on 55 % of tracked frames the kept mask lay on another object. This stage starts from
`pretrain_sam2`'s output and runs the same loop and recipe (`stages.pretrain_sam2.train_and_publish`: generated
clips from their own seed stream, SAM2's loss through SAM2's own modules, the held-out tracking check before and
after, the best seed kept, resumable, bf16 `{"model": state_dict}`) on a model whose config adds
`++model.multimask_output_for_tracking=false` (`finetune_sam2.one_mask_tracking`): one mask on a tracked frame, and
the loss falls on the mask the memory is built from. The config published with the weights carries the override,
so the evaluation and the GRPO reward track the way the model was trained.

The stage runs only when `sam2.checkpoint` is `<finetune_sam2.out_dir>/model.pt`; otherwise it records a skip.
"""

from __future__ import annotations

from pathlib import Path

from stages.core.report import StageReport, skipped_report
from stages.params.finetune_sam2 import FinetuneSam2Params
from stages.params.sam2 import Sam2Params
from stages.pretrain_sam2 import CHECKPOINT, check_base, curve_file, train_and_publish, uses, write_curve

STAGE = "finetune_sam2"
ONE_MASK_TRACKING = "++model.multimask_output_for_tracking=false"  # sam2's own config key (SAM2Base)


def architecture(params: FinetuneSam2Params) -> tuple[str, ...]:
    """The Hydra overrides the stage adds to its base's config: fixed ones chosen by the params' switches, never a
    free-form string (a params value does not reach the model builder as an expression)."""
    return (ONE_MASK_TRACKING,) if params.one_mask_tracking else ()


def finetune_sam2(params: FinetuneSam2Params, sam2: Sam2Params, out_dir: Path, metrics_dir: Path) -> StageReport:
    """Train the SAM2 in `finetune_sam2.base` once per seed; write the best seed's `out_dir/model.pt` (bf16),
    `out_dir/config.yaml` (the base's, with `architecture`'s overrides) and every seed's figures in seeds.json.

    Raises:
        FileNotFoundError: `finetune_sam2.base` lacks model.pt or config.yaml (one line, before anything is removed).
        SeedFailed: a seed's process failed (it has printed why); the finished seeds' results are kept for a rerun.
    """
    out_dir = Path(out_dir)
    if not uses(params.out_dir, sam2):
        write_curve(Path(metrics_dir) / curve_file(STAGE), [])  # a declared output: header only
        return skipped_report(STAGE, out_dir, f"sam2.checkpoint {sam2.checkpoint} is not "
                              f"{Path(params.out_dir) / CHECKPOINT}: the SAM2 used is another checkpoint")
    check_base(STAGE, params.base, "the pretrain_sam2 stage writes models/pretrain_sam2, committed to git")
    return train_and_publish(STAGE, params, out_dir, Path(metrics_dir),
                             title="vrsflow tiny SAM2 fine-tuned with one mask on tracked frames (box prompt → "
                                   "tracked masks)",
                             code_modules=["stages.finetune_sam2", "stages.pretrain_sam2"],
                             architecture=architecture(params))
