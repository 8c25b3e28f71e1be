"""Video segmentation metrics as the published ReVOS tables compute them.

- `j_measure`: region similarity J (IoU), DAVIS `db_eval_iou`: both empty → 1, one empty → 0.
- `f_measure`: boundary F, DAVIS `f_measure` (davis2017-evaluation `davis2017/metrics.py`, which VISA's
  ReVOS evaluator calls): 1-pixel boundary maps (`_seg2bmap`), a tolerance of ⌈0.008 × image diagonal⌉
  pixels, a boundary pixel matches when the other boundary has a pixel inside the disk of that radius
  around it (DAVIS: `cv2.dilate` with `skimage.morphology.disk`), precision/recall of matched boundary
  pixels, F = 2PR/(P+R). DAVIS decides on *boundaries*, so a mask with no boundary pixel (empty, or one
  that fills the frame: the image border is not a boundary) counts as "no boundary": empty vs full
  scores F = 1, exactly as the published evaluator does.
- `r_visa`: robustness exactly as VISA's `tools/eval_revos.py` + `tools/metrics.py` compute it — uint8
  ground truth summed over instances, predictions read as stored (0/255 PNGs), uint8 products that wrap.
  `r_binary`: the same formula on 0/1 masks (what the definition means).
- `aggregate`: the ReVOS protocol (per expression mean over frames, per subset mean over expressions,
  overall = mean of referring and reasoning, no-target expressions excluded), with VISA's rounding of
  per-expression percentages to 2 decimals, so that results equal VISA's `revos_valid.json`.

How J and F are computed (same integer counts as the published per-frame code, so the same values):
masks are packed 64 pixels to a machine word along each row (`np.packbits`), boundaries come from word
shifts, the disk dilation is the union over its rows of a horizontal dilation (shift-or) moved up or down
by that row's offset, and pixel counts are popcounts. Work is in chunks of `F_CHUNK` frames, so memory
stays bounded on long videos.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

BOUND_TH = 0.008  # DAVIS boundary tolerance, fraction of the image diagonal
TYPE_NAMES = {0: "referring", 1: "reasoning"}  # type_id 2 (no target) is excluded from the aggregates
METRICS = ("J", "F", "R_visa", "R_binary")
F_CHUNK = 32  # frames packed and dilated at once (bounds memory)
_WORD = np.dtype("<u8")  # little-endian words: pixel x is bit x % 64 of word x // 64


def _stack(masks: np.ndarray) -> np.ndarray:
    masks = np.asarray(masks)
    if masks.ndim == 2:
        return masks[None]
    if masks.ndim != 3:
        raise ValueError(f"masks must be (H, W) or (T, H, W), got shape {masks.shape}")
    return masks


def _check_shapes(gt: np.ndarray, pred: np.ndarray) -> None:
    if gt.shape != pred.shape:
        raise ValueError(f"ground truth {gt.shape} and prediction {pred.shape} differ in shape")


# --- bit-packed rows --------------------------------------------------------------------------------------


def _pack(masks: np.ndarray) -> np.ndarray:
    """(T, H, W) masks (non-zero = foreground) → (T, H, ⌈W/64⌉) uint64 words, padding bits 0."""
    bits = masks if masks.dtype == bool else masks != 0
    packed = np.packbits(bits, axis=-1, bitorder="little")
    pad = (-packed.shape[-1]) % 8
    if pad:
        packed = np.concatenate([packed, np.zeros((*packed.shape[:-1], pad), np.uint8)], axis=-1)
    return np.ascontiguousarray(packed).view(_WORD)


def _unpack(words: np.ndarray, width: int) -> np.ndarray:
    return np.unpackbits(words.view(np.uint8), axis=-1, count=width, bitorder="little").astype(bool)


def _from_right(a: np.ndarray) -> np.ndarray:
    """Each pixel takes the value of its east neighbour (x + 1); the last word's top bit gets 0."""
    out = a >> np.uint64(1)
    out[..., :-1] |= a[..., 1:] << np.uint64(63)
    return out


