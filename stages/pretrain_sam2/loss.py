"""SAM2's training loss (the paper's and `training/loss_fns.py`'s MultiStepMultiMasksAndIous, weights of the
released SAM2.1 configs), per frame of a clip:

    20 · focal(α 0.25, γ 2) + 1 · dice + 1 · L1(predicted IoU, actual IoU) + 1 · BCE(object score, present)

When SAM2 answers several candidate masks, the focal and dice terms take the candidate with the lowest focal +
dice (SAM's "minimum over outputs": only the best candidate learns the mask; every candidate's IoU prediction
learns its own IoU). The mask terms count only objects present in the frame; the object-score term counts all.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

FOCAL, DICE, IOU, OBJECT = 20.0, 1.0, 1.0, 1.0  # SAM2.1 training config weights
ALPHA, GAMMA = 0.25, 2.0


def focal(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Sigmoid focal loss per mask (mean over pixels): (..., H, W) → (...)."""
    p = logits.sigmoid()
    ce = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
    p_t = p * target + (1 - p) * (1 - target)
    weight = ALPHA * target + (1 - ALPHA) * (1 - target)
    return (weight * ce * (1 - p_t) ** GAMMA).flatten(-2).mean(-1)


def dice(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """1 − soft Dice per mask (+1 smoothing, as SAM2): (..., H, W) → (...)."""
    p, t = logits.sigmoid().flatten(-2), target.flatten(-2)
    return 1 - (2 * (p * t).sum(-1) + 1) / (p.sum(-1) + t.sum(-1) + 1)


def mask_iou(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """IoU of the thresholded mask (logit > 0) with the target per mask; 1 when both are empty."""
    p, t = (logits > 0).flatten(-2).float(), target.flatten(-2)
    inter = (p * t).sum(-1)
    union = p.sum(-1) + t.sum(-1) - inter
    return torch.where(union > 0, inter / union.clamp(min=1), torch.ones_like(union))


def frame_loss(multimask_logits: torch.Tensor, predicted_ious: torch.Tensor, object_logits: torch.Tensor,
               target: torch.Tensor, iou_weight: float = IOU) -> dict[str, torch.Tensor]:
    """The loss of one frame (`iou_weight`: the IoU term's weight in the total; SAM2.1's is 1).

    Args:
        multimask_logits: (B, M, H, W) SAM2's candidate mask logits at the input size.
        predicted_ious: (B, M) SAM2's IoU predictions.
        object_logits: (B, 1) SAM2's object-score logits.
        target: (B, H, W) float ground-truth masks.

    Returns:
        {"total", "focal", "dice", "iou", "object"}: scalars (mask terms averaged over the present objects).
    """
    present = (target.flatten(1).sum(1) > 0).float()
    targets = target.unsqueeze(1).expand_as(multimask_logits)
    focal_m, dice_m = focal(multimask_logits, targets), dice(multimask_logits, targets)
    best = (FOCAL * focal_m + DICE * dice_m).argmin(1, keepdim=True)
    actual = mask_iou(multimask_logits, targets).detach()
    n_present = present.sum().clamp(min=1)
    terms = {
        "focal": (focal_m.gather(1, best).squeeze(1) * present).sum() / n_present,
        "dice": (dice_m.gather(1, best).squeeze(1) * present).sum() / n_present,
        "iou": (F.l1_loss(predicted_ious, actual, reduction="none").mean(1) * present).sum() / n_present,
        "object": F.binary_cross_entropy_with_logits(object_logits.reshape(-1), present),
    }
    terms["total"] = (FOCAL * terms["focal"] + DICE * terms["dice"] + iou_weight * terms["iou"]
                      + OBJECT * terms["object"])
    return terms
