"""Versioned prompt templates (files under `stages/teacher/prompts/`, shipped as package data).

- CoT generation (REFERENCE.md §1a): `prompts/cot/<set>/<version>/base.txt` + three example styles
  `style_{a,b,c}.txt`; a template id is `<set>/<version>/<style>`.
- The model's question for SFT / GRPO / evaluation (§1b): `prompts/question/<version>.txt`, with the
  frames interleaved as `<Ns>` timestamp text followed by the image.
- Difficulty rating: `prompts/difficulty/<version>.txt`.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

PROMPTS = Path(__file__).parent / "prompts"
COT_VERSION = "v1"
QUESTION_VERSION = "v1"
STYLES = ("style_a", "style_b", "style_c")


@cache
def _read(relative: str) -> str:
    return (PROMPTS / relative).read_text()


def cot_template_ids(template_set: str, version: str = COT_VERSION) -> list[str]:
    """The three template ids of a set, e.g. `veason/v1/style_b`."""
    if not (PROMPTS / "cot" / template_set / version / "base.txt").is_file():
        raise ValueError(f"unknown CoT template set {template_set!r} version {version!r}")
    return [f"{template_set}/{version}/{style}" for style in STYLES]


def render_cot_prompt(template_id: str, **fields: Any) -> str:
    """The instruction text of a CoT template id, filled with `fields` (expression, n_frames, timestamps...)."""
    template_set, version, style = template_id.split("/")
    base = _read(f"cot/{template_set}/{version}/base.txt")
    example = _read(f"cot/{template_set}/{version}/{style}.txt")
    return base.format(style_example=example.strip(), **fields).strip()


def timestamp_tag(seconds: int) -> str:
    """How a frame's timestamp is written before its image: `<3s>`."""
    return f"<{int(seconds)}s>"


def build_question(text: str, timestamps: list[int], template_version: str = QUESTION_VERSION) -> str:
    """The model's question for SFT / GRPO / evaluation (REFERENCE.md §1b), from `prompts/question/<version>.txt`.

    Args:
        text: the referring or reasoning expression.
        timestamps: integer seconds of the frames shown, in order (frame i is shown after `<t_i s>`).
        template_version: the question template file, e.g. "v1".

    Returns:
        The instruction text that follows the interleaved frames (see `question_content`).

    Raises:
        ValueError: no timestamps, or an unknown template version.
    """
    if not len(timestamps):
        raise ValueError(f"question for {text!r}: no frame timestamps")
    if not (PROMPTS / "question" / f"{template_version}.txt").is_file():
        raise ValueError(f"unknown question template version {template_version!r}")
    note = (f"You are given {len(timestamps)} frames sampled from a video at 1 frame per second; "
            f"each frame is preceded by its timestamp, like {timestamp_tag(timestamps[0])}.")
    return _read(f"question/{template_version}.txt").format(frames_note=note, expression=text).strip()


def question_content(text: str, timestamps: list[int], template_version: str = QUESTION_VERSION) -> list[dict]:
    """User-turn content for chat templates: `<0s>` text, image, `<2s>` text, image, …, then the question.

    Images are `{"type": "image"}` placeholders (the processor / TRL fills them in frame order).
    """
    content: list[dict] = []
    for t in timestamps:
        content += [{"type": "text", "text": timestamp_tag(t)}, {"type": "image"}]
    content.append({"type": "text", "text": build_question(text, timestamps, template_version)})
    return content


def render_difficulty_prompt(expression: str, n_frames: int, version: str = "v1") -> str:
    """The difficulty-rating instruction."""
    return _read(f"difficulty/{version}.txt").format(expression=expression, n_frames=n_frames).strip()
