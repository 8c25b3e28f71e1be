"""The model's answer format and the ground truth that scores it (docs/contracts.md).

Answer: `<think>…</think>` then `<answer>{"keyframe_timestamp": t, "bbox_2d_list": [[x1, y1, x2, y2], …]}</answer>`.
Optional answer keys for the RCoT-Seg / VideoSeg-R1 rewards: `point_2d_list` ([[x, y], …], one per box),
`negative_point_2d_list` ([[x, y], …]) and `option` ("A" | "B", RCoT-Seg's AKS judgment). Any other key
makes the answer malformed.

Parsing is strict and safe: no eval, bounded input length, JSON length and box counts, finite numbers
only; anything else is `None` (the reward's defined failure), never an exception.

Ground truth: what GRPO / eval shards and verl parquet carry per sample, as JSON. A malformed ground
truth raises `ValueError` — it is a data bug, not a model error.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

MAX_TEXT = 20_000  # characters; a longer completion is malformed (max response 1024 tokens ≈ 5K chars)
MAX_BOXES = 32  # boxes (and points) in one answer; more is malformed
MAX_ANSWER_JSON = 4_000  # characters of the answer JSON
ANSWER_KEYS = frozenset({"keyframe_timestamp", "bbox_2d_list", "point_2d_list", "negative_point_2d_list", "option"})
OPTIONS = ("A", "B")

Box = tuple[float, float, float, float]
Point = tuple[float, float]


@dataclass(frozen=True)
class Answer:
    """A parsed answer: the keyframe timestamp, boxes, and whether the tags were exactly right."""

    keyframe_timestamp: int
    boxes: tuple[Box, ...]
    think: str
    well_formed: bool  # exactly <think>…</think><answer>…</answer> and nothing else
    points: tuple[Point, ...] | None = None  # positive point per box (RCoT-Seg, VideoSeg-R1)
    negative_points: tuple[Point, ...] | None = None  # VideoSeg-R1's negative points
    option: str | None = None  # RCoT-Seg AKS judgment


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _vectors(raw: Any, size: int) -> tuple[tuple[float, ...], ...] | None:
    """A list of `size`-number lists, at most MAX_BOXES of them, or None."""
    if not isinstance(raw, list) or len(raw) > MAX_BOXES:
        return None
    out = []
    for item in raw:
        if not isinstance(item, list) or len(item) != size:
            return None
        values = [_number(v) for v in item]
        if any(v is None for v in values):
            return None
        out.append(tuple(values))
    return tuple(out)  # type: ignore[arg-type]


def _reject_constant(name: str) -> None:
    raise ValueError(f"non-finite JSON constant {name}")


def parse_answer_fields(payload: str) -> dict[str, Any] | None:
    """The answer JSON's fields (boxes, points as tuples), or None when it is not exactly that shape."""
    if len(payload) > MAX_ANSWER_JSON:
        return None
    try:
        data = json.loads(payload, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not set(data) <= ANSWER_KEYS:
        return None
    t = _number(data.get("keyframe_timestamp"))
    boxes = _vectors(data.get("bbox_2d_list"), 4)
    if t is None or t != int(t) or abs(t) > 1e9 or boxes is None:
        return None
    fields: dict[str, Any] = {"keyframe_timestamp": int(t), "boxes": boxes}
    for key, name in (("point_2d_list", "points"), ("negative_point_2d_list", "negative_points")):
        if key in data:
            points = _vectors(data[key], 2)
            if points is None:
                return None
            fields[name] = points
    if "option" in data:
        if data["option"] not in OPTIONS:
            return None
        fields["option"] = data["option"]
    return fields


def parse_answer_json(payload: str) -> tuple[int, tuple[Box, ...]] | None:
    """(keyframe timestamp, boxes) from the answer JSON, or None when it is not exactly that shape."""
    fields = parse_answer_fields(payload)
    return None if fields is None else (fields["keyframe_timestamp"], fields["boxes"])


def _split_tags(text: str) -> tuple[str | None, str | None, bool]:
    """(think, answer payload, exact) found with str.find (linear time, no regex backtracking).

    exact: the whole text is `<think>…</think>` + optional whitespace + `<answer>…</answer>` (whitespace
    allowed around), with no other tag occurrence inside.
    """
    a_open = text.find("<answer>")
    if a_open < 0:
        return None, None, False
    a_close = text.find("</answer>", a_open + 8)
    if a_close < 0:
        return None, None, False
    payload = text[a_open + 8:a_close]
    head, tail = text[:a_open], text[a_close + 9:]
    stripped = head.strip()
    exact = (stripped.startswith("<think>") and stripped.endswith("</think>") and not tail.strip()
             and stripped.count("<think>") == 1 and stripped.count("</think>") == 1
             and "<answer>" not in payload and text.count("<answer>") == 1 and text.count("</answer>") == 1)
    think = stripped[7:-8] if exact else ""
    return think, payload, exact


def box_well_formed(box: tuple[float, ...]) -> bool:
    """A box whose corners are ordered: x1 < x2 and y1 < y2 (four finite numbers already checked)."""
    return box[0] < box[2] and box[1] < box[3]


def well_formed_box_share(boxes: tuple[Box, ...]) -> float:
    """Share of the boxes that are well formed; 0 for no boxes."""
    return sum(map(box_well_formed, boxes)) / len(boxes) if boxes else 0.0


def format_credit(text: str) -> tuple[bool, float]:
    """(tags exact, share of well-formed boxes) for ANY completion, parseable or not.

    The released Veason-R1 reward scores the tags and the boxes separately: a completion whose tags are
    right but whose answer JSON is broken (a 3-number box, a fractional timestamp) still earns the tag
    credit, and the box credit is spread over the `bbox_2d_list` entries that are four finite numbers
    with ordered corners. Same bounds as `parse_answer`: a text over MAX_TEXT earns nothing.
    """
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        return False, 0.0
    _, payload, exact = _split_tags(text)
    if payload is None or len(payload) > MAX_ANSWER_JSON:
        return exact, 0.0
    try:
        data = json.loads(payload.strip(), parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return exact, 0.0
    raw = data.get("bbox_2d_list") if isinstance(data, dict) else None
    if not isinstance(raw, list) or not raw or len(raw) > MAX_BOXES:
        return exact, 0.0
    good = 0
    for item in raw:
        box = _vectors([item], 4)
        good += box is not None and box_well_formed(box[0])
    return exact, good / len(raw)


def parse_answer(text: str) -> Answer | None:
    """Parse a completion; None when there is no parseable `<answer>` JSON.

    A completion longer than MAX_TEXT characters is None (the defined failure) rather than cut, so a
    model cannot be rewarded for an answer buried in a flood of text.
    """
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        return None
    think, payload, exact = _split_tags(text)
    if payload is None:
        return None
    fields = parse_answer_fields(payload.strip())
    if fields is None:
        return None
    return Answer(think=(think or "").strip(), well_formed=exact, **fields)


@dataclass(frozen=True)
class GroundTruth:
    """Per sample, at the frames shown to the model (train resolution)."""

    timestamps: list[int]
    image_size: list[int]  # [height, width] of the frames shown
    boxes: list[list[list[float] | None]]  # per frame, per object
    areas: list[list[float]]  # per frame, per object
    union_areas: list[float]  # per frame
    masks: list[dict]  # per frame: union mask as COCO RLE (counts str) at image_size
    keyframe_timestamp: int
    points: list[list[float] | None] = field(default_factory=list)  # KTG point per object
    aks_option: str | None = None
    difficulty: float | None = None
    token_budget: int | None = None

    def to_json(self) -> str:
        """Canonical JSON (sorted keys)."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | dict) -> GroundTruth:
        """Load and check ground truth.

        Raises:
            ValueError: bad ground truth (a data bug, not a model error), naming the problem.
        """
        try:
            data = json.loads(text) if isinstance(text, str | bytes) else dict(text)
        except (ValueError, TypeError) as err:
            raise ValueError(f"malformed ground truth JSON: {err}") from err
        try:
            gt = cls(**data)
        except TypeError as err:
            raise ValueError(f"malformed ground truth: {err}") from err
        n = len(gt.timestamps)
        if not (len(gt.boxes) == len(gt.areas) == len(gt.union_areas) == len(gt.masks) == n) or n == 0:
            raise ValueError(f"ground truth lists disagree with {n} timestamps")
        if len(set(gt.timestamps)) != n:
            raise ValueError(f"ground truth timestamps repeat: {gt.timestamps}")
        if len(gt.image_size) != 2 or min(gt.image_size) <= 0:
            raise ValueError(f"ground truth image_size {gt.image_size} is not [height, width]")
        if gt.keyframe_timestamp not in gt.timestamps:
            raise ValueError(f"ground-truth keyframe {gt.keyframe_timestamp} is not a shown timestamp")
        k = {len(frame) for frame in gt.boxes} | {len(frame) for frame in gt.areas}
        if len(k) != 1:
            raise ValueError(f"ground truth has a varying number of objects per frame: {sorted(k)}")
        for i, frame in enumerate(gt.boxes):
            for box in frame:
                if box is not None and (len(box) != 4 or not all(math.isfinite(float(v)) for v in box)):
                    raise ValueError(f"ground truth box {box} at frame {i} is not 4 finite numbers")
        if gt.aks_option is not None and gt.aks_option not in OPTIONS:
            raise ValueError(f"ground truth aks_option {gt.aks_option!r} is not one of {OPTIONS}")
        return gt

    @property
    def n_objects(self) -> int:
        """Number of target objects."""
        return len(self.boxes[0])

    def frame_position(self, timestamp: int) -> int | None:
        """Index of a shown timestamp, None when it was not shown."""
        return self.timestamps.index(timestamp) if timestamp in self.timestamps else None

    def boxes_at(self, position: int) -> list[list[float]]:
        """The ground-truth boxes of the objects present at a shown frame."""
        return [list(map(float, b)) for b in self.boxes[position] if b is not None]
