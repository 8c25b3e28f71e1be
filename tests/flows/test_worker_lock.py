"""`vrsflow worker` runs only the pipeline, however the work pool or a deployment is edited through the API, and
ends the runs it will not run (flows/serve_worker.py), against the session's real Prefect server."""

from __future__ import annotations

import asyncio
import logging
import shlex
import sys
from datetime import datetime
from typing import Any

import anyio
import pytest

from flows.serve_worker import (
    CLIENT_RETRY_ENV,
    ENTRYPOINT,
    LOCKED_JOB_TEMPLATE,
    deploy,
    ensure_pool,
    locked_worker_class,
)

ATTACK = {"command": "touch /tmp/vrsflow-pwned", "env": {"LD_PRELOAD": "/tmp/evil.so"}, "working_dir": "/"}


def edited_template() -> dict[str, Any]:
    """Prefect's default process template with `command` set to another program: what `update_work_pool` can do."""
    from prefect.workers.process import ProcessWorker

    template = ProcessWorker.get_default_base_job_template()
    template["job_configuration"]["command"] = ATTACK["command"]
    template["job_configuration"]["env"] = ATTACK["env"]
    return template


def test_the_runs_process_comes_from_the_locked_template_whatever_the_pool_holds(prefect_api: str) -> None:
    configuration_class = locked_worker_class().job_configuration
    for template in (edited_template(), LOCKED_JOB_TEMPLATE):
        configuration = asyncio.run(configuration_class.from_template_and_values(template, ATTACK))
        assert configuration.command == shlex.join([sys.executable, "-m", "prefect.engine"])
        assert configuration.env == LOCKED_JOB_TEMPLATE["job_configuration"]["env"]
        assert configuration.env["PREFECT__FLOW_ENTRYPOINT"] == ENTRYPOINT  # not the deployment's
        assert configuration.working_dir is None


@pytest.fixture
def worker_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # Prefect's worker writes its name and id into os.environ; give them back afterwards
    monkeypatch.setenv("PREFECT__WORKER_NAME", "")
    monkeypatch.setenv("PREFECT__WORKER_ID", "")


def test_the_worker_relocks_an_edited_pool_and_refuses_runs_it_does_not_serve(
        prefect_api: str, worker_env: None, caplog: pytest.LogCaptureFixture) -> None:
    from prefect import get_client
    from prefect.client.schemas.actions import DeploymentUpdate, WorkPoolUpdate
    from prefect.states import Pending

    pool = "lock-test"
    ensure_pool(pool)
    served = deploy(pool, "lock-test")
    with get_client(sync_client=True) as client:
        client.update_work_pool(pool, WorkPoolUpdate(base_job_template=edited_template()))
        edited_at = client.read_work_pool(pool).updated
        foreign = client.create_deployment(flow_id=client.create_flow_from_name("not-vrsflow"), name="foreign",
                                           work_pool_name=pool, entrypoint="os.system")
        edited = deploy(pool, "lock-test-edited")
        client.update_deployment(edited, DeploymentUpdate(pull_steps=[
            {"prefect.deployments.steps.run_shell_script": {"script": ATTACK["command"]}}]))
        runs = {"served": client.create_flow_run_from_deployment(served),
                "job variables": client.create_flow_run_from_deployment(served, job_variables=ATTACK),
                "foreign": client.create_flow_run_from_deployment(foreign),
                "pull steps": client.create_flow_run_from_deployment(edited)}

    async def check() -> dict[str, str | None]:
        async with locked_worker_class()(work_pool_name=pool, name="lock-test-worker") as worker:
            reasons = {name: await worker.refusal(run) for name, run in runs.items()}
            # a run process that exits 0 without a final state (the edited pool's `touch`) leaves no run Pending
            await worker.client.set_flow_run_state(runs["served"].id, Pending(), force=True)
            await worker._end_if_left_open(runs["served"])
            return reasons

    with caplog.at_level(logging.WARNING):
        reasons = anyio.run(check)
    assert reasons["served"] is None
    assert reasons["job variables"] == "the run sets job variables (command, env, working_dir); this worker takes none"
    assert reasons["foreign"] == ("it is a run of flow 'not-vrsflow' (deployment 'foreign'); this worker runs only "
                                  "'vrsflow-pipeline'")
    assert reasons["pull steps"] == "its deployment has pull steps; this worker runs none"
    with get_client(sync_client=True) as client:
        assert client.read_work_pool(pool).base_job_template == LOCKED_JOB_TEMPLATE  # put back at start
        left = client.read_flow_run(runs["served"].id).state
    assert left.is_crashed() and left.message == ("the run's process ended without a final state (it was Pending); "
                                                  "see the worker's log on 'lock-test-worker'")
    [line] = [r.getMessage() for r in caplog.records if "re-locked" in r.getMessage()]
    prefix = f"work pool '{pool}': its job template differed from vrsflow's locked one (last changed "
    assert line.startswith(prefix)
    # the pool's last change: the edit, or a worker's status change since (this worker's first sync)
    assert datetime.fromisoformat(line[len(prefix):].split(",")[0]) >= edited_at


def test_an_api_that_does_not_answer_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx

    from flows.prefect_api import api_unreachable

    monkeypatch.setenv("PREFECT_CLIENT_MAX_RETRIES", CLIENT_RETRY_ENV["PREFECT_CLIENT_MAX_RETRIES"])
    request = httpx.Request("POST", "http://10.0.0.9:4200/api/flow_runs/")
    try:
        raise RuntimeError("the stage's flow failed") from httpx.ConnectError("[Errno 111] Connection refused",
                                                                             request=request)
    except RuntimeError as err:
        line = api_unreachable(err)
    assert line == ("the Prefect API did not answer http://10.0.0.9:4200/api/flow_runs/ (ConnectError: [Errno 111] "
                    "Connection refused), retried up to 6 times (PREFECT_CLIENT_MAX_RETRIES); is the server up?")
    assert api_unreachable(ValueError("params.yaml: bad")) is None
