"""`vrsflow stage NAME` started by a plain `dvc repro` (no `vrsflow repro` around it) ends with whatever started
it, however that ends: here a parent that is SIGKILLed while the stage trains several seeds in processes of their
own (`pretrain_sam2`, stages/models/seed_runs.py). Nothing of the stage is alive seconds later. Before, the stage
was re-parented to init and went on training alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.pipeline_repo import env_with_venv, make_repo, sh

pytestmark = pytest.mark.slow  # a pipeline copy, the tiny models, then a stage start: ~1 min on 2 cores

ROOT = Path(__file__).resolve().parents[2]
# the parent: starts the stage as dvc does (a child process), then waits; the test SIGKILLs it
PARENT = "import subprocess, sys; subprocess.Popen(sys.argv[1:]).wait()"


def test_a_stage_whose_starter_is_sigkilled_stops_with_its_seed_processes(tmp_path: Path) -> None:
    repo = make_repo(ROOT, tmp_path / "repo", {
        "sam2.checkpoint": "models/pretrain_sam2/model.pt", "sam2.config": "models/pretrain_sam2/config.yaml",
        "pretrain_sam2.steps": 100000, "pretrain_sam2.seeds": [0, 1], "pretrain_sam2.parallel": 2})
    sh([sys.executable, "-m", "flows.cli", "stage", "tiny_models"], repo, timeout=600)
    env = {k: v for k, v in env_with_venv().items() if k != "VRSFLOW_REPRO_PID"}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, sys.executable, "-m", "flows.cli", "stage",
                               "pretrain_sam2"], cwd=repo, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    seen: dict[int, psutil.Process] = {}
    while sum("stages.pretrain_sam2" in " ".join(_cmdline(p)) for p in seen.values()) < 2:
        assert parent.poll() is None and time.monotonic() < deadline, "the seeds did not start"
        for child in psutil.Process(parent.pid).children(recursive=True):
            seen.setdefault(child.pid, child)
        time.sleep(0.1)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    time.sleep(20)  # the stage's watch: SIGTERM at once, SIGKILL 5 s later; its seeds go with it
    alive = [f"{p.pid} {' '.join(_cmdline(p))[:100]}" for p in seen.values() if _running(p)]
    assert alive == []


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
