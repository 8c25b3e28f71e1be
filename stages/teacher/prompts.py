"""Versioned prompt templates (files under `stages/teacher/prompts/`, shipped as package data).

- CoT generation: `prompts/cot/<set>/<version>/base.txt` + three example styles
  `style_{a,b,c}.txt`; a template id is `<set>/<version>/<style>`.
- The model's question for SFT / GRPO / evaluation belongs to its task (stages/tasks/prompts/<task>/<version>.txt):
  `stages.tasks.get_task(name).question(...)`. The teacher is a transport that tasks use; nothing here imports
  `stages.tasks` (tests/stages/test_teacher_thinking.py checks the direction).
- Difficulty rating: `prompts/difficulty/<version>.txt`.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["COT_VERSION", "QUESTION_VERSION", "STYLES", "cot_template_ids", "render_cot_prompt",
           "render_difficulty_prompt"]

PROMPTS = Path(__file__).parent / "prompts"
COT_VERSION = "v1"
QUESTION_VERSION = "v1"  # the Veason-R1 task's question version (stages/tasks/prompts/veason/v1.txt)
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


def render_difficulty_prompt(expression: str, n_frames: int, version: str = "v1") -> str:
    """The difficulty-rating instruction."""
    return _read(f"difficulty/{version}.txt").format(expression=expression, n_frames=n_frames).strip()
