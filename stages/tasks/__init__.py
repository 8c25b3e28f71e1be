"""Tasks, first-class: what one training sample asks of the model (DESIGN: Tasks; docs/recipes.md).

`get_task(name)` is the registry: stages look a task up by the name recorded on each sample (keyframes
table `tasks`, shard meta `task`, ground truth `task`) and never branch on a task's name. Each task is
one small module declaring its teacher template set, question file, answer schema, oracle rendering,
reward components, filter rules, frame view and inference procedure (`stages.tasks.base.Task`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from stages.tasks import rcot_aks, rcot_kfg, rcot_ktg, rcot_vdg, veason, videoseg
from stages.tasks.base import (
    Task,
    answer_text,
    frame_key_order,
    frame_keys,
    integer_payload,
    timestamp_tag,
    user_content,
)

TASKS: Mapping[str, Task] = {t.name: t for t in (veason.TASK, rcot_kfg.TASK, rcot_aks.TASK, rcot_ktg.TASK,
                                                  rcot_vdg.TASK, videoseg.TASK)}
DEFAULT_TASK = "veason"
# the `evaluate.mode` that runs each declared inference procedure (stages/evaluate/infer.py)
EVALUATE_MODES: Mapping[str, str] = {"single": "veason", "agentic": "rcot", "htfs": "htfs"}


def get_task(name: str) -> Task:
    """The task called `name`.

    Raises:
        ValueError: an unknown task name (listing the known ones).
    """
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; known tasks: {sorted(TASKS)}")
    return TASKS[name]


def check_tasks(names: Sequence[str], where: str) -> tuple[str, ...]:
    """Validate a list of task names from params (`where` names the key).

    Raises:
        ValueError: empty, repeated or unknown names.
    """
    names = tuple(names)
    if not names:
        raise ValueError(f"{where}: no task named")
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: tasks repeat: {list(names)}")
    for name in names:
        if name not in TASKS:
            raise ValueError(f"{where}: unknown task {name!r}; known tasks: {sorted(TASKS)}")
    return names


def task_of(meta: Mapping) -> Task:
    """The task of a shard sample's metadata (`task`; samples written before tasks existed are Veason-R1)."""
    return get_task(str(meta.get("task") or DEFAULT_TASK))


def meta_content(meta: Mapping) -> list[dict]:
    """User-turn content of a shard sample: its frames' `<ts>` tags and images, then its question — the one the
    shard stage recorded, else its task's question for the expression (and description, when it has one)."""
    timestamps = [int(t) for t in meta["timestamps"]]
    question = meta.get("question") or task_of(meta).question(str(meta["expression"]), timestamps,
                                                              str(meta.get("description") or ""))
    return user_content(timestamps, str(question))


__all__ = ["DEFAULT_TASK", "EVALUATE_MODES", "TASKS", "Task", "answer_text", "check_tasks", "frame_key_order",
           "frame_keys", "get_task", "integer_payload", "meta_content", "task_of", "timestamp_tag", "user_content"]
