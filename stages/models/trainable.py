"""Which parameters training may touch: the language model only, unless a param says otherwise.

Qwen2.5-VL's vision tower (`visual`, its patch merger included) has MLPs named `gate_proj`, `up_proj`,
`down_proj` like the language model's, so plain LoRA target names also adapt the vision tower. The
papers adapt only the language model (Veason-R1 SFT "freezes other parameters"; LLaMA-Factory's
default `freeze_vision_tower`). These helpers build a PEFT target regex that skips `visual` and freeze
the vision tower for full fine-tuning.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

VISION_MODULE = "visual"  # the vision tower's attribute name in Qwen2-VL / Qwen2.5-VL (merger included)


def lora_targets(names: Sequence[str], train_vision: bool) -> list[str] | str:
    """PEFT `target_modules`: the names as given when the vision tower trains too; otherwise a regex
    (PEFT full-matches a string against each module's dotted name) that matches them outside `visual`."""
    if train_vision:
        return list(names)
    alternatives = "|".join(re.escape(n) for n in names)
    return rf"^(?!(?:.*\.)?{VISION_MODULE}\.).*\.(?:{alternatives})$"


def is_vision_parameter(name: str) -> bool:
    """Whether a parameter's dotted name lies under the vision tower (also inside PEFT wrappers)."""
    return f".{VISION_MODULE}." in f".{name}"


def freeze_vision(model) -> int:
    """Set requires_grad=False on every vision-tower parameter; returns how many tensors were frozen.

    Raises:
        ValueError: the model has no `visual` module (not a Qwen2-VL-family model).
    """
    frozen = 0
    for name, parameter in model.named_parameters():
        if is_vision_parameter(name):
            parameter.requires_grad_(False)
            frozen += 1
    if frozen == 0:
        raise ValueError(f"{type(model).__name__} has no '{VISION_MODULE}' module to freeze")
    return frozen


def trainable_vision_parameters(model) -> list[str]:
    """Names of trainable parameters under the vision tower (empty when it is frozen)."""
    return [n for n, p in model.named_parameters() if p.requires_grad and is_vision_parameter(n)]


def last_complete_checkpoint(folder: Path) -> str | None:
    """The newest `checkpoint-N` under `folder` that a transformers `Trainer` finished writing, or None.

    The Trainer writes `trainer_state.json` last; a checkpoint cut short by a kill mid-save lacks it (or holds a
    partial one) and would make `train(resume_from_checkpoint=…)` fail, so such a folder is passed over and the
    previous checkpoint (kept until the new one is complete) is resumed instead.
    """
    points = sorted((p for p in Path(folder).glob("checkpoint-*") if p.name.split("-")[1].isdigit()),
                    key=lambda p: int(p.name.split("-")[1]), reverse=True)
    for point in points:
        try:
            json.loads((point / "trainer_state.json").read_text())
        except (OSError, ValueError):
            continue
        return str(point)
    return None
