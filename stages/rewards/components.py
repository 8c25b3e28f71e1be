"""Reward components: small pure functions of one parsed rollout, each in [0, 1].

Every component receives a `RewardContext` (the parsed answer — never None here: a parse failure is
scored by `score_answer` before any component runs, with only the format credit its text earns — the
ground truth, the task's answer schema and the reward params) and returns a float in [0, 1]. Sources:
- Veason-R1 (paper eq. 3–8 and `SitongGong/Veason-R1` `verl/utils/reward_score/video_match_keyframe_sam_sft_mod.py`):
  format, keyframe, spatial, consistency.
- RCoT-Seg / VisionReasoner: thresholded IoU / box-L1 / point match (`rcot_match`), AKS option.
- VideoSeg-R1: negative-point reward, VisionReasoner's non-repeat reward (the soft length penalty is a
  multiplier: score.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy import ndimage

from schemas.answer import Answer, AnswerSchema, GroundTruth, format_credit
from stages.core import rle
from stages.params.reward import RewardParams
from stages.rewards.geometry import box_centres, clip_boxes, hungarian, iou_matrix, mask_iou

# (keyframe position, matched boxes[, extra prompt points per box]) → predicted union mask per shown frame,
# (T, H, W) bool. The points ((x, y, label), label 1 positive / 0 negative) are passed only when the answer has
# them (VideoSeg-R1), so a boxes-only segmenter keeps working for the other tasks.
MasksFor = Callable[..., np.ndarray]
Prompts = tuple[tuple[tuple[float, float, int], ...], ...]


@dataclass(frozen=True)
class Match:
    """Hungarian matching of predicted boxes to the ground-truth boxes at the answer's frame."""

    position: int  # index of the answer's frame among the shown frames
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
    schema: AnswerSchema
    masks_for: MasksFor | None = None

    @cached_property
    def position(self) -> int | None:
        """The shown frame the answer is about: its keyframe timestamp when its schema has one (None when
        that timestamp was not shown), else the one frame the task shows (the ground-truth keyframe)."""
        return answer_position(self.answer, self.gt, self.schema)

    @cached_property
    def match(self) -> Match | None:
        """The IoU matching at the answer's frame; None when that frame was not shown."""
        return match_boxes(self.answer, self.gt, self.position)

    @cached_property
    def gt_masks(self) -> list[np.ndarray]:
        """Union ground-truth mask per shown frame."""
        height, width = self.gt.image_size
        return [rle.decode(m, height, width) for m in self.gt.masks]

    @property
    def scale(self) -> float:
        """Pixel thresholds are stated at `threshold_size`; this scales them to the image shown."""
        return max(self.gt.image_size) / self.params.threshold_size


def answer_position(answer: Answer, gt: GroundTruth, schema: AnswerSchema) -> int | None:
    """See `RewardContext.position`."""
    if "keyframe_timestamp" in schema.keys:
        return gt.frame_position(answer.keyframe_timestamp)
    return gt.frame_position(gt.keyframe_timestamp)


def match_boxes(answer: Answer, gt: GroundTruth, position: int | None) -> Match | None:
    """Match the answer's boxes to the ground truth at `position` (Hungarian on 1 − IoU)."""
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


def format_score(text: str, schema: AnswerSchema, gt: GroundTruth) -> float:
    """0.5 for exactly `<think>…</think><answer>…</answer>` + 0.5 × the answer-content credit
    (`schemas.answer.content_credit`: for boxes, the share of well-formed boxes, counted only with an
    integer `keyframe_timestamp` where the schema has one, as the released Veason-R1 code does).

    One formula for parsed and unparsed completions. The released code gives 1 + 1; halved here so every
    component lies in [0, 1] and the weights say how much each counts.
    """
    tags, content = format_credit(text, schema, empty_boxes_ok=gt.no_target)
    return 0.5 * tags + 0.5 * content


def format_reward(ctx: RewardContext) -> float:
    """`format_score` of the rollout's text."""
    return format_score(ctx.answer.text, ctx.schema, ctx.gt)


