"""Several people at once, through the lab's parts: the Prefect server on PostgreSQL (scripts/prefect_postgres.sh,
started here), the pipeline deployed to a process work pool and run by `vrsflow worker`; and a worker killed
mid-run leaves no process behind and its run Crashed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from stages.core import lifeline
from tests.pipeline_repo import dvc, env_with_venv, make_repo, sh
from tests.team.servers import POSTGRES_MISSING, postgres_bin, prefect_on_postgres, stop

pytestmark = pytest.mark.slow

DEPLOYMENT = "vrsflow-pipeline/vrsflow-pool"
RUNS = {"alice-a": {"sample.grpo_size": 2}, "alice-b": {"sample.grpo_size": 3},
        "bob-a": {"sample.sft_size": 4}, "bob-b": {"sample.sft_size": 6}}  # two users, two experiments each


def _start_worker(repo: Path, api_url: str, log: Path) -> subprocess.Popen:
    env = {**env_with_venv(), "PREFECT_API_URL": api_url, "PREFECT_WORKER_QUERY_SECONDS": "2"}
    with open(log, "w") as out:
        return lifeline.popen([sys.executable, "-m", "flows.cli", "worker", "--project", str(repo)], cwd=repo,
                              env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _deployment_id(client, timeout: float = 180):
    from prefect.exceptions import ObjectNotFound

    deadline = time.monotonic() + timeout
    while True:
        try:
            return client.read_deployment_by_name(DEPLOYMENT).id
        except ObjectNotFound:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _lineage(repo: Path, experiment: str) -> dict:
    """data/sample/lineage.json as the experiment recorded it: its dvc.lock → the folder's .dir listing → the file,
    all read from the DVC cache."""
    [ref] = [r for r in sh(["git", "for-each-ref", "--format=%(refname)", "refs/exps"], repo).split()
             if r.endswith(f"/{experiment}")]
    import yaml

    lock = yaml.safe_load(sh(["git", "show", f"{ref}:dvc.lock"], repo))
    [folder] = [o["md5"] for o in lock["stages"]["sample"]["outs"] if o["path"] == "data/sample"]
    cache = repo / ".dvc" / "cache" / "files" / "md5"
    listing = json.loads((cache / folder[:2] / folder[2:]).read_text())
    [entry] = [e["md5"] for e in listing if e["relpath"] == "lineage.json"]
    return json.loads((cache / entry[:2] / entry[2:]).read_text())


@pytest.mark.skipif(postgres_bin() is None, reason=POSTGRES_MISSING)
def test_four_runs_at_once_through_the_pool_on_postgres(project_root: Path, tmp_path: Path) -> None:
    from prefect import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    repo = make_repo(project_root, tmp_path / "repo", profile="ci")
    with prefect_on_postgres() as server, temporary_settings(updates={PREFECT_API_URL: server.api_url}):
        worker = _start_worker(repo, server.api_url, tmp_path / "worker.log")
        try:
            with get_client(sync_client=True) as client:
                deployment = _deployment_id(client)
                submitted = time.time()
                ids = {name: client.create_flow_run_from_deployment(deployment, parameters={
                    "overrides": overrides, "targets": ["sample"], "experiment_name": name, "push": False}).id
                    for name, overrides in RUNS.items()}
                assert time.time() - submitted < 1.0  # within a second of each other
                deadline = time.monotonic() + 1500
                while not all(client.read_flow_run(i).state.is_final() for i in ids.values()):
                    assert time.monotonic() < deadline, "the four runs did not end"
                    time.sleep(2)
                states = {name: client.read_flow_run(i).state for name, i in ids.items()}
        finally:
            stop(worker)
        server_log = server.log.read_text()
    worker_log = (tmp_path / "worker.log").read_text()
    assert all(s.is_completed() for s in states.values()), ({n: s.message for n, s in states.items()},
                                                           worker_log[-4000:])
    assert "database is locked" not in server_log + worker_log
    shown = dvc(repo, "exp", "show", "--no-pager", "--drop", ".*", "--keep", "Experiment")
    assert all(name in shown for name in RUNS), shown  # all four listed in the served project
    for name, overrides in RUNS.items():  # each experiment's params and lineage are its own
        [(key, value)] = overrides.items()
        changed = json.loads(dvc(repo, "params", "diff", "HEAD", name, "--json"))["params.yaml"]
        assert set(changed) == {key} and changed[key]["new"] == value, (name, changed)
        block, field = key.split(".")
        lineage = _lineage(repo, name)
        assert lineage["stage"] == block and lineage["params"][field] == value, name
    assert sh(["git", "status", "--porcelain"], repo).strip() == ""  # the checkout itself unchanged


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_a_worker_stopped_mid_run_leaves_no_process_and_the_run_crashed(signum: int, prefect_api: str,
                                                                        project_root: Path, tmp_path: Path) -> None:
    from prefect import get_client

    repo = make_repo(project_root, tmp_path / "repo", profile="ci")
    worker = _start_worker(repo, prefect_api, tmp_path / "worker.log")
    try:
        with get_client(sync_client=True) as client:
            run = client.create_flow_run_from_deployment(_deployment_id(client), parameters={
                "targets": ["ingest"], "push": False})
        deadline = time.monotonic() + 300
        started: list[psutil.Process] = []
        while not any("stage" in p.cmdline() for p in started):  # a stage process (`vrsflow stage NAME`) runs
            assert time.monotonic() < deadline and worker.poll() is None, (tmp_path / "worker.log").read_text()
            time.sleep(0.2)
            started = [p for p in psutil.Process(worker.pid).children(recursive=True) if _alive(p)]
        worker.send_signal(signum)
        worker.wait()
        end = time.monotonic() + 60
        while any(_alive(p) for p in started) and time.monotonic() < end:
            time.sleep(0.5)
        assert not [p.cmdline() for p in started if _alive(p)]
        with get_client(sync_client=True) as client:
            while not client.read_flow_run(run.id).state.is_final() and time.monotonic() < end:
                time.sleep(0.5)
            assert client.read_flow_run(run.id).state.is_crashed()
    finally:
        stop(worker)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
