"""The model's answer formats (one per task) and the ground truth that scores them (docs/contracts.md).

Every answer is `<think>…</think>` then `<answer>{json}</answer>`. Which JSON keys an answer has is the
task's `AnswerSchema` (stages/tasks): required keys must be present, optional ones may be, any other key
makes the answer malformed. The keys:

- `keyframe_timestamp`: an integer (JSON int; 3.0, "3" and true are not), a shown timestamp in seconds;
- `bbox_2d_list`: [[x1, y1, x2, y2], …] in pixels of the frame the task shows;
- `point_2d_list`: [[x, y], …], one positive point per box (RCoT-Seg KTG, VideoSeg-R1);
- `negative_point_2d_list`: [[x, y], …] (VideoSeg-R1);
- `option`: "A" | "B" (RCoT-Seg AKS: the candidate frame is a valid keyframe or not);
- `description`: a non-empty string (RCoT-Seg VDG).

Parsing is strict and safe: no eval, bounded input length, JSON length and box counts, finite numbers
only; anything else is `None` (the reward's defined failure), never an exception.

Ground truth: what GRPO / eval shards and verl parquet carry per sample, as JSON, including the task
name. A malformed ground truth raises `ValueError` — it is a data bug, not a model error.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

MAX_TEXT = 20_000  # characters; a longer completion is malformed (max response 2000 tokens ≈ 10K chars)
MAX_BOXES = 32  # boxes (and points) in one answer; more is malformed
MAX_ANSWER_JSON = 8_000  # characters of the answer JSON (a VDG description fits)
ANSWER_KEYS = frozenset({"keyframe_timestamp", "bbox_2d_list", "point_2d_list", "negative_point_2d_list", "option",
                         "description"})
OPTIONS = ("A", "B")

Box = tuple[float, float, float, float]
Point = tuple[float, float]


@dataclass(frozen=True)
class AnswerSchema:
    """The JSON keys one task's answer has: `required` must all be present, `optional` may be."""

    name: str
    required: frozenset[str]
    optional: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        unknown = (self.required | self.optional) - ANSWER_KEYS
        if unknown or not self.required or self.required & self.optional:
            raise ValueError(f"answer schema {self.name}: bad keys {sorted(unknown) or sorted(self.required)}")

    @property
    def keys(self) -> frozenset[str]:
        """Every key the schema allows."""
        return self.required | self.optional

    def example(self) -> str:
        """A JSON sketch of the answer for prompts: {"keyframe_timestamp": t, "bbox_2d_list": [[x1, …]]}."""
        sketch = {"keyframe_timestamp": "t", "bbox_2d_list": "[[x1, y1, x2, y2], ...]",
                  "point_2d_list": "[[x, y], ...]", "negative_point_2d_list": "[[x, y], ...]",
                  "option": '"A" or "B"', "description": '"..."'}
        order = [k for k in sketch if k in self.required]
        return "{" + ", ".join(f'"{k}": {sketch[k]}' for k in order) + "}"


# the answer schemas of the tasks (stages/tasks names which one each task uses)
KEYFRAME_BOXES = AnswerSchema("keyframe_boxes", frozenset({"keyframe_timestamp", "bbox_2d_list"}))
KEYFRAME = AnswerSchema("keyframe", frozenset({"keyframe_timestamp"}))
OPTION = AnswerSchema("option", frozenset({"option"}))
BOXES_POINTS = AnswerSchema("boxes_points", frozenset({"bbox_2d_list", "point_2d_list"}))
BOXES_POINTS_NEGATIVE = AnswerSchema("boxes_points_negative",
                                     frozenset({"bbox_2d_list", "point_2d_list", "negative_point_2d_list"}))
DESCRIPTION = AnswerSchema("description", frozenset({"description"}))


@dataclass(frozen=True)
class Answer:
    """A parsed answer: the fields its schema has (others None / empty) and whether the tags were exact."""

    think: str
    well_formed: bool  # exactly <think>…</think><answer>…</answer> and nothing else
    keyframe_timestamp: int | None = None
    boxes: tuple[Box, ...] = ()
    points: tuple[Point, ...] | None = None  # positive point per box (RCoT-Seg KTG, VideoSeg-R1)
    negative_points: tuple[Point, ...] | None = None  # VideoSeg-R1's negative points
    option: str | None = None  # RCoT-Seg AKS judgment
    description: str | None = None  # RCoT-Seg VDG
    text: str = ""  # the whole completion (VisionReasoner's non-repeat reads all of it)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def is_int_timestamp(value: Any) -> bool:
    """A JSON integer (not a bool, not 3.0, not "3") of sane size: what the released reward accepts."""
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= 1_000_000_000


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