def keyframe_reward(ctx: RewardContext) -> float:
    """Target area at the chosen frame ÷ the largest target area over the shown frames; 0 if not shown.
    A no-target ground truth: 1 for any shown timestamp (no frame shows the target better)."""
    position = ctx.position
    if position is None:
        return 0.0
    largest = max(ctx.gt.union_areas)
    if largest <= 0:
        return 1.0
    return float(min(max(ctx.gt.union_areas[position] / largest, 0.0), 1.0))


def spatial_reward(ctx: RewardContext) -> float:
    """Σ matched IoU ÷ max(#pred, #gt) at the chosen frame; 0 if not shown. No target there and no box
    predicted: 1 (nothing to find, nothing claimed)."""
    match = ctx.match
    if match is None:
        return 0.0
    if len(match.gt) == 0 or len(match.pred) == 0:
        return float(len(match.gt) == 0 and len(match.pred) == 0)
    total = match.iou[match.rows, match.cols].sum()
    return float(total / max(len(match.pred), len(match.gt)))


def consistency_reward(ctx: RewardContext) -> float:
    """Mean IoU over the shown frames of SAM2 masks propagated from the matched boxes vs the union GT mask.

    No box predicted for a no-target ground truth: the empty prediction against empty masks, 1.

    Raises:
        RuntimeError: no SAM2 segmenter was given (a configuration error, not a model error).
    """
    match = ctx.match
    if match is None:
        return 0.0
    if len(match.rows) == 0:
        return float(ctx.gt.no_target and len(match.pred) == 0)
    if ctx.masks_for is None:
        raise RuntimeError("the consistency reward needs a SAM2 segmenter (masks_for); none was configured")
    boxes = tuple(tuple(float(v) for v in match.pred[r]) for r in sorted(match.rows))
    prompts = prompt_points(ctx.answer, match)
    pred = ctx.masks_for(match.position, boxes, prompts) if prompts else ctx.masks_for(match.position, boxes)
    if len(pred) != len(ctx.gt_masks):
        raise RuntimeError(f"segmenter returned {len(pred)} frames for {len(ctx.gt_masks)} shown frames")
    return float(np.mean([mask_iou(p, g) for p, g in zip(pred, ctx.gt_masks, strict=True)]))


def prompt_points(answer: Answer, match: Match) -> Prompts:
    """SAM2 point prompts of the matched boxes (in `sorted(match.rows)` order) from a VideoSeg-R1 answer: each
    box's positive point (label 1) and the negative points (label 0) nearest to that box; () when the answer
    has no points (boxes alone prompt SAM2)."""
    rows = sorted(int(r) for r in match.rows)
    if not rows or (answer.points is None and not answer.negative_points):
        return ()
    prompts: list[list[tuple[float, float, int]]] = [[] for _ in rows]
    if answer.points is not None:
        for i, r in enumerate(rows):
            prompts[i].append((float(answer.points[r][0]), float(answer.points[r][1]), 1))
    for x, y in answer.negative_points or ():
        gaps = [max(match.pred[r][0] - x, 0, x - match.pred[r][2]) ** 2 + max(match.pred[r][1] - y, 0,
                y - match.pred[r][3]) ** 2 for r in rows]
        prompts[int(np.argmin(gaps))].append((float(x), float(y), 0))
    return tuple(tuple(p) for p in prompts)


def _gt_points(ctx: RewardContext, match: Match) -> np.ndarray:
    """KTG point per present object at the ground-truth keyframe; box centres elsewhere or when missing."""
    centres = box_centres(match.gt)
    if ctx.gt.frame_position(ctx.gt.keyframe_timestamp) != match.position:
        return centres
    points = centres.copy()
    for i, k in enumerate(match.gt_objects):
        if k < len(ctx.gt.points) and ctx.gt.points[k] is not None:
            points[i] = ctx.gt.points[k]
    return points


