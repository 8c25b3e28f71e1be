"""The pipeline flow for runs started from the Prefect UI, and the deployment that serves it.

A UI run is `dvc exp run -S key=value …` in the project folder, so DVC stays the single source of
truth; each stage's own flow (`dvc-<stage>`) appears as its own run with tasks, logs and artifacts.
Results are pushed to the DVC remote when one is set.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE

from stages.core import dvc_cli
from stages.core.params import load_params

DEPLOYMENT_NAME = "vrsflow"
FLOW_NAME = "vrsflow-pipeline"


@task(name="dvc-exp-run", cache_policy=NO_CACHE, persist_result=False)
def exp_run_task(project_dir: str, overrides: dict[str, str], targets: list[str], name: str | None) -> str:
    """Run the experiment; dvc's output streams into the task log."""
    return dvc_cli.exp_run(Path(project_dir), overrides, targets, name)


@task(name="dvc-metrics", cache_policy=NO_CACHE, persist_result=False)
def metrics_task(project_dir: str) -> dict:
    """The workspace metrics after the run."""
    return dvc_cli.metrics_show(Path(project_dir))


@task(name="dvc-push", cache_policy=NO_CACHE, persist_result=False)
def push_task(project_dir: str, remote_name: str, url: str) -> str:
    """Configure the remote and push data and checkpoints."""
    dvc_cli.configure_remote(Path(project_dir), remote_name, url)
    return dvc_cli.push(Path(project_dir), remote_name)


@flow(name=FLOW_NAME)
def pipeline_flow(
    overrides: dict[str, str] | None = None,
    targets: list[str] | None = None,
    experiment_name: str | None = None,
    push: bool = True,
    project_dir: str = ".",
) -> dict:
    """Run the DVC pipeline as an experiment with params overrides.

    Args:
        overrides: params.yaml overrides, e.g. {"sample.grpo_size": "32", "cot.template_set": "veason"}.
        targets: stages to reproduce (default: the whole pipeline).
        experiment_name: name of the DVC experiment (default: DVC's generated name).
        push: push results to the DVC remote when one is configured.
        project_dir: the vrsflow checkout to run in.
    """
    logger = get_run_logger()
    overrides = dict(overrides or {})
    exp_run_task(project_dir, overrides, list(targets or []), experiment_name)
    metrics = metrics_task(project_dir)
    rows = [{"file": path, "metric": key, "value": value}
            for path, values in sorted(metrics.items()) for key, value in sorted(_flat(values).items())]
    if rows:
        create_table_artifact(table=rows, key="pipeline-metrics", description="dvc metrics show after this run")
    params = load_params(Path(project_dir) / "params.yaml")
    url = dvc_cli.remote_url(params.remote.url, params.remote.url_env)
    if push and url:
        push_task(project_dir, params.remote.name, url)
    else:
        logger.info("no DVC remote configured (params remote.url / $%s): nothing pushed", params.remote.url_env)
    return metrics


def _flat(values: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def serve(project_dir: str = ".", name: str = DEPLOYMENT_NAME) -> None:
    """Serve the pipeline as a deployment: start runs from the Prefect UI (Deployments → Run)."""
    pipeline_flow.serve(
        name=name,
        parameters={"project_dir": str(Path(project_dir).resolve())},
        description="Run the vrsflow DVC pipeline (dvc exp run -S …) with params overrides.",
        tags=["vrsflow"],
    )
