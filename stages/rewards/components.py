"""Reward components: small pure functions of one parsed rollout, each in [0, 1].

Every component receives a `RewardContext` (the parsed answer — never None here: a parse failure is
scored by `compute_score` before any component runs, with only the format credit its tags earn — the
ground truth and the reward params) and returns a float in [0, 1]. Sources:
- Veason-R1 (paper eq. 3–8 and `SitongGong/Veason-R1` `verl/utils/reward_score/video_match_keyframe_sam_sft_mod.py`):
  format, keyframe, spatial, consistency.
- RCoT-Seg / VisionReasoner: thresholded IoU / box-L1 / point-L1 Hungarian match (`rcot_match`), AKS option.
- VideoSeg-R1: negative-point reward, non-repeat reward (the soft length penalty is a multiplier: score.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from schemas.answer import Answer, GroundTruth, format_credit, well_formed_box_share
from stages.core import rle
from stages.core.params import RewardParams
from stages.rewards.geometry import box_centres, clip_boxes, hungarian, iou_matrix, mask_iou

# (keyframe position, matched boxes) → predicted union mask per shown frame, (T, H, W) bool
MasksFor = Callable[[int, tuple[tuple[float, float, float, float], ...]], np.ndarray]


@dataclass(frozen=True)
class Match:
    """Hungarian matching of predicted boxes to the ground-truth boxes at the predicted keyframe."""

    position: int  # index of the predicted keyframe among the shown frames
    pred: np.ndarray  # (M, 4) predicted boxes clipped to the image
    gt: np.ndarray  # (N, 4) ground-truth boxes of the objects present at that frame
    gt_objects: tuple[int, ...]  # object index of each ground-truth box
    rows: np.ndarray  # matched prediction indices
    cols: np.ndarray  # matched ground-truth indices
    iou: np.ndarray  # (M, N)


@dataclass
class RewardContext:
    """Everything a component may read about one rollout."""

    answer: Answer
    gt: GroundTruth
    params: RewardParams
    masks_for: MasksFor | None = None
    response_tokens: int | None = None
    _cache: dict = field(default_factory=dict, repr=False)

    @cached_property
    def match(self) -> Match | None:
        """The IoU matching at the predicted keyframe; None when that timestamp was not shown."""
        return match_boxes(self.answer, self.gt)

    @cached_property
    def gt_masks(self) -> list[np.ndarray]:
        """Union ground-truth mask per shown frame."""
        height, width = self.gt.image_size
        return [rle.decode(m, height, width) for m in self.gt.masks]


def match_boxes(answer: Answer, gt: GroundTruth) -> Match | None:
    """Match the answer's boxes to the ground truth at the answer's keyframe (Hungarian on 1 − IoU)."""
    position = gt.frame_position(answer.keyframe_timestamp)
    if position is None:
        return None
    height, width = gt.image_size
    pred = clip_boxes(answer.boxes, height, width)
    present = [(k, b) for k, b in enumerate(gt.boxes[position]) if b is not None]
    gt_boxes = np.asarray([b for _, b in present], dtype=np.float64).reshape(-1, 4)
    iou = iou_matrix(pred, gt_boxes)
    rows, cols = hungarian(1.0 - iou)
    keep = iou[rows, cols] > 0  # a pair with no overlap is not a match (nothing to propagate)
    rows, cols = rows[keep], cols[keep]
    return Match(position, pred, gt_boxes, tuple(k for k, _ in present), rows, cols, iou)


def _format_score(tags_exact: bool, box_share: float) -> float:
    return 0.5 * tags_exact + 0.5 * box_share


def format_reward(ctx: RewardContext) -> float:
    """0.5 for exactly `<think>…</think><answer>…</answer>` + 0.5 × the share of well-formed boxes
    (four numbers, x1 < x2, y1 < y2); an answer with no box gets no box half.

    The released Veason-R1 code gives 1 + 1 (tags, spread over well-formed boxes); halved here so every
    component lies in [0, 1] and the weights say how much each counts. A completion whose answer does
    not parse is scored by `unparsed_format_reward` instead.
    """
    return _format_score(ctx.answer.well_formed, well_formed_box_share(ctx.answer.boxes))


def unparsed_format_reward(text: str) -> float:
    """The format credit of a completion whose answer JSON does not parse: the same two halves, read
    leniently (`schemas.answer.format_credit`), so right tags around a broken box still count."""
    return _format_score(*format_credit(text))


def keyframe_reward(ctx: RewardContext) -> float:
    """Target area at the chosen frame ÷ the largest target area over the shown frames; 0 if not shown.

    Raises:
        ValueError: the ground truth shows no target in any frame (such samples must not reach GRPO).
    """
    largest = max(ctx.gt.union_areas)
    if largest <= 0:
        raise ValueError("ground truth has no target area in any shown frame")
    position = ctx.gt.frame_position(ctx.answer.keyframe_timestamp)
    if position is None:
        return 0.0
    return float(min(max(ctx.gt.union_areas[position] / largest, 0.0), 1.0))


def spatial_reward(ctx: RewardContext) -> float:
    """Σ matched IoU ÷ max(#pred, #gt) at the chosen keyframe; 0 if not shown or no target there."""
    match = ctx.match
    if match is None or len(match.gt) == 0 or len(match.pred) == 0:
        return 0.0
    total = match.iou[match.rows, match.cols].sum()
    return float(total / max(len(match.pred), len(match.gt)))


def consistency_reward(ctx: RewardContext) -> float:
    """Mean IoU over the shown frames of SAM2 masks propagated from the matched boxes vs the union GT mask.

    Raises:
        RuntimeError: no SAM2 segmenter was given (a configuration error, not a model error).
    """
    match = ctx.match
    if match is None or len(match.rows) == 0:
        return 0.0
    if ctx.masks_for is None:
        raise RuntimeError("the consistency reward needs a SAM2 segmenter (masks_for); none was configured")
    boxes = tuple(tuple(float(v) for v in match.pred[r]) for r in sorted(match.rows))
    pred = ctx.masks_for(match.position, boxes)
    if len(pred) != len(ctx.gt_masks):
        raise RuntimeError(f"segmenter returned {len(pred)} frames for {len(ctx.gt_masks)} shown frames")
    return float(np.mean([mask_iou(p, g) for p, g in zip(pred, ctx.gt_masks, strict=True)]))


def _gt_points(ctx: RewardContext, match: Match) -> np.ndarray:
    """KTG point per present object at the ground-truth keyframe; box centres elsewhere or when missing."""
    centres = box_centres(match.gt) if len(match.gt) else np.zeros((0, 2))
    if ctx.gt.frame_position(ctx.gt.keyframe_timestamp) != match.position:
        return centres
    points = centres.copy()
    for i, k in enumerate(match.gt_objects):
        if k < len(ctx.gt.points) and ctx.gt.points[k] is not None:
            points[i] = ctx.gt.points[k]
    return points


def rcot_match_reward(ctx: RewardContext) -> float:
    """RCoT-Seg / VisionReasoner accuracy: Hungarian match on three thresholded scores, normalised.

    Per pair: [IoU > iou_threshold] + [mean corner L1 < box_l1_threshold] + [point distance (L1 mean)
    < point_l1_threshold], pixel thresholds scaled from threshold_size to the image. Sum of matched
    pair scores ÷ (3 · max(#pred, #gt)). Predicted points: the answer's `point_2d_list` when it has
    one per box, else box centres.
    """
    match = ctx.match
    if match is None or len(match.gt) == 0 or len(match.pred) == 0:
        return 0.0
    p = ctx.params
    scale = max(ctx.gt.image_size) / p.threshold_size
    pred_points = (np.asarray(ctx.answer.points, dtype=np.float64)
                   if ctx.answer.points is not None and len(ctx.answer.points) == len(match.pred)
                   else box_centres(match.pred))
    gt_points = _gt_points(ctx, match)
    iou_ok = match.iou > p.iou_threshold
    l1 = np.abs(match.pred[:, None, :] - match.gt[None, :, :]).mean(axis=2)
    l1_ok = l1 < p.box_l1_threshold * scale
    dist = np.abs(pred_points[:, None, :] - gt_points[None, :, :]).mean(axis=2)
    point_ok = dist < p.point_l1_threshold * scale
    score = iou_ok.astype(float) + l1_ok + point_ok
    rows, cols = hungarian(3.0 - score)
    return float(score[rows, cols].sum() / (3.0 * max(len(match.pred), len(match.gt))))


def aks_option_reward(ctx: RewardContext) -> float:
    """RCoT-Seg AKS: 1 when the answer's option equals the ground-truth option.

    Raises:
        ValueError: the sample carries no AKS option (aks_option used on a non-AKS pool).
    """
    if ctx.gt.aks_option is None:
        raise ValueError("aks_option reward on a sample whose ground truth has no aks_option")
    return float(ctx.answer.option == ctx.gt.aks_option)


def negative_point_reward(ctx: RewardContext) -> float:
    """VideoSeg-R1: fraction of negative points inside the image and outside the target at the chosen frame."""
    points = ctx.answer.negative_points
    position = ctx.gt.frame_position(ctx.answer.keyframe_timestamp)
    if not points or position is None:
        return 0.0
    height, width = ctx.gt.image_size
    mask = ctx.gt_masks[position]
    good = 0
    for x, y in points:
        if 0 <= x < width and 0 <= y < height and not mask[int(y), int(x)]:
            good += 1
    return good / len(points)


_SENTENCE = re.compile(r"[.!?\n]+")


def non_repeat_reward(ctx: RewardContext) -> float:
    """VisionReasoner / VideoSeg-R1: 1 when no sentence of the reasoning repeats; 0 for empty reasoning."""
    sentences = [s.strip().lower() for s in _SENTENCE.split(ctx.answer.think) if s.strip()]
    if not sentences:
        return 0.0
    return float(len(set(sentences)) == len(sentences))
