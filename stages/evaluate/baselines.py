"""What a model must beat to have looked: the training prior as a constant answer, and its own answers to
another expression's query.

- **The constant answer** (the training prior): one keyframe position and one box, computed from the SFT traces
  alone and given to every query whatever the video. Two candidates: the traces' mean box and their most common
  box, each at the traces' most common keyframe position among the frames they were shown. A model that writes the
  traces' mode without looking scores what the stronger of them scores; only above it has it looked at something.
- **The query swap**: each expression answered with the query of another expression of the same video that names
  other targets (a fixed, seeded pairing), scored against its own ground truth. A model that reads the query drops;
  one that answers the video alone does not.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from schemas.answer import parse_answer
from schemas.cot import AcceptedSchema
from schemas.sample import KeyframesSchema
from stages.core.io import derive_seed, read_table
from stages.evaluate.infer import Query, Reply

__all__ = ["ConstantAnswer", "constant_policy", "read_training_prior", "swap_partners", "training_prior"]


@dataclass(frozen=True)
class ConstantAnswer:
    """One fixed answer: `kind` ("mean" or "mode" box), the keyframe's position among the shown frames, and the box
    in pixels of the traces' frame size (`size`)."""

    kind: str
    keyframe_pos: int
    box: tuple[float, float, float, float]
    size: int

    def record(self) -> dict:
        """The answer as the metrics and the report name it."""
        return {"kind": self.kind, "keyframe_pos": self.keyframe_pos, "box": [round(v, 2) for v in self.box],
                "size": self.size}


def training_prior(accepted: pd.DataFrame, keyframes: pd.DataFrame) -> list[ConstantAnswer]:
    """The two constant answers of the SFT traces: their mean box and their most common box, each at their most
    common keyframe position among the frames shown with them.

    Args:
        accepted: the filter stage's accepted traces (`response` holds the answer; `sample_id`).
        keyframes: the keyframes stage's table of those samples (`sample_id`, `timestamps`, `train_size`).

    Returns:
        [mean, mode]; [] when no trace answers with a box. Ties go to the smaller position / box.
    """
    shown = {row.sample_id: ([int(t) for t in row.timestamps], int(row.train_size))
             for row in keyframes.itertuples()}
    positions: Counter[int] = Counter()
    boxes: list[tuple[float, float, float, float]] = []
    sizes: set[int] = set()
    for row in accepted.itertuples():
        answer = parse_answer(row.response)
        if answer is None or row.sample_id not in shown or not answer.boxes:
            continue
        timestamps, size = shown[row.sample_id]
        if answer.keyframe_timestamp not in timestamps:
            continue
        positions[timestamps.index(answer.keyframe_timestamp)] += 1
        boxes += [tuple(float(v) for v in box) for box in answer.boxes]
        sizes.add(size)
    if not boxes:
        return []
    if len(sizes) > 1:
        raise ValueError(f"the SFT traces were shown at several sizes ({sorted(sizes)}): no one constant box")
    position = min(positions, key=lambda p: (-positions[p], p))
    counts = Counter(boxes)
    mode = min(counts, key=lambda b: (-counts[b], b))
    mean = tuple(float(v) for v in np.mean(np.array(boxes), axis=0))
    size = sizes.pop()
    return [ConstantAnswer("mean", position, mean, size), ConstantAnswer("mode", position, mode, size)]


def read_training_prior(traces: tuple[Path, Path]) -> list[ConstantAnswer]:
    """`training_prior` of the SFT pool's traces: (the filter stage's `accepted.parquet`, the keyframes stage's
    `sft.parquet`)."""
    accepted = read_table(Path(traces[0]), AcceptedSchema)
    return training_prior(accepted[accepted["pool"] == "sft"], read_table(Path(traces[1]), KeyframesSchema))


def constant_policy(answer: ConstantAnswer, size: int):
    """The constant answer as a policy: every query answered with the shown frame at `answer.keyframe_pos` (the last
    when fewer are shown) and `answer.box` scaled to the shown `size` and rounded to whole pixels, as a model writes
    it; read back by the parser a model's answer goes through."""
    scale = size / answer.size
    box = [round(v * scale) for v in answer.box]

    def reply(query: Query) -> Reply:
        key = query.timestamps[min(answer.keyframe_pos, len(query.timestamps) - 1)]
        text = (f'<think>the training prior ({answer.kind} box)</think><answer>{{"keyframe_timestamp": {key}, '
                f'"bbox_2d_list": {json.dumps([box])}}}</answer>')
        return Reply(text, parse_answer(text), [key])

    return lambda queries: [reply(query) for query in queries]


def swap_partners(rows: Sequence[dict], targets: dict[str, frozenset[str]], seed: int) -> dict[str, str]:
    """Each expression's partner: another expression of the same video whose targets differ (drawn with a generator
    seeded by (seed, expression id), so the pairing does not depend on the order or the other rows).

    Args:
        rows: the eval pool's rows (`expression_id`, `video`).
        targets: expression id → the annotation ids it names (empty for a no-target expression).
        seed: the pairing's seed.

    Returns:
        expression id → its partner's expression id; an expression with no such partner is left out.
    """
    by_video: dict[str, list[str]] = {}
    for row in rows:
        by_video.setdefault(str(row["video"]), []).append(str(row["expression_id"]))
    out = {}
    for ids in by_video.values():
        for expression in ids:
            others = sorted(e for e in ids if targets[e] != targets[expression])
            if others:
                rng = np.random.default_rng(derive_seed(seed, "evaluate", "swap", expression))
                out[expression] = others[int(rng.integers(len(others)))]
    return out
