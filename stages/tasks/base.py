"""What one task declares (`Task`) and the pieces every task shares.

A task is what one training sample asks of the model. It declares, together:
- `template_set`: the teacher's CoT template set (stages/teacher/prompts/cot/<set>/<version>/);
- `question_version`: the student's question file (stages/tasks/prompts/<task>/<version>.txt);
- `schema`: the answer schema the completion is parsed with (schemas/answer.py);
- `render_answer`: how the ground truth renders as an answer (the oracle the property tests use);
- `components`: the reward components that score it (weights: params `reward.weights`);
- `filter_rules`: the filter rules its teacher traces must pass, beyond the common ones;
- `view`: which frames it shows and at which size (`sampled` frames at train size, the `keyframe` alone
  or the AKS `candidate` frame alone at the keyframe size);
- `inference`: how evaluation runs it (`single`, RCoT-Seg's `agentic` loop, VideoSeg-R1's `htfs`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from schemas.answer import AnswerSchema, GroundTruth
from stages.core.pixel_box import answer_box

PROMPTS = Path(__file__).parent / "prompts"
View = Literal["sampled", "keyframe", "candidate"]
Inference = Literal["single", "agentic", "htfs", "description"]
COMMON_RULES = ("length", "refusal", "three_steps", "no_markings", "near_duplicate")


@cache
def _read(relative: str) -> str:
    return (PROMPTS / relative).read_text()


def timestamp_tag(seconds: int) -> str:
    """How a frame's timestamp is written before its image: `<3s>`."""
    return f"<{int(seconds)}s>"


def frame_key_order(name: str) -> tuple[int, int, str]:
    """Sort key of a `frame_<i>.<ext>` member name by its number (frame_2 before frame_10), THE one rule for
    frame order in shards, SFT, GRPO and the exports. Names without a number sort after, by name."""
    stem = name.split(".")[0]
    number = stem.rsplit("_", 1)[-1]
    return (0, int(number), name) if number.isdigit() else (1, 0, name)


def frame_keys(record: dict) -> list[str]:
    """The `frame_<i>.*` keys of a WebDataset record in numeric order."""
    return sorted((k for k in record if k.startswith("frame_")), key=frame_key_order)


def answer_text(think: str, payload: dict) -> str:
    """`<think>…</think><answer>{json}</answer>` (compact, key order as given)."""
    return f"<think>{think.strip()}</think><answer>{json.dumps(payload)}</answer>"


def _coord(value: float) -> int:
    """Answers carry integer pixels (what the models write; a decimal point would also split sentences in
    VisionReasoner's non-repeat count)."""
    return int(round(float(value)))


def integer_payload(payload: dict) -> dict:
    """An answer payload with every coordinate rounded to integer pixels (the training responses)."""
    out = dict(payload)
    if "bbox_2d_list" in out:  # a sliver stays a one-pixel box (stages/core/pixel_box.answer_box)
        out["bbox_2d_list"] = [answer_box(box) for box in out["bbox_2d_list"]]
    for key in ("point_2d_list", "negative_point_2d_list"):
        if key in out:
            out[key] = [[int(round(v)) for v in item] for item in out[key]]
    return out


@dataclass(frozen=True)
class Task:
    """One task's declaration (see the module docstring)."""

    name: str
    system: Literal["veason-r1", "rcot-seg", "videoseg-r1"]
    template_set: str
    schema: AnswerSchema
    components: tuple[str, ...]
    render_answer: Callable[[GroundTruth], dict]
    view: View = "sampled"
    inference: Inference = "single"
    filter_rules: tuple[str, ...] = ()
    question_version: str = "v1"
    uses_description: bool = False  # the question carries the VDG description (RCoT-Seg AKS, KTG)
    supports_no_target: bool = False  # a no-target expression can be a sample of this task
    needs_tasks: tuple[str, ...] = ()  # tasks whose accepted traces this task's samples need (VDG)
    response_think: str = ""  # the thinking of training responses; "" = the teacher's trace
    doc: str = field(default="", compare=False)

    @property
    def rules(self) -> tuple[str, ...]:
        """Every filter rule a teacher trace of this task must pass, in order."""
        return COMMON_RULES[:4] + self.filter_rules + COMMON_RULES[4:]

    def question(self, expression: str, timestamps: Sequence[int], description: str = "") -> str:
        """The student's question text (it follows the interleaved frames).

        Raises:
            ValueError: no timestamps, or a missing question file.
        """
        if not len(timestamps):
            raise ValueError(f"task {self.name}: question for {expression!r} with no frame timestamps")
        path = f"{self.name}/{self.question_version}.txt"
        if not (PROMPTS / path).is_file():
            raise ValueError(f"task {self.name}: no question file prompts/{path}")
        n = len(timestamps)
        frames_note = (f"You are given {n} frames sampled from a video at 1 frame per second; each frame is "
                       f"preceded by its timestamp, like {timestamp_tag(timestamps[0])}." if n > 1 else
                       f"You are given one frame of a video, at {timestamp_tag(timestamps[0])}.")
        described = f'Video description: "{description.strip()}"\n' if self.uses_description and description else ""
        return _read(path).format(frames_note=frames_note, expression=expression, description=described,
                                  timestamp=int(timestamps[0]), answer_format=self.schema.example()).strip()

    def question_content(self, expression: str, timestamps: Sequence[int], description: str = "") -> list[dict]:
        """User-turn content: `<0s>` text, image, `<2s>` text, image, …, then the question."""
        return user_content(timestamps, self.question(expression, timestamps, description))

    def oracle(self, gt: GroundTruth, think: str = "The answer follows from the frames.") -> str:
        """The ground truth rendered as a completion of this task."""
        return answer_text(think, self.render_answer(gt))

    def parse(self, text: str):
        """`schemas.answer.parse_answer` under this task's schema."""
        from schemas.answer import parse_answer

        return parse_answer(text, self.schema)


def user_content(timestamps: Sequence[int], question: str) -> list[dict]:
    """Chat content: a `<ts>` text and an image placeholder per frame, then the question text. The images are
    `{"type": "image"}` placeholders (the processor / TRL fills them in frame order)."""
    content: list[dict[str, Any]] = []
    for t in timestamps:
        content += [{"type": "text", "text": timestamp_tag(t)}, {"type": "image"}]
    content.append({"type": "text", "text": question})
    return content


# -- ground truth rendered as answers (each task module picks one) --

def keyframe_payload(gt: GroundTruth) -> dict:
    return {"keyframe_timestamp": int(gt.keyframe_timestamp)}


def boxes_at_keyframe(gt: GroundTruth) -> list[list[int]]:
    position = gt.frame_position(gt.keyframe_timestamp)
    return [[_coord(v) for v in b] for b in gt.boxes_at(position)]


def points_at_keyframe(gt: GroundTruth) -> list[list[int]]:
    """The KTG point of each object present at the keyframe (its box centre when the point is missing)."""
    position = gt.frame_position(gt.keyframe_timestamp)
    out = []
    for k, box in enumerate(gt.boxes[position]):
        if box is None:
            continue
        point = gt.points[k] if k < len(gt.points) and gt.points[k] is not None else \
            [(box[0] + box[2]) / 2, (box[1] + box[3]) / 2]
        out.append([_coord(point[0]), _coord(point[1])])
    return out
