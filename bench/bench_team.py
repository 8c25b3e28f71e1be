"""A lab's setup, measured: UI runs through `vrsflow serve` and through a work pool + `vrsflow worker`, on a Prefect
server with PostgreSQL (scripts/prefect_postgres.sh) and with SQLite (`prefect server start`, the default); DVC
push and pull over SSH (a real sshd on loopback) and to a folder.

    python bench/bench_team.py [--profile ci] [--target sample]

For each database × runner: a fresh PREFECT_HOME and server, a fresh throwaway copy of the project
(tests/pipeline_repo.py, `--profile`), the runner started, then four runs submitted through the API within a
second — two users, two experiments each on different params (`sample.grpo_size`, `sample.sft_size`), `--target`
and what it depends on. Per run: queued (submission → its flow run starts), first stage (submission → its first
`dvc-<stage>` subflow starts) and total (submission → final state); the four's makespan; whether every run
completed, all four are DVC experiments of the project, and whether "database is locked" appears in any log.
The first-submitted run's "first stage" is the submission-to-first-stage latency (nothing queued before it).

DVC: a fresh copy at `--dvc-profile` (default: params.yaml as it is, the default run) reproduced whole by
`vrsflow repro` and committed, then `vrsflow push` to an empty remote and `vrsflow pull` into a fresh clone, over
SSH (a real sshd on loopback) and to a local folder: seconds and MB moved.

Writes bench/results/team.json (figures, commit, machine). Runs poll at Prefect's defaults
(PREFECT_WORKER_QUERY_SECONDS and PREFECT_RUNNER_POLL_FREQUENCY, recorded), as a lab would run them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.results_io import write_result  # noqa: E402
from stages.core import lifeline  # noqa: E402
from tests.pipeline_repo import env_with_venv, make_repo, sh  # noqa: E402
from tests.team.servers import free_port, prefect_on_postgres, sshd, stop  # noqa: E402

RUNS = [("alice", {"sample.grpo_size": 2}), ("alice", {"sample.grpo_size": 3}),
        ("bob", {"sample.sft_size": 4}), ("bob", {"sample.sft_size": 6})]
DEPLOYMENT = {"serve": "vrsflow-pipeline/vrsflow", "worker": "vrsflow-pipeline/vrsflow-pool"}


@contextlib.contextmanager
def sqlite_server(work: Path) -> Iterator[str]:
    """`prefect server start` on its default SQLite database in a new PREFECT_HOME."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(work / "server-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_API_URL": url, "PREFECT_UI_ENABLED": "false"}
    log = work / "sqlite-server.log"
    with open(log, "w") as out:
        proc = lifeline.popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port",
                               str(port)], env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        import httpx

        deadline = time.monotonic() + 180
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the SQLite Prefect server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        stop(proc)


@contextlib.contextmanager
def postgres_server(work: Path) -> Iterator[str]:
    with prefect_on_postgres() as server:
        yield server.api_url


def wait_deployment(name: str, timeout: float = 180) -> None:
    from prefect import get_client
    from prefect.exceptions import ObjectNotFound

    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while True:
            try:
                client.read_deployment_by_name(name)
                return
            except ObjectNotFound:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


def submit_four(deployment: str, target: str) -> list[dict]:
    """The four runs, submitted back to back; each with its submission time."""
    from prefect import get_client

    submitted = []
    with get_client(sync_client=True) as client:
        dep = client.read_deployment_by_name(deployment)
        for i, (user, overrides) in enumerate(RUNS):
            name = f"{user}-{i}"
            at = time.time()
            run = client.create_flow_run_from_deployment(dep.id, parameters={
                "overrides": overrides, "targets": [target], "experiment_name": name, "push": False})
            submitted.append({"user": user, "experiment": name, "overrides": overrides, "id": run.id, "submitted": at})
    return submitted


def wait_final(runs: list[dict], timeout: float) -> None:
    from prefect import get_client

    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            states = [client.read_flow_run(r["id"]).state for r in runs]
            if all(s is not None and s.is_final() for s in states):
                return
            time.sleep(2)
    raise SystemExit(f"runs not final after {timeout:.0f} s")


def timings(runs: list[dict]) -> list[dict]:
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags

    out = []
    with get_client(sync_client=True) as client:
        for r in runs:
            run = client.read_flow_run(r["id"])
            stages = client.read_flow_runs(flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(
                all_=[f"vrsflow-run:{r['id']}"])))
            starts = [s.start_time.timestamp() for s in stages if s.start_time]
            out.append({"user": r["user"], "experiment": r["experiment"], "overrides": r["overrides"],
                        "state": run.state_name, "stage_runs": len(stages),
                        "queued_s": round(run.start_time.timestamp() - r["submitted"], 2) if run.start_time else None,
                        "first_stage_s": round(min(starts) - r["submitted"], 2) if starts else None,
                        "total_s": round(run.end_time.timestamp() - r["submitted"], 2) if run.end_time else None})
    return out


