"""A stage killed with SIGKILL cannot report its end: the next stage finds its run record (flow run, pid) with
the process gone and marks the run — and its running task — Crashed, and removes the killed stage's job folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from flows.prefect_api import RUNS_DIR, get_prefect_home, mark_killed_runs
from stages.models.launch import JOB_PREFIX
from tests.pipeline_repo import env_with_venv

REPO = Path(__file__).resolve().parents[2]

STAGE = """
import sys, time
from pathlib import Path
from prefect import flow
from flows.common import run_stage

def work():
    Path(sys.argv[1]).write_text("in the stage")
    time.sleep(300)

@flow(name="dvc-killed")
def killed():
    run_stage("killed", work)

killed()
"""


def test_the_next_stage_marks_a_killed_stages_run_crashed(prefect_api: str, tmp_path: Path) -> None:
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(STAGE), str(ready)], cwd=REPO,
                            env={**env_with_venv(), **os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 120
    while not ready.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert ready.exists(), "the stage did not start"
    home = Path(get_prefect_home())
    records = [json.loads(p.read_text()) for p in (home / RUNS_DIR).glob("*.json")]
    mine = [r for r in records if r["pid"] == proc.pid]
    assert len(mine) == 1 and mine[0]["api"] == prefect_api
    run_id = mine[0]["flow_run_id"]
    leftover = Path(tempfile.mkdtemp(prefix=f"{JOB_PREFIX}sft-{proc.pid}-"))  # as run_launched names its folder

    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with get_client(sync_client=True) as client:
        assert client.read_flow_run(run_id).state.is_running()  # what the UI showed forever before
        assert mark_killed_runs(home, prefect_api) == [run_id]
        run = client.read_flow_run(run_id)
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])))
    assert run.state.is_crashed() and f"pid {proc.pid}" in run.state.message
    # task runs reach the server as events from the stage process; a SIGKILL may have cut them off before
    assert all(t.state.is_crashed() for t in tasks)
    assert not (home / RUNS_DIR / f"{run_id}.json").exists() and not leftover.exists()
    assert mark_killed_runs(home, prefect_api) == []  # marked once


def test_zombie_run_automation_is_prefects_recipe_and_created_once(prefect_api: str) -> None:
    """For a served server (runs of any machine): heartbeats expected within 90 s of the last, else Crashed."""
    from prefect.automations import Automation

    from flows.prefect_api import ZOMBIE_AUTOMATION, ensure_zombie_automation, zombie_automation

    automation = zombie_automation()
    trigger, action = automation.trigger, automation.actions[0]
    assert trigger.after == {"prefect.flow-run.heartbeat"} and "prefect.flow-run.Completed" in trigger.expect
    assert trigger.posture == "Proactive" and trigger.within.total_seconds() == 90
    assert action.type == "change-flow-run-state" and action.state == "CRASHED"
    assert ensure_zombie_automation().startswith("created")
    assert ensure_zombie_automation().endswith("exists")
    assert Automation.read(name=ZOMBIE_AUTOMATION).trigger.within.total_seconds() == 90
