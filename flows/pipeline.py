"""The pipeline flow for runs started from the Prefect UI or API, and the deployment that serves it.

A served run is `dvc exp run --temp -S key=value … [stages]` in the project folder fixed by
`vrsflow serve`: DVC runs the experiment in its own temporary workspace and records it as an
experiment (a git ref plus cached outputs), so nothing survives in the user's checkout but that
experiment — a failed run changes nothing. Overrides, targets and the experiment name are checked
first (flows/serve_request.py: the same params validation as everywhere else, plus the served-run
policy — a run changes the experiment, never env-var names, endpoints, paths outside the project or
process settings, which `vrsflow serve` fixes when it starts); a refused run fails with one line and
DVC is never called. dvc's output streams into the run log; each stage's flow
(`dvc-<stage>`) is a subflow of the run and carries the params it read (flows/serve_link.py); the
experiment name, changed params and metrics are artifacts. Results are pushed when a DVC remote and
a git remote are set. The same flow also runs from a work pool, picked up by `vrsflow worker`
(flows/serve_worker.py), under the same policy (`fix_served_project`). A run process ends with the
server or worker that started it, and dvc and the stages end with the run.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext, TaskRunContext
from prefect.states import Failed

from flows.prefect_api import REPRO_PID_ENV, run_record
from flows.serve_link import parent_env
from flows.serve_request import (
    SERVED_POLICY_ENV,
    SERVED_PROJECT_ENV,
    RequestRefused,
    RunRequest,
    check_request,
    served_project,
    serving_policy,
)
from stages.core import dvc_cli, lifeline
from stages.params import load_params

DEPLOYMENT_NAME = "vrsflow"
FLOW_NAME = "vrsflow-pipeline"
HEADLINE_METRICS = ("metrics/summary.json", "metrics/eval.json")  # the first one the experiment has
SERVED_BY_ENV = "VRSFLOW_SERVED_BY_PID"  # `vrsflow serve` / `vrsflow worker`: the process a run lives no longer than


@task(name="dvc-exp-run", cache_policy=NO_CACHE, persist_result=False)
def exp_run_task(request: RunRequest) -> str:
    """`dvc exp run --temp` of the checked request; dvc's output streams into the run log."""
    flow_run = FlowRunContext.get().flow_run  # type: ignore[union-attr]
    task_run = TaskRunContext.get().task_run  # type: ignore[union-attr]
    args = ["exp", "run", "--temp", "--name", request.name]
    for item in request.set_args:
        args += ["-S", item]
    env = parent_env(str(flow_run.id), str(task_run.id), request.name)  # stage runs become subflows of this task
    # dvc dies with this process (parent-death signal) and each stage it starts watches this process
    # (flows/cli.py): a run stopped or killed leaves no dvc or stage process behind
    env[REPRO_PID_ENV] = str(os.getpid())
    return dvc_cli.run_dvc([*args, *request.targets], request.project, extra_env=env, tied=True)


@task(name="dvc-exp-diff", cache_policy=NO_CACHE, persist_result=False)
def diff_task(project: str, name: str) -> tuple[dict, dict]:
    """The experiment against its baseline (HEAD): changed params, and every metric."""
    params = json.loads(dvc_cli.run_dvc(["params", "diff", "HEAD", name, "--json"], Path(project), capture=True)
                        or "{}")
    metrics = json.loads(dvc_cli.run_dvc(["metrics", "diff", "HEAD", name, "--all", "--json"], Path(project),
                                         capture=True) or "{}")
    return params, metrics


@task(name="dvc-exp-push", cache_policy=NO_CACHE, persist_result=False)
def push_task(project: str, name: str, remote_name: str, url: str, git_remote: str) -> str:
    """Configure the DVC remote and push the experiment (git ref + its data)."""
    dvc_cli.configure_remote(Path(project), remote_name, url)
    return dvc_cli.run_dvc(["exp", "push", "-r", remote_name, git_remote, name], Path(project))


@flow(name=FLOW_NAME)
def pipeline_flow(
    overrides: dict[str, Any] | None = None,
    targets: list[str] | None = None,
    experiment_name: str | None = None,
    push: bool = True,
) -> Any:
    """Run the DVC pipeline as an isolated experiment with params overrides.

    Args:
        overrides: params overrides by dotted key, e.g. {"sample.grpo_size": "32", "sample.grpo_tasks": "[veason]"}.
        targets: stages of dvc.yaml to reproduce (default: the whole pipeline).
        experiment_name: name of the DVC experiment (default: ui-<this run's name>).
        push: push the experiment to the DVC remote when one (and a git remote) is configured.
    """
    logging.getLogger("stages").setLevel(logging.INFO)  # dvc's output lines reach the run log
    flow_run = FlowRunContext.get().flow_run  # type: ignore[union-attr]
    _end_with_server()
    # recorded (flow run, this pid): killed outright, the run is marked Crashed by the next stage or run on this
    # machine (flows/prefect_api.py mark_killed_runs)
    with run_record(str(flow_run.id)):
        return _run_pipeline(flow_run, overrides, targets, experiment_name, push)


def _end_with_server() -> None:
    """Stop this run when the `vrsflow serve` / `vrsflow worker` process that started it ends, however it ends
    (SIGTERM to this process: Prefect marks the run Crashed; dvc and the stages follow it)."""
    pid = os.environ.get(SERVED_BY_ENV, "")
    if pid.isdigit() and int(pid) != os.getpid():
        lifeline.stop_when_gone(int(pid))