def run_case(database: str, runner: str, url: str, work: Path, profile: str, target: str) -> tuple[dict, Path]:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    repo = make_repo(ROOT, work / f"{database}-{runner}" / "repo", profile=profile)
    env = {**env_with_venv(), "PREFECT_API_URL": url, "PREFECT_HOME": str(work / f"{database}-{runner}" / "home")}
    command = ["serve", "--project", str(repo)] if runner == "serve" else ["worker", "--project", str(repo)]
    log = work / f"{database}-{runner}" / "runner.log"
    with open(log, "w") as out:
        proc = lifeline.popen([sys.executable, "-m", "flows.cli", *command], cwd=repo, env=env, stdout=out,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        with temporary_settings(updates={PREFECT_API_URL: url}):
            wait_deployment(DEPLOYMENT[runner])
            runs = submit_four(DEPLOYMENT[runner], target)
            wait_final(runs, 1800)
            rows = timings(runs)
    finally:
        stop(proc)
    first = min(runs, key=lambda r: r["submitted"])
    experiments = sh(["git", "for-each-ref", "--format=%(refname)", "refs/exps"], repo).split()
    logs = log.read_text()
    figures = {
        "runs": rows,
        "submitted_within_s": round(max(r["submitted"] for r in runs) - first["submitted"], 3),
        "first_run_submission_to_first_stage_s": next(r["first_stage_s"] for r in rows
                                                       if r["experiment"] == first["experiment"]),
        "four_runs_makespan_s": round(max(r["total_s"] or 0 for r in rows), 2),
        "all_completed": all(r["state"] == "Completed" for r in rows),
        "experiments_recorded": sorted(e.rsplit("/", 1)[-1] for e in experiments),
        "database_is_locked_in_logs": "database is locked" in logs,
    }
    return figures, repo


def _mb(folder: Path) -> float:
    return round(sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6, 3)


def transfer_case(repo: Path, work: Path, kind: str) -> dict:
    """Push every output of dvc.lock to an empty remote, pull them into a fresh clone: seconds and MB."""
    remote = work / f"remote-{kind}"
    remote.mkdir()
    clone = work / f"clone-{kind}"
    sh(["git", "clone", "-q", str(repo), str(clone)], work)

    def timed(verb: str, where: Path, url: str, key: Path | None) -> float:
        env = {**env_with_venv(), "VRSFLOW_DVC_REMOTE": url, **({"VRSFLOW_DVC_SSH_KEY": str(key)} if key else {})}
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "flows.cli", verb], cwd=where, env=env, check=True,
                       capture_output=True)
        return round(time.perf_counter() - start, 2)

    if kind == "ssh":
        with sshd(work / "sshd") as server:
            push_s = timed("push", repo, server.url(remote), server.key)
            pull_s = timed("pull", clone, server.url(remote), server.key)
    else:
        push_s = timed("push", repo, str(remote), None)
        pull_s = timed("pull", clone, str(remote), None)
    status = sh([sys.executable, "-m", "dvc", "status"], clone)
    return {"push_s": push_s, "pull_s": pull_s, "mb_in_remote": _mb(remote),
            "files_in_remote": sum(1 for p in remote.rglob("*") if p.is_file()),
            "clone_up_to_date": "up to date" in status}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="ci", help="params profile of the copies (default ci: the tests' "
                                                        "smallest; the default pipeline is too slow for 16 runs "
                                                        "on 2 shared cores)")
    parser.add_argument("--target", default="sample", help="the stage each run reproduces (with what it needs)")
    parser.add_argument("--dvc-profile", default="default", help="params profile of the copy pushed and pulled "
                                                                 "(default: params.yaml as it is)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vrsflow-bench-team-"))
    os.environ.update(PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1", PREFECT_HOME=str(work / "home"))
    os.environ.pop("PREFECT_API_URL", None)
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    figures: dict = {"profile": args.profile, "target": args.target,
                     "worker_query_seconds": settings.worker.query_seconds,
                     "runner_poll_frequency_s": settings.runner.poll_frequency, "cases": {}}
    for database, server in (("postgres", postgres_server), ("sqlite", sqlite_server)):
        (work / database).mkdir()
        with server(work / database) as url:
            for runner in ("serve", "worker"):
                case, _ = run_case(database, runner, url, work, args.profile, args.target)
                figures["cases"][f"{database}/{runner}"] = case
    built = make_repo(ROOT, work / "dvc" / "repo", profile=None if args.dvc_profile == "default" else args.dvc_profile)
    start = time.perf_counter()
    sh([sys.executable, "-m", "flows.cli", "repro"], built, timeout=3600)
    figures["dvc_run"] = {"profile": args.dvc_profile, "repro_s": round(time.perf_counter() - start, 1)}
    sh(["git", "add", "-A"], built)
    sh(["git", "commit", "-qm", "reproduced"], built)
    figures["dvc"] = {kind: transfer_case(built, work / "dvc", kind) for kind in ("folder", "ssh")}
    write_result("team", figures, baseline="SQLite (`prefect server start`'s default database) against PostgreSQL "
                 "(scripts/prefect_postgres.sh), and a local-folder DVC remote against SSH, in the same run",
                 code=("flows", "scripts", "stages", "bench"))


if __name__ == "__main__":
    main()
