"""`vrsflow worker` as a lab runs it, against a real Prefect server (SQLite): the pool's template edited through the
API to another command changes nothing, a run it will not run is ended within one polling interval, and a server
restarted under a running stage leaves the run COMPLETED (flows/serve_worker.py, docs/team.md)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from stages.core import lifeline
from tests.pipeline_repo import env_with_venv, make_repo
from tests.team.servers import free_port, stop
from tests.team.test_team_runs import _deployment_id

pytestmark = pytest.mark.slow

QUERY_S = 5  # the worker's polling interval here (Prefect's default is 10 s)


def _edit_pool(client, marker: Path) -> None:
    """What anyone holding the API secret can do: the pool's template runs another command, with LD_PRELOAD."""
    from prefect.client.schemas.actions import WorkPoolUpdate
    from prefect.workers.process import ProcessWorker

    template = ProcessWorker.get_default_base_job_template()
    template["job_configuration"]["command"] = f"touch {marker}"
    template["job_configuration"]["env"] = {"LD_PRELOAD": str(marker.with_suffix(".so"))}
    client.update_work_pool("vrsflow", WorkPoolUpdate(base_job_template=template))


def _start_worker(repo: Path, api_url: str, log: Path) -> subprocess.Popen:
    env = {**env_with_venv(), "PREFECT_API_URL": api_url, "PREFECT_WORKER_QUERY_SECONDS": str(QUERY_S),
           "PREFECT_WORKER_HEARTBEAT_SECONDS": "5"}
    with open(log, "w") as out:
        return lifeline.popen([sys.executable, "-m", "flows.cli", "worker", "--project", str(repo)], cwd=repo,
                              env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _wait_final(client, run_id, timeout: float):
    deadline = time.monotonic() + timeout
    while not (state := client.read_flow_run(run_id).state).is_final():
        assert time.monotonic() < deadline, f"run {run_id} still {state.name} after {timeout:.0f} s"
        time.sleep(0.2)
    return state


def test_an_edited_pool_runs_the_pipeline_and_refused_runs_end_within_a_poll(
        prefect_api: str, project_root: Path, tmp_path: Path) -> None:
    from prefect import get_client

    repo = make_repo(project_root, tmp_path / "repo", profile="ci")
    marker = tmp_path / "pwned"
    log = tmp_path / "worker.log"
    worker = _start_worker(repo, prefect_api, log)
    try:
        with get_client(sync_client=True) as client:
            deployment = _deployment_id(client)
            _edit_pool(client, marker)
            # the pipeline runs (and refuses this override in one line): the edited command does not
            served = client.create_flow_run_from_deployment(deployment, parameters={
                "overrides": {"no_such_block.key": 1}, "targets": ["sample"], "push": False})
            asked = client.create_flow_run_from_deployment(deployment, job_variables={"command": f"touch {marker}"})
            foreign = client.create_deployment(flow_id=client.create_flow_from_name("not-vrsflow"), name="foreign",
                                               work_pool_name="vrsflow", entrypoint="os.system")
            other = client.create_flow_run_from_deployment(foreign)
            created = time.monotonic()
            refused = {}
            for run in (asked, other):
                state = _wait_final(client, run.id, 4 * QUERY_S)
                refused[run.id] = (state, time.monotonic() - created)
            served_state = _wait_final(client, served.id, 300)
            template = client.read_work_pool("vrsflow").base_job_template
    finally:
        stop(worker)
    text = log.read_text()
    assert served_state.is_failed() and served_state.message.startswith("refused: "), (served_state, text[-3000:])
    assert "no_such_block" in served_state.message
    print(f"refused runs Cancelled {', '.join(f'{t:.1f} s' for _, t in refused.values())} after they were created "
          f"(polling every {QUERY_S} s)")
    for state, after_s in refused.values():
        assert state.is_cancelled() and state.message.startswith("refused by vrsflow worker"), state
        assert after_s < QUERY_S * 1.3 + 3, after_s  # one polling interval (Prefect jitters it by 30 %) + its work
    assert "(command); this worker takes none" in refused[asked.id][0].message
    assert "flow 'not-vrsflow'" in refused[other.id][0].message
    assert not marker.exists()
    from flows.serve_worker import LOCKED_JOB_TEMPLATE

    assert template == LOCKED_JOB_TEMPLATE  # put back at the worker's next sync
    assert "its job template differed from vrsflow's locked one (last changed 20" in text


def _server(home: Path, port: int) -> subprocess.Popen:
    """`prefect server start` on `port`, its SQLite database in `home`: started again, it finds its runs. With its
    services: the task-run recorder writes the task run a stage's flow run names as its parent."""
    env = {k: v for k, v in env_with_venv().items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_UI_ENABLED="false")
    with open(home / "server.log", "a") as out:
        proc = lifeline.popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port",
                               str(port)], env=env, stdout=out, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not _healthy(f"http://127.0.0.1:{port}/api"):
        assert proc.poll() is None and time.monotonic() < deadline, (home / "server.log").read_text()[-3000:]
        time.sleep(0.1)
    return proc


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _sample_running(client) -> bool:
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName, FlowRunFilter, FlowRunFilterState
    from prefect.client.schemas.filters import FlowRunFilterStateType as StateTypes
    from prefect.client.schemas.objects import StateType

    return bool(client.read_flow_runs(
        flow_filter=FlowFilter(name=FlowFilterName(any_=["dvc-sample"])),
        flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=StateTypes(any_=[StateType.RUNNING])))))


def test_a_server_restart_under_a_running_stage_leaves_the_run_completed(project_root: Path, tmp_path: Path) -> None:
    from prefect import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    home = tmp_path / "server-home"
    home.mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    repo = make_repo(project_root, tmp_path / "repo", profile="ci")
    log = tmp_path / "worker.log"
    server = _server(home, port)
    worker = _start_worker(repo, url, log)
    try:
        with temporary_settings(updates={PREFECT_API_URL: url}), get_client(sync_client=True) as client:
            run = client.create_flow_run_from_deployment(_deployment_id(client), parameters={
                "targets": ["sample"], "push": False})
        deadline = time.monotonic() + 600
        with temporary_settings(updates={PREFECT_API_URL: url}), get_client(sync_client=True) as client:
            while not _sample_running(client):  # the stage's process has reached the API: its flow runs
                assert time.monotonic() < deadline and worker.poll() is None, log.read_text()[-4000:]
                assert not client.read_flow_run(run.id).state.is_final(), log.read_text()[-4000:]
                time.sleep(0.1)
        stopped = time.monotonic()
        stop(server)
        time.sleep(max(0.0, 5 - (time.monotonic() - stopped)))
        restarted_s = time.monotonic() - stopped
        server = _server(home, port)
        down_s = time.monotonic() - stopped
        with temporary_settings(updates={PREFECT_API_URL: url}), get_client(sync_client=True) as client:
            state = _wait_final(client, run.id, 900)
    finally:
        stop(worker)
        stop(server)
    print(f"server restarted {restarted_s:.1f} s after it was stopped; API down {down_s:.1f} s under the stage")
    assert restarted_s < 10
    assert state.is_completed(), (state.name, state.message, log.read_text()[-6000:])
