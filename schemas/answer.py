"""The model's answer format and the ground truth that scores it (docs/contracts.md).

Answer: `<think>…</think>` then `<answer>{"keyframe_timestamp": t, "bbox_2d_list": [[x1, y1, x2, y2], …]}</answer>`.
Parsing is strict and safe: no eval, bounded input and box counts, numbers only; anything else is
`None` (the reward's defined failure), never an exception.

Ground truth: what GRPO / eval shards and verl parquet carry per sample, as JSON.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

MAX_TEXT = 20_000  # characters of a completion looked at; longer outputs are cut (bounded parsing cost)
MAX_BOXES = 32
MAX_ANSWER_JSON = 4_000
THINK_ANSWER_RE = re.compile(r"\A\s*<think>(?P<think>.*?)</think>\s*<answer>(?P<answer>.*?)</answer>\s*\Z", re.S)
ANSWER_RE = re.compile(r"<answer>(?P<answer>.*?)</answer>", re.S)


@dataclass(frozen=True)
class Answer:
    """A parsed answer: the keyframe timestamp, boxes, and whether the tags were exactly right."""

    keyframe_timestamp: int
    boxes: tuple[tuple[float, float, float, float], ...]
    think: str
    well_formed: bool  # exactly <think>…</think><answer>…</answer> and nothing else


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def parse_answer_json(payload: str) -> tuple[int, tuple[tuple[float, float, float, float], ...]] | None:
    """(keyframe timestamp, boxes) from the answer JSON, or None when it is not exactly that shape."""
    if len(payload) > MAX_ANSWER_JSON:
        return None
    try:
        data = json.loads(payload)
    except (json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    t = _number(data.get("keyframe_timestamp"))
    raw = data.get("bbox_2d_list")
    if t is None or t != int(t) or not isinstance(raw, list) or len(raw) > MAX_BOXES:
        return None
    boxes = []
    for box in raw:
        if not isinstance(box, list) or len(box) != 4:
            return None
        values = [_number(v) for v in box]
        if any(v is None for v in values):
            return None
        boxes.append(tuple(values))
    return int(t), tuple(boxes)  # type: ignore[return-value]


def parse_answer(text: str) -> Answer | None:
    """Parse a completion; None when there is no parseable `<answer>` JSON."""
    if not isinstance(text, str):
        return None
    text = text[:MAX_TEXT]
    strict = THINK_ANSWER_RE.match(text)
    match = strict or ANSWER_RE.search(text)
    if match is None:
        return None
    parsed = parse_answer_json(match.group("answer").strip())
    if parsed is None:
        return None
    think = strict.group("think") if strict else ""
    return Answer(parsed[0], parsed[1], think.strip(), well_formed=strict is not None)


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
        """Load and check ground truth. Raises ValueError: bad ground truth is a data bug, not a model error."""
        data = json.loads(text) if isinstance(text, str) else dict(text)
        try:
            gt = cls(**data)
        except TypeError as err:
            raise ValueError(f"malformed ground truth: {err}") from err
        n = len(gt.timestamps)
        if not (len(gt.boxes) == len(gt.areas) == len(gt.union_areas) == len(gt.masks) == n) or n == 0:
            raise ValueError(f"ground truth lists disagree with {n} timestamps")
        if gt.keyframe_timestamp not in gt.timestamps:
            raise ValueError(f"ground-truth keyframe {gt.keyframe_timestamp} is not a shown timestamp")
        return gt

    def frame_position(self, timestamp: int) -> int | None:
        """Index of a shown timestamp, None when it was not shown."""
        return self.timestamps.index(timestamp) if timestamp in self.timestamps else None
