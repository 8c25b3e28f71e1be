"""The served deployment: a run started programmatically (as the UI does) against a real local
Prefect server, with its flow runs and artifacts read back."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import anyio

from tests.pipeline_repo import env_with_venv, make_repo


async def _wait_for_deployment(name: str, timeout: float) -> None:
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    deadline = time.monotonic() + timeout
    async with get_client() as client:
        while True:
            try:
                await client.read_deployment_by_name(name)
                return
            except ObjectNotFound:
                if time.monotonic() > deadline:
                    raise
                await anyio.sleep(1)


async def _read_back(flow_run_id) -> tuple[list[str], list[str]]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    async with get_client() as client:
        artifacts = await client.read_artifacts()
        stage_runs = await client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["dvc-ingest"])))
    keys = [a.key for a in artifacts if a.key]
    states = [r.state.type.value for r in stage_runs if r.state]
    return keys, states


def test_served_pipeline_run(prefect_api: str, tmp_path: Path, project_root: Path) -> None:
    from prefect.deployments import run_deployment

    repo = make_repo(project_root, tmp_path / "served")
    server_log = tmp_path / "serve.log"
    with open(server_log, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "serve", "--project", str(repo), "--name", "test"],
                                cwd=repo, env=env_with_venv(), stdout=log, stderr=subprocess.STDOUT)
    try:
        anyio.run(_wait_for_deployment, "vrsflow-pipeline/test", 120.0)
        flow_run = run_deployment(
            "vrsflow-pipeline/test",
            parameters={"overrides": {"ingest.check_jpeg": "header"}, "targets": ["ingest"], "push": False},
            timeout=900,
        )
        assert flow_run.state is not None and flow_run.state.is_completed(), server_log.read_text()[-4000:]
        keys, stage_states = anyio.run(_read_back, flow_run.id)
        assert "pipeline-metrics" in keys
        assert "ingest-metrics" in keys
        assert "COMPLETED" in stage_states
        assert "check_jpeg: header" in (repo / "params.yaml").read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
