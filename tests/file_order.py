"""Longest test files first, so that two workers end together.

`scripts/test.sh` hands whole files to its pytest-xdist workers (`--dist loadfile`), one at a time to whichever
worker is free, in the order collected (`--no-loadscope-reorder`; xdist's own order is by the number of tests,
which puts a file of ten minute-long pipeline tests behind a hundred fast property tests). A long file handed out
last runs alone on one worker while the other has nothing left to do. Handing out the longest first (the
longest-processing-time rule) leaves the short files to fill in at the end.

The seconds per file come from `tests/file_seconds.json`, written by a run with
`VRSFLOW_RECORD_FILE_SECONDS=tests/file_seconds.json ./scripts/test.sh` (setup, call and teardown of every test,
summed per file). It only orders files: a file it does not list (a new one) goes after those it lists, and a stale
figure costs time, never a result. Within a file the tests keep their order.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

SECONDS_FILE = Path(__file__).resolve().parent / "file_seconds.json"
RECORD_ENV = "VRSFLOW_RECORD_FILE_SECONDS"


def file_of(nodeid: str) -> str:
    """`tests/test_pipeline.py::test_x[1]` → `tests/test_pipeline.py`."""
    return nodeid.split("::", 1)[0]


def longest_files_first(items: list[pytest.Item], seconds: dict[str, float]) -> None:
    """Sort `items` in place: files by their recorded seconds, longest first, unlisted files last; a stable sort,
    so tests keep their order within a file and unlisted files keep the order they were collected in."""
    items.sort(key=lambda item: -seconds.get(file_of(item.nodeid), -1.0))


def recorded_seconds(path: Path = SECONDS_FILE) -> dict[str, float]:
    return json.loads(path.read_text()) if path.is_file() else {}


class FileSecondsRecorder:
    """With VRSFLOW_RECORD_FILE_SECONDS=PATH: adds up each test file's seconds from the reports (a pytest-xdist
    controller receives every worker's) and writes them to PATH at the end of a run that passed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        file = file_of(report.nodeid)
        self.seconds[file] = self.seconds.get(file, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if exitstatus == 0 and self.seconds:
            ordered = dict(sorted(((f, round(s, 1)) for f, s in self.seconds.items()), key=lambda kv: (-kv[1], kv[0])))
            self.path.write_text(json.dumps(ordered, indent=1) + "\n")


def register_recorder(config: pytest.Config) -> None:
    """Record on the controller (or in a run without workers), not in each worker."""
    path = os.environ.get(RECORD_ENV)
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(FileSecondsRecorder(Path(path)), "vrsflow-file-seconds")
