"""The served deployment, end to end against a real local Prefect server: runs started as the UI starts
them work in DVC's temporary experiment workspaces, so neither a refused nor a successful run leaves
anything in the checkout but the recorded experiment; a run that would send the key elsewhere is refused
and sends nothing; stage runs are its subflows and carry their params."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import anyio

from tests.flows.capture_server import capture_server
from tests.pipeline_repo import COMMITTED_OUTPUTS, dvc, env_with_venv, make_repo, sh

POLL_S = 0.5  # how often run_deployment reads a run's state (Prefect's default: 5 s)


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
                await anyio.sleep(0.5)


def _read_back(flow_run_id) -> dict:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterTags,
        LogFilter,
        LogFilterFlowRunId,
    )

    with get_client(sync_client=True) as client:
        run_artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(
            any_=[flow_run_id])))
        stage_runs = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["dvc-ingest"])),
                                           flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(
                                               all_=[f"vrsflow-run:{flow_run_id}"])))
        stage_artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(
            any_=[r.id for r in stage_runs]))) if stage_runs else []
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
        parents = [client.read_task_run(r.parent_task_run_id) for r in stage_runs if r.parent_task_run_id]
    return {"artifacts": {a.key: a for a in run_artifacts if a.key}, "stage_runs": stage_runs, "parents": parents,
            "stage_artifacts": {a.key: a for a in stage_artifacts if a.key}, "log": "\n".join(x.message for x in logs)}


def test_served_runs_are_isolated_experiments(prefect_api: str, tmp_path: Path, project_root: Path) -> None:
    from prefect.deployments import run_deployment

    # the ci profile's tiny synthetic data, no frozen checkpoints (the run never reaches them): what is asserted is
    # where a run writes, not what it computes
    repo = make_repo(project_root, tmp_path / "served", profile="ci", frozen_checkpoints=False)
    other = tmp_path / "other"  # a repository a run must not be able to execute
    other.mkdir()
    (other / "dvc.yaml").write_text("stages:\n  owned:\n    cmd: echo ran > owned.txt\n    outs: [owned.txt]\n")
    sh(["git", "init", "-q"], other)
    params_before = (repo / "params.yaml").read_bytes()
    server_log = tmp_path / "serve.log"
    with open(server_log, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "serve", "--project", str(repo), "--name", "test"],
                                cwd=repo, env={**env_with_venv(), "VRSFLOW_TEACHER_API_KEY": "served-secret",
                                               # the runner picks up a scheduled run within 1 s, not 10 s
                                               "PREFECT_RUNNER_POLL_FREQUENCY": "1"},
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        anyio.run(_wait_for_deployment, "vrsflow-pipeline/test", 120.0)
        refused = run_deployment("vrsflow-pipeline/test", parameters={"overrides": {"sample.grpo_size": "abc"}},
                                 timeout=300, poll_interval=POLL_S)
        assert refused.state is not None and refused.state.is_failed()
        assert refused.state.message == "refused: sample.grpo_size: expected an integer, got str 'abc'"
        with capture_server() as (url, seen):  # the checked-in key, sent to another host: refused, nothing sent
            leak = run_deployment("vrsflow-pipeline/test", timeout=300, poll_interval=POLL_S, parameters={
                "overrides": {"teacher.backend": "openai", "teacher.base_url": url}, "targets": ["cot"]})
            assert leak.state is not None and leak.state.is_failed()
            assert leak.state.message == ("refused: teacher.backend, teacher.base_url: fixed by the server, a run "
                                          "may not change them (edit params.yaml and serve again)")
            assert seen == []
        try:
            elsewhere = run_deployment("vrsflow-pipeline/test", parameters={"project_dir": str(other)}, timeout=300,
                                       poll_interval=POLL_S)
            assert elsewhere.state is not None and not elsewhere.state.is_completed()
        except Exception as err:  # the server refuses a parameter the flow does not have
            assert "project_dir" in str(err)
        assert not (other / "owned.txt").exists()
        assert (repo / "params.yaml").read_bytes() == params_before

        flow_run = run_deployment(
            "vrsflow-pipeline/test",
            parameters={"overrides": {"ingest.check_jpeg": "decode"}, "targets": ["ingest"],
                        "experiment_name": "served-ingest", "push": False},
            timeout=900, poll_interval=POLL_S,
        )
        assert flow_run.state is not None and flow_run.state.is_completed(), server_log.read_text()[-4000:]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # the checkout is exactly as before: same params bytes, nothing written, the experiment recorded
    assert (repo / "params.yaml").read_bytes() == params_before
    assert sh(["git", "status", "--porcelain"], repo).strip() == ""
    assert not (repo / "data").exists()  # metrics/: only the frozen stages' committed files
    assert sorted(p.name for p in (repo / "metrics").iterdir()) == sorted(
        Path(name).name for name in COMMITTED_OUTPUTS if name.startswith("metrics/"))
    changed = json.loads(dvc(repo, "params", "diff", "HEAD", "served-ingest", "--json"))
    assert changed["params.yaml"]["ingest.check_jpeg"] == {"old": "header", "new": "decode"}
    back = _read_back(flow_run.id)
    assert {"pipeline-experiment", "pipeline-params", "pipeline-metrics"} <= set(back["artifacts"])
    assert "served-ingest" in back["artifacts"]["pipeline-experiment"].data
    assert "ingest.check_jpeg" in back["artifacts"]["pipeline-params"].data
    assert "Running stage 'ingest'" in back["log"]  # dvc's output is in the run log
    [stage_run] = back["stage_runs"]  # the ingest flow run carries the pipeline run's id and is its subflow
    assert stage_run.state is not None and stage_run.state.is_completed()
    assert "experiment:served-ingest" in stage_run.tags
    [parent] = back["parents"]  # a subflow of the pipeline run's dvc-exp-run task
    assert parent.flow_run_id == flow_run.id and parent.name.startswith("dvc-exp-run")
    params_rows = json.loads(back["stage_artifacts"]["ingest-params"].data)
    assert {"param": "ingest.check_jpeg", "value": "decode"} in params_rows