def _run_pipeline(flow_run: Any, overrides: dict[str, Any] | None, targets: list[str] | None,
                  experiment_name: str | None, push: bool) -> Any:
    logger = get_run_logger()
    name = experiment_name or f"ui-{flow_run.name}-{str(flow_run.id)[:6]}"
    try:
        request = check_request(served_project(), overrides if overrides is not None else {}, targets, name)
    except RequestRefused as err:
        logger.error("refused: %s", err)
        return Failed(message=f"refused: {err}")
    logger.info("experiment %s: %s", request.name, " ".join(request.set_args) or "no overrides")
    exp_run_task(request)
    params_diff, metrics_diff = diff_task(str(request.project), request.name)
    _publish(request, params_diff, metrics_diff)
    params = load_params(request.project / "params.yaml")
    url = dvc_cli.remote_url(params.remote.url, params.remote.url_env)
    git_remote = _git_remote(request.project)
    if push and url and git_remote:
        push_task(str(request.project), request.name, params.remote.name, url, git_remote)
    elif push:
        logger.info("not pushed: needs a DVC remote (params remote.url / $%s) and a git remote; the experiment "
                    "is recorded locally (`dvc exp show`, `dvc exp apply %s`)", params.remote.url_env, request.name)
    return {"experiment": request.name, "params": params_diff, "metrics": metrics_diff}


def _git_remote(project: Path) -> str:
    import subprocess

    names = subprocess.run(["git", "remote"], cwd=project, capture_output=True, text=True).stdout.split()
    return "origin" if "origin" in names else (names[0] if names else "")


def _publish(request: RunRequest, params_diff: dict, metrics_diff: dict) -> None:
    changed = [{"param": key, "old": _text(change.get("old")), "new": _text(change.get("new"))}
               for changes in params_diff.values() for key, change in sorted(changes.items())]
    metrics = [{"file": path, "metric": key, "value": change.get("new"), "baseline": change.get("old")}
               for path, changes in sorted(metrics_diff.items()) for key, change in sorted(changes.items())]
    headline_file = next((f for f in HEADLINE_METRICS if f in metrics_diff), "")
    headline = [row for row in metrics if row["file"] == headline_file]
    if changed:
        create_table_artifact(table=changed, key="pipeline-params", description=f"{request.name}: changed params")
    if metrics:
        create_table_artifact(table=metrics, key="pipeline-metrics", description=f"{request.name}: every metric")
    lines = [f"# Experiment `{request.name}`", "",
             f"Targets: {', '.join(request.targets) or 'the whole pipeline'}. "
             f"Apply it to a checkout with `dvc exp apply {request.name}`; compare with `dvc exp show`.", "",
             "## Changed params", ""]
    lines += _markdown_table(["param", "old", "new"], changed) if changed else ["(none)"]
    lines += ["", f"## Headline metrics ({headline_file or 'none'})", ""]
    lines += _markdown_table(["metric", "value", "baseline"], headline) if headline else ["(none)"]
    create_markdown_artifact(markdown="\n".join(lines) + "\n", key="pipeline-experiment",
                             description=f"experiment {request.name}")


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _markdown_table(columns: list[str], rows: list[dict]) -> list[str]:
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
            *("| " + " | ".join(f"`{_text(row[c])}`" for c in columns) + " |" for row in rows)]


def serve(project_dir: str = ".", name: str = DEPLOYMENT_NAME, allowed_roots: tuple[str, ...] = ()) -> None:
    """Serve the pipeline as a deployment for the project in `project_dir` (fixed here, not per run).

    Args:
        project_dir: the checkout runs execute in.
        name: deployment name.
        allowed_roots: folders outside the project that a run's path params may name (`--allow-root`);
            the project's server-side params are fixed from its params.yaml now.

    Raises:
        ParamsError: the project's params.yaml is invalid.
        ServeRefused: the Prefect API is reachable by others without credentials (flows/serve_auth.py).
        FileNotFoundError: no dvc.yaml, or an allowed root that is not a folder.
    """
    project = fix_served_project(project_dir, allowed_roots)
    pipeline_flow.serve(
        name=name,
        description=f"Run the vrsflow DVC pipeline in {project} as an isolated experiment "
                    "(dvc exp run --temp -S …) with checked params overrides.",
        tags=["vrsflow"],
        enforce_parameter_schema=True,
        limit=1,  # one experiment at a time: runs share the repository's git refs, DVC cache and lock
    )


def fix_served_project(project_dir: str | Path, allowed_roots: tuple[str, ...] = ()) -> Path:
    """What `vrsflow serve` and `vrsflow worker` fix before taking runs: the project, the served-run policy
    (allowed roots, the server-side params of its params.yaml) and this process as the one runs end with, all in
    this process's environment, which the run processes inherit; the API is checked, and the runs of killed
    processes on it marked Crashed. Returns the project folder.

    Raises:
        ParamsError: the project's params.yaml is invalid.
        ServeRefused: the Prefect API is reachable by others without credentials (flows/serve_auth.py).
        FileNotFoundError: no dvc.yaml, or an allowed root that is not a folder.
    """
    from prefect.settings import get_current_settings

    from flows.prefect_api import get_prefect_home, mark_killed_runs
    from flows.serve_auth import check_current_api

    project = Path(project_dir).resolve()
    if not (project / "dvc.yaml").is_file():
        raise FileNotFoundError(f"{project}: no dvc.yaml (serve the vrsflow checkout)")
    policy = serving_policy(project, allowed_roots)  # validates params.yaml too
    check_current_api()
    os.environ[SERVED_PROJECT_ENV] = str(project)  # runs execute in child processes that inherit it
    os.environ[SERVED_POLICY_ENV] = policy.to_env()
    os.environ[SERVED_BY_ENV] = str(os.getpid())
    mark_killed_runs(Path(get_prefect_home()), get_current_settings().api.url or "")
    return project
