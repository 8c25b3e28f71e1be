"""Temporary job folders of launched stages: their names, and removing those whose stage was killed.

A launched stage (stages/models/launch.py) keeps its job file in a temporary folder named by the stage and its
pid; a SIGKILL leaves that folder behind. The next stage's start removes those whose process is gone
(flows/prefect_api.py). Kept apart from the launcher so that this check imports nothing heavy.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from stages.core import lifeline

__all__ = ["JOB_PREFIX", "remove_leftover_job_folders"]

JOB_PREFIX = "vrsflow-job-"  # job folders: vrsflow-job-<stage>-<pid of the stage>-<random>


def remove_leftover_job_folders(folder: Path | None = None) -> list[Path]:
    """Remove the job folders of stages that were killed before they could (their pid is gone); return them."""
    removed = []
    for path in Path(folder or tempfile.gettempdir()).glob(f"{JOB_PREFIX}*"):
        parts = path.name[len(JOB_PREFIX):].split("-")  # <stage>-<pid>-<random>
        pid = int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else 0
        if pid and not lifeline.alive(pid) and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