def _from_left(a: np.ndarray) -> np.ndarray:
    """Each pixel takes the value of its west neighbour (x − 1); pixel 0 gets 0."""
    out = a << np.uint64(1)
    out[..., 1:] |= a[..., :-1] >> np.uint64(63)
    return out


def _from_below(a: np.ndarray) -> np.ndarray:
    """Each row takes the row below it (y + 1); the last row gets 0."""
    out = np.zeros_like(a)
    out[:, :-1] = a[:, 1:]
    return out


def _column_bit(n_words: int, x: int) -> np.ndarray:
    mask = np.zeros(n_words, dtype=_WORD)
    mask[x // 64] = np.uint64(1) << np.uint64(x % 64)
    return mask


def _boundaries(seg: np.ndarray, width: int) -> np.ndarray:
    """DAVIS `_seg2bmap` on packed masks: a pixel is a boundary when it differs from its east, south
    or south-east neighbour; the last row only looks east, the last column only south, and the
    bottom-right pixel is never a boundary (the image border is not a boundary)."""
    east = _from_right(seg)
    south = _from_below(seg)
    b = (seg ^ east) | (seg ^ south) | (seg ^ _from_below(east))
    b[:, -1] = seg[:, -1] ^ east[:, -1]
    last = _column_bit(seg.shape[-1], width - 1)
    b &= ~last
    b |= (seg ^ south) & last
    b[:, -1] &= ~last
    return b


def _dilate(b: np.ndarray, radius: int) -> np.ndarray:
    """Packed binary dilation by the disk {dx² + dy² ≤ radius²}; nothing enters from outside the frame
    (as `cv2.dilate`'s default border)."""
    height = b.shape[1]
    half_widths = [math.isqrt(radius * radius - dy * dy) for dy in range(radius + 1)]  # the disk's rows
    by_width = {0: b}  # horizontal dilation by [-w, w], grown one pixel per step
    for w in range(1, radius + 1):
        by_width[w] = by_width[w - 1] | _from_left(by_width[w - 1]) | _from_right(by_width[w - 1])
    out = by_width[radius].copy()
    for dy in range(1, min(radius, height - 1) + 1):
        rows = by_width[half_widths[dy]]
        out[:, :-dy] |= rows[:, dy:]  # from the rows below
        out[:, dy:] |= rows[:, :-dy]  # from the rows above
    return out


def _count(words: np.ndarray) -> np.ndarray:
    """Set bits per frame of (T, H, n) words."""
    return np.bitwise_count(words).sum(axis=(1, 2), dtype=np.int64)


def tolerance_px(height: int, width: int, bound_th: float = BOUND_TH) -> float:
    """DAVIS's match radius: `bound_th` itself when ≥ 1, else ⌈bound_th × diagonal⌉ pixels."""
    return float(bound_th) if bound_th >= 1 else float(np.ceil(bound_th * np.linalg.norm((height, width))))


def _radius(height: int, width: int, bound_th: float) -> int:
    radius = tolerance_px(height, width, bound_th)
    if radius != int(radius) or radius < 0:
        raise ValueError(f"bound_th {bound_th}: a tolerance of ≥ 1 must be a whole number of pixels")
    return int(radius)


def boundary_map(masks: np.ndarray) -> np.ndarray:
    """DAVIS `_seg2bmap` of a (T, H, W) (or (H, W)) stack as bool (T, H, W)."""
    seg = _stack(masks)
    return _unpack(_boundaries(_pack(seg), seg.shape[2]), seg.shape[2])


def _ratio(num: np.ndarray, den: np.ndarray, empty: float) -> np.ndarray:
    """num / den per frame in float64, `empty` where den is 0 (counts are never negative)."""
    return np.divide(num, den, out=np.full(len(den), empty, dtype=np.float64), where=den > 0)


def _f_from_counts(n_fg: np.ndarray, n_gt: np.ndarray, fg_match: np.ndarray, gt_match: np.ndarray) -> np.ndarray:
    """DAVIS's F per frame, in float64 as the published code: P and R the matched shares of the prediction's
    and the ground truth's boundary pixels, F = 2PR/(P+R) (0 when P + R = 0); 1 when neither mask has a
    boundary pixel, 0 when only one has (a boundary matches nothing in a mask without one)."""
    precision = _ratio(fg_match, n_fg, 0.0)
    recall = _ratio(gt_match, n_gt, 0.0)
    return np.where((n_fg == 0) & (n_gt == 0), 1.0, _ratio(2 * precision * recall, precision + recall, 0.0))


def _j_from_counts(inter: np.ndarray, union: np.ndarray) -> np.ndarray:
    return _ratio(inter, union, 1.0)


def j_and_f(gt: np.ndarray, pred: np.ndarray, bound_th: float = BOUND_TH,
            chunk: int = F_CHUNK) -> tuple[np.ndarray, np.ndarray]:
    """Per-frame (J, F) of two (T, H, W) (or (H, W)) stacks, the masks packed once for both."""
    gt, pred = _stack(gt), _stack(pred)
    _check_shapes(gt, pred)
    height, width = gt.shape[1:]
    radius = _radius(height, width, bound_th)
    counts = np.zeros((6, len(gt)), dtype=np.int64)
    for start in range(0, len(gt), chunk):
        part = slice(start, start + chunk)
        g, p = _pack(gt[part]), _pack(pred[part])
        counts[0, part], counts[1, part] = _count(g & p), _count(g | p)
        gb, pb = _boundaries(g, width), _boundaries(p, width)
        counts[2, part], counts[3, part] = _count(pb), _count(gb)
        counts[4, part] = _count(pb & _dilate(gb, radius))
        counts[5, part] = _count(gb & _dilate(pb, radius))
    return _j_from_counts(counts[0], counts[1]), _f_from_counts(*counts[2:])


def j_measure(gt: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """Per-frame IoU of two (T, H, W) (or (H, W)) mask stacks; any non-zero value is foreground.

    Returns:
        float64 (T,): intersection / union, 1 where both masks are empty.
    """
    gt, pred = _stack(gt), _stack(pred)
    _check_shapes(gt, pred)
    inter = np.zeros(len(gt), dtype=np.int64)
    union = np.zeros(len(gt), dtype=np.int64)
    for start in range(0, len(gt), F_CHUNK):
        part = slice(start, start + F_CHUNK)
        g, p = _pack(gt[part]), _pack(pred[part])
        inter[part], union[part] = _count(g & p), _count(g | p)
    return _j_from_counts(inter, union)


def f_measure(gt: np.ndarray, pred: np.ndarray, bound_th: float = BOUND_TH, chunk: int = F_CHUNK) -> np.ndarray:
    """Per-frame DAVIS boundary F of two (T, H, W) (or (H, W)) mask stacks.

    Precision = matched prediction-boundary pixels / prediction-boundary pixels; recall likewise for the
    ground truth; a boundary pixel matches when the other boundary is within the tolerance disk. Without
    prediction boundary: P = 1, R = 0 (R = 1 too when the ground truth has none either); without
    ground-truth boundary: P = 0, R = 1. F = 2PR/(P+R), 0 when P + R = 0.

    Raises:
        ValueError: shapes differ, or `bound_th` ≥ 1 is not a whole number of pixels.

    Returns:
        float64 (T,).
    """
    return j_and_f(gt, pred, bound_th, chunk)[1]


def r_visa(gt_sum: np.ndarray, pred: np.ndarray, foreground: np.ndarray) -> np.ndarray:
    """Per-frame robustness exactly as VISA computes it (the published R).

    Args:
        gt_sum: (T, H, W) uint8 — the decoded instance masks *summed* (overlaps are 2, 3, …).
        pred: (T, H, W) uint8 as read from the prediction PNGs (0/255 in VISA's layout).
        foreground: (T, H, W) uint8 foreground masks (mask_dict_foreground).

    `(1 - gt) * pred` is evaluated in uint8: a false positive weighs 255 in a 0/255 prediction, and
    where objects overlap 1 − 2 wraps to 255 and 255 × 255 wraps to 1. r_t = max(1 − Σneg / (Σfg + 1e-6), 0).
    """
    gt_sum, pred, foreground = (_stack(a) for a in (gt_sum, pred, foreground))
    if not (gt_sum.dtype == pred.dtype == foreground.dtype == np.uint8):
        raise ValueError(f"r_visa wants uint8 arrays (VISA's dtype), got {gt_sum.dtype}, {pred.dtype}, "
                         f"{foreground.dtype}")
    _check_shapes(gt_sum, pred)
    _check_shapes(gt_sum, foreground)
    neg = np.zeros(len(gt_sum), dtype=np.uint64)
    for t in range(len(gt_sum)):  # frame by frame: the uint8 temporaries stay in cache
        neg[t] = ((np.uint8(1) - gt_sum[t]) * pred[t]).sum(dtype=np.uint64)  # uint8 wrap-around, uint64 sum
    pos = foreground.sum(axis=(1, 2), dtype=np.uint64)
    return np.maximum(1 - neg / (pos + 1e-6), 0.0)


def r_binary(gt: np.ndarray, pred: np.ndarray, foreground: np.ndarray) -> np.ndarray:
    """Per-frame robustness on binarised masks: max(1 − |pred \\ gt| / (|fg| + 1e-6), 0)."""
    gt, pred, foreground = (_stack(a) for a in (gt, pred, foreground))
    _check_shapes(gt, pred)
    _check_shapes(gt, foreground)
    neg = np.zeros(len(gt), dtype=np.int64)
    pos = np.zeros(len(gt), dtype=np.int64)
    for start in range(0, len(gt), F_CHUNK):
        part = slice(start, start + F_CHUNK)
        neg[part] = _count(_pack(pred[part]) & ~_pack(gt[part]))
        pos[part] = _count(_pack(foreground[part]))
    return np.maximum(1 - neg / (pos + 1e-6), 0.0)


def measures(gt_sum: np.ndarray, pred: np.ndarray, foreground: np.ndarray,
             bound_th: float = BOUND_TH) -> dict[str, np.ndarray]:
    """Per-frame J, F, R_visa and R_binary of one expression (the arrays as for `r_visa`)."""
    j, f = j_and_f(gt_sum, pred, bound_th)
    return {"J": j, "F": f, "R_visa": r_visa(gt_sum, pred, foreground),
            "R_binary": r_binary(gt_sum, pred, foreground)}


def score_expression(gt_sum: np.ndarray, pred: np.ndarray, foreground: np.ndarray,
                     bound_th: float = BOUND_TH) -> dict[str, float]:
    """Mean over frames of J, F, R_visa and R_binary for one expression (VISA's per-expression numbers)."""
    return {k: float(v.mean()) for k, v in measures(gt_sum, pred, foreground, bound_th).items()}


def aggregate(table: pd.DataFrame, metrics: Sequence[str] = METRICS) -> dict[str, float]:
    """ReVOS aggregates in percent from a per-expression table (columns type_id and the metrics, 0–1).

    As VISA: each expression's value is rounded to 2 decimals in percent, subsets are the means over
    their expressions (type 0 referring, type 1 reasoning), `JF` = (J + F) / 2 per subset, overall is
    the mean of the two subsets; type 2 rows are ignored. A subset without expressions gives NaN (and so
    does overall), as in VISA. Keys: `<metric>_<subset>`, e.g. `JF_overall`, `R_visa_reasoning`.
    """
    out: dict[str, float] = {}
    for type_id, name in TYPE_NAMES.items():
        rows = table[table["type_id"] == type_id]
        for metric in metrics:
            values = np.round(100 * rows[metric].to_numpy(dtype=np.float64), 2)
            out[f"{metric}_{name}"] = float(values.mean()) if len(values) else float("nan")
        if {"J", "F"} <= set(metrics):
            out[f"JF_{name}"] = (out[f"J_{name}"] + out[f"F_{name}"]) / 2
    names = [m for m in (*metrics, "JF") if f"{m}_referring" in out]
    for metric in names:
        out[f"{metric}_overall"] = (out[f"{metric}_referring"] + out[f"{metric}_reasoning"]) / 2
    return out