def rcot_match_reward(ctx: RewardContext) -> float:
    """RCoT-Seg / VisionReasoner accuracy: Hungarian match on three thresholded scores, normalised.

    Per pair: [IoU > iou_threshold] + [mean |Δ| of the four box corners < box_l1_threshold] + [Euclidean
    distance of the points < point_l1_threshold AND the predicted point inside the ground-truth box],
    pixel thresholds scaled from threshold_size to the image. Sum of matched pair scores ÷
    (3 · max(#pred, #gt)). Predicted points: the answer's `point_2d_list` when its schema has one, else
    box centres. No target at that frame and no box predicted: 1.
    """
    match = ctx.match
    if match is None:
        return 0.0
    if len(match.gt) == 0 or len(match.pred) == 0:
        return float(len(match.gt) == 0 and len(match.pred) == 0)
    p = ctx.params
    pred_points = (np.asarray(ctx.answer.points, dtype=np.float64).reshape(-1, 2)
                   if ctx.answer.points is not None and len(ctx.answer.points) == len(match.pred)
                   else box_centres(match.pred))
    gt_points = _gt_points(ctx, match)
    iou_ok = match.iou > p.iou_threshold
    l1 = np.abs(match.pred[:, None, :] - match.gt[None, :, :]).mean(axis=2)
    l1_ok = l1 < p.box_l1_threshold * ctx.scale
    dist = np.hypot(pred_points[:, None, 0] - gt_points[None, :, 0], pred_points[:, None, 1] - gt_points[None, :, 1])
    x, y = pred_points[:, None, 0], pred_points[:, None, 1]
    in_box = (x >= match.gt[None, :, 0]) & (x <= match.gt[None, :, 2]) & (y >= match.gt[None, :, 1]) \
        & (y <= match.gt[None, :, 3])
    point_ok = (dist < p.point_l1_threshold * ctx.scale) & in_box
    score = iou_ok.astype(float) + l1_ok + point_ok
    rows, cols = hungarian(3.0 - score)
    return float(score[rows, cols].sum() / (3.0 * max(len(match.pred), len(match.gt))))


def aks_option_reward(ctx: RewardContext) -> float:
    """RCoT-Seg AKS: 1 when the answer's option equals the ground-truth option.

    Raises:
        ValueError: the sample carries no AKS option (a data bug: an AKS sample without its option).
    """
    if ctx.gt.aks_option is None:
        raise ValueError("aks_option reward on a sample whose ground truth has no aks_option")
    return float(ctx.answer.option == ctx.gt.aks_option)


def negative_point_reward(ctx: RewardContext) -> float:
    """VideoSeg-R1: 1/K for each of the K negative points whose distance to the target is positive and at
    most τ_neg (`negative_point_tau` px at threshold_size, scaled to the image). The distance is the paper's
    minimum L1 distance from the point's pixel to the target's pixels at the answer's frame, |Δx| + |Δy|
    (0 inside or on the target); a point outside the image, or any point when no target is there, is not
    valid."""
    points = ctx.answer.negative_points
    position = ctx.position
    if not points or position is None:
        return 0.0
    mask = ctx.gt_masks[position]
    if not mask.any():
        return 0.0
    # the taxicab chamfer transform is exact for the L1 metric (4-neighbour steps of 1)
    distance = ndimage.distance_transform_cdt(~mask, metric="taxicab")
    height, width = mask.shape
    tau = ctx.params.negative_point_tau * ctx.scale
    valid = 0
    for x, y in points:
        if 0 <= x < width and 0 <= y < height:
            d = float(distance[int(y), int(x)])
            valid += 0 < d <= tau
    return valid / len(points)


def non_repeat_reward(ctx: RewardContext) -> float:
    """VisionReasoner / VideoSeg-R1 non-repeat, counted as its reference code counts: the whole completion
    split at '.', blank pieces dropped; every piece already seen is a repeat; 0 from the second repeat
    on (one repeated sentence is tolerated), else 1."""
    seen: set[str] = set()
    repeats = 0
    for sentence in (s.strip() for s in ctx.answer.text.split(".")):
        if not sentence:
            continue
        if sentence in seen:
            repeats += 1
            if repeats >= 2:
                return 0.0
        seen.add(sentence)
    return 1.0
