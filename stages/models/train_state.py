"""The resumable training state of the pre-training stages' plain torch loops (`pretrain`, `pretrain_sam2`): one
schedule, one fingerprint and one state file format, so that a seed killed at any step resumes where it was and ends
byte for byte where an uninterrupted run ends.

A state is saved whole or not at all (written beside, then renamed) with the fingerprint of the settings it belongs
to; a state of other settings is not resumed. It holds the weights, AdamW, the schedule, the torch RNG (and CUDA's,
where there is one) and the curve so far as rows of `columns`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

log = logging.getLogger(__name__)


def warmup_cosine(step: int, warmup_steps: int, steps: int) -> float:
    """The LR factor at optimizer step `step` (0-based): linear warm-up over `warmup_steps`, then cosine to 0 at
    `steps`."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    span = steps - warmup_steps
    if span <= 0:  # no step left after the warm-up
        return 0.0
    return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup_steps) / span)))


def fingerprint(settings: dict, files: Iterable[Path]) -> str:
    """sha256 of the settings (JSON, sorted keys) and of each file's name and bytes."""
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    for path in files:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def save_state(path: Path, fingerprint: str, step: int, model, optimizer, scheduler, curve: list[dict],
               columns: Sequence[str], elapsed_s: float = 0.0) -> None:
    """The state after `step` optimizer steps, written whole or not at all (a kill while saving keeps the last).
    `elapsed_s`: training seconds up to it, over every sitting (a resumed run reports the whole time)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    torch.save({"fingerprint": fingerprint, "step": step, "model": model.state_dict(),
                "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state() if torch.cuda.is_available() else None,
                "curve": [[row[c] for c in columns] for row in curve], "elapsed_s": float(elapsed_s)}, partial)
    partial.replace(path)


def load_state(path: Path, fingerprint: str, model, optimizer, scheduler,
               columns: Sequence[str]) -> tuple[int, list[dict], float]:
    """(first step, curve so far, training seconds so far): restored from `path` when its state belongs to
    `fingerprint`, else (0, [], 0.0)."""
    if not path.is_file():
        return 0, [], 0.0
    state = torch.load(path, map_location="cpu", weights_only=True)
    if state.get("fingerprint") != fingerprint:
        log.info("%s belongs to other settings; starting from step 0", path)
        return 0, [], 0.0
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["torch_rng"])
    if torch.cuda.is_available() and state.get("cuda_rng") is not None:
        torch.cuda.set_rng_state(state["cuda_rng"])
    log.info("resuming at step %d from %s", state["step"], path)
    curve = [dict(zip(columns, row, strict=True)) for row in state["curve"]]
    return int(state["step"]), curve, float(state.get("elapsed_s", 0.0))