def _load(payload: str) -> Any:
    if len(payload) > MAX_ANSWER_JSON:
        return None
    try:
        return json.loads(payload, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None


def parse_answer_fields(payload: str, schema: AnswerSchema = KEYFRAME_BOXES) -> dict[str, Any] | None:
    """The answer JSON's fields (as `Answer` keyword arguments), or None when it is not exactly `schema`."""
    data = _load(payload)
    if not isinstance(data, dict) or not set(data) <= schema.keys or not schema.required <= set(data):
        return None
    fields: dict[str, Any] = {}
    if "keyframe_timestamp" in data:
        if not is_int_timestamp(data["keyframe_timestamp"]):
            return None
        fields["keyframe_timestamp"] = int(data["keyframe_timestamp"])
    for key, name, size in (("bbox_2d_list", "boxes", 4), ("point_2d_list", "points", 2),
                            ("negative_point_2d_list", "negative_points", 2)):
        if key in data:
            vectors = _vectors(data[key], size)
            if vectors is None:
                return None
            fields[name] = vectors
    if "point_2d_list" in data and len(fields["points"]) != len(fields.get("boxes", ())):
        return None  # one positive point per box
    if "option" in data:
        if data["option"] not in OPTIONS:
            return None
        fields["option"] = data["option"]
    if "description" in data:
        if not isinstance(data["description"], str) or not data["description"].strip():
            return None
        fields["description"] = data["description"].strip()
    return fields


def parse_answer_json(payload: str) -> tuple[int, tuple[Box, ...]] | None:
    """(keyframe timestamp, boxes) from a Veason-R1 answer JSON, or None when it is not exactly that shape."""
    fields = parse_answer_fields(payload, KEYFRAME_BOXES)
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


NO_BOXES = "no_boxes"  # the answer holds no box at all
DEGENERATE_BOXES = "degenerate_boxes"  # it holds boxes, but none covers any area inside the frame


def box_status(boxes: tuple[Box, ...] | list, width: float, height: float) -> str | None:
    """`NO_BOXES` for an answer without boxes, `DEGENERATE_BOXES` when every box is empty once clipped to the
    `width` × `height` frame (corners inverted, zero width or height, or wholly outside), None when at least one
    box keeps an area (x1 < x2 and y1 < y2 after clipping) — what a segmenter can make a mask from.

    Both the evaluation (its answer statuses) and the GRPO reward's log use it, so the two count alike.
    """
    if not len(boxes):
        return NO_BOXES
    for x1, y1, x2, y2 in boxes:
        if min(max(x1, 0.0), width) < min(max(x2, 0.0), width) and \
                min(max(y1, 0.0), height) < min(max(y2, 0.0), height):
            return None
    return DEGENERATE_BOXES


def well_formed_box_share(boxes: tuple[Box, ...]) -> float:
    """Share of the boxes that are well formed; 0 for no boxes."""
    return sum(map(box_well_formed, boxes)) / len(boxes) if boxes else 0.0


def content_credit(data: Any, schema: AnswerSchema, empty_boxes_ok: bool = False) -> float:
    """The answer-content half of the format reward, in [0, 1], read leniently from the answer JSON.

    - boxes (Veason-R1's released reward): spread over the `bbox_2d_list` entries that are four finite
      numbers with ordered corners; with `point_2d_list` in the schema an entry also needs its point
      (two finite numbers), and with `negative_point_2d_list` the list must be well formed. When the
      schema has `keyframe_timestamp`, box credit counts only if it is a JSON integer (as released).
      An empty box list earns the credit only when `empty_boxes_ok` (a no-target ground truth).
    - keyframe only: 1 for an integer timestamp; option: 1 for "A" / "B"; description: 1 for a non-empty
      string.
    - any key outside the schema: 0.
    """
    if not isinstance(data, dict) or not set(data) <= schema.keys:
        return 0.0  # not an object, or a key the task's answer does not have
    required = schema.required
    if "bbox_2d_list" in required:
        if "keyframe_timestamp" in required and not is_int_timestamp(data.get("keyframe_timestamp")):
            return 0.0
        raw = data.get("bbox_2d_list")
        if not isinstance(raw, list) or len(raw) > MAX_BOXES:
            return 0.0
        if "negative_point_2d_list" in required and _vectors(data.get("negative_point_2d_list"), 2) is None:
            return 0.0
        if not raw:
            return 1.0 if empty_boxes_ok else 0.0
        points = data.get("point_2d_list") if "point_2d_list" in required else None
        if "point_2d_list" in required and (not isinstance(points, list) or len(points) != len(raw)):
            return 0.0
        good = 0
        for i, item in enumerate(raw):
            box = _vectors([item], 4)
            ok = box is not None and box_well_formed(box[0])
            if ok and points is not None:
                ok = _vectors([points[i]], 2) is not None
            good += ok
        return good / len(raw)
    if "keyframe_timestamp" in required:
        return float(is_int_timestamp(data.get("keyframe_timestamp")))
    if "option" in required:
        return float(data.get("option") in OPTIONS)
    if "description" in required:
        value = data.get("description")
        return float(isinstance(value, str) and bool(value.strip()))
    return 0.0


def format_credit(text: str, schema: AnswerSchema = KEYFRAME_BOXES, empty_boxes_ok: bool = False) -> tuple[bool, float]:
    """(tags exact, content credit) for ANY completion, parseable or not.

    The released Veason-R1 reward scores the tags and the answer content separately: a completion whose
    tags are right but whose answer JSON is broken still earns the tag credit (`content_credit`). Same
    bounds as `parse_answer`: a text over MAX_TEXT earns nothing.
    """
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        return False, 0.0
    _, payload, exact = _split_tags(text)
    if payload is None:
        return exact, 0.0
    return exact, content_credit(_load(payload.strip()), schema, empty_boxes_ok)


def parse_answer(text: str, schema: AnswerSchema = KEYFRAME_BOXES) -> Answer | None:
    """Parse a completion under `schema`; None when there is no `<answer>` JSON of exactly that shape.

    A completion longer than MAX_TEXT characters is None (the defined failure) rather than cut, so a
    model cannot be rewarded for an answer buried in a flood of text.
    """
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        return None
    think, payload, exact = _split_tags(text)
    if payload is None:
        return None
    fields = parse_answer_fields(payload.strip(), schema)
    if fields is None:
        return None
    return Answer(think=(think or "").strip(), well_formed=exact, text=text, **fields)


@dataclass(frozen=True)
class GroundTruth:
    """Per sample, at the frames shown to the model (at the size they are shown)."""

    timestamps: list[int]
    image_size: list[int]  # [height, width] of the frames shown
    boxes: list[list[list[float] | None]]  # per frame, per object
    areas: list[list[float]]  # per frame, per object
    union_areas: list[float]  # per frame
    masks: list[dict]  # per frame: union mask as COCO RLE (counts str) at image_size
    keyframe_timestamp: int
    points: list[list[float] | None] = field(default_factory=list)  # KTG point per object, at the keyframe
    aks_option: str | None = None
    difficulty: float | None = None
    token_budget: int | None = None
    task: str = "veason"  # the task this sample asks (stages/tasks); its answer schema and reward
    description: str | None = None  # RCoT-Seg VDG: the accepted video description

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
        if not isinstance(gt.task, str) or not gt.task:
            raise ValueError(f"ground truth task {gt.task!r} is not a task name")
        return gt

    @property
    def n_objects(self) -> int:
        """Number of target objects."""
        return len(self.boxes[0])

    @property
    def no_target(self) -> bool:
        """True when no target is visible in any shown frame (a no-target expression)."""
        return self.n_objects == 0 or max(self.union_areas) <= 0

    def frame_position(self, timestamp: int | None) -> int | None:
        """Index of a shown timestamp, None when it was not shown."""
        return self.timestamps.index(timestamp) if timestamp in self.timestamps else None

    def boxes_at(self, position: int) -> list[list[float]]:
        """The ground-truth boxes of the objects present at a shown frame."""
        return [list(map(float, b)) for b in self.boxes[position] if b is not None]
