"""UI runs through a Prefect work pool: the pipeline deployed to a process-type pool, and `vrsflow worker`, the
worker on each machine that runs the stages (docs/team.md).

`vrsflow serve` is one process that both offers the deployment and runs its runs, on the machine it serves. A lab
has one shared Prefect server and several GPU machines: the deployment `vrsflow-pipeline/<name>` then lives in a
work pool of type `process`, and each GPU machine runs `vrsflow worker --project DIR`, which makes sure the pool
and the deployment exist and then polls the pool; a run it picks up runs in a child process on that machine,
against that machine's checkout. The served-run policy is the same as `vrsflow serve`'s and fixed the same way
(`flows.pipeline.fix_served_project`): the project, the allowed roots and the server-side params are this
process's, inherited by each run, never a run parameter; overrides are checked by the same `check_request`.

The deployment's entry point is the module path `flows.pipeline:pipeline_flow`, imported from the worker's own
environment, so one deployment serves workers whose checkouts live in different folders. Each worker runs one
run at a time (`limit`, as `vrsflow serve`): runs share its checkout's git refs, DVC cache and lock; more
machines, more runs at once.

Process handling keeps the killed-run guarantees: a run process ends with its worker, however the worker ends
(a watch on the worker's pid, `flows.pipeline.SERVED_BY_ENV`), dvc and the stages end with the run, and a run
whose process was killed outright is marked Crashed when the worker (or a stage) next starts on this machine.
"""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

DEFAULT_POOL = "vrsflow"
DEFAULT_DEPLOYMENT = "vrsflow-pool"
POOL_TYPE = "process"


# The pool's job template with nothing a run can set. Prefect's process worker builds each run's process from the
# pool's template and the run's job variables (`command`, `env`, `working_dir`, … in the default template), which
# anyone who may start a run can pass: a UI run could otherwise name the command the worker executes, or its
# environment (PATH, LD_PRELOAD). Here every field is a literal (command None: the worker's own
# `python -m prefect.engine`), and the variables schema has no properties, so job variables change nothing.
LOCKED_JOB_TEMPLATE = {
    "job_configuration": {"command": None, "env": {}, "labels": {}, "name": None, "stream_output": True,
                          "working_dir": None},
    "variables": {"type": "object", "properties": {}},
}


class PoolRefused(RuntimeError):
    """The named work pool cannot take the deployment; the message is one line."""


def ensure_pool(pool: str) -> str:
    """Create the process-type work pool `pool` unless it exists; say what was done.

    Raises:
        PoolRefused: a pool of that name exists with another type.
    """
    from prefect import get_client
    from prefect.client.schemas.actions import WorkPoolCreate, WorkPoolUpdate
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            existing = client.read_work_pool(pool)
        except ObjectNotFound:
            client.create_work_pool(WorkPoolCreate(name=pool, type=POOL_TYPE, base_job_template=LOCKED_JOB_TEMPLATE))
            return f"created work pool '{pool}' (type {POOL_TYPE}, no job variables)"
        if existing.type != POOL_TYPE:
            raise PoolRefused(f"work pool '{pool}' has type '{existing.type}': the pipeline's runs need a "
                              f"'{POOL_TYPE}' pool (pick another --pool name)")
        if existing.base_job_template != LOCKED_JOB_TEMPLATE:  # made elsewhere: runs could set the command
            client.update_work_pool(pool, WorkPoolUpdate(base_job_template=LOCKED_JOB_TEMPLATE))
            return f"work pool '{pool}' exists; its job template was locked (no job variables)"
    return f"work pool '{pool}' exists"


def deploy(pool: str, name: str = DEFAULT_DEPLOYMENT) -> str:
    """Deploy the pipeline flow to `pool` as `vrsflow-pipeline/<name>` (idempotent); return the deployment id."""
    from prefect.deployments.runner import EntrypointType, RunnerDeployment

    from flows.pipeline import pipeline_flow

    deployment = RunnerDeployment.from_flow(
        pipeline_flow, name=name, entrypoint_type=EntrypointType.MODULE_PATH, work_pool_name=pool,
        tags=["vrsflow"], enforce_parameter_schema=True,
        description="Run the vrsflow DVC pipeline as an isolated experiment (dvc exp run --temp -S …) with checked "
                    "params overrides, on the checkout of the worker that picks the run up.")
    return str(deployment.apply(work_pool_name=pool))


def work(project_dir: str | Path = ".", pool: str = DEFAULT_POOL, name: str = DEFAULT_DEPLOYMENT,
         allowed_roots: tuple[str, ...] = (), limit: int = 1, worker_name: str | None = None) -> None:
    """Fix the served project and policy, make sure the pool and the deployment exist, and run a process worker
    on `pool` until stopped (SIGTERM or Ctrl-C: the runs in progress are stopped and marked Crashed).

    Raises:
        ParamsError: the project's params.yaml is invalid.
        ServeRefused: the Prefect API is reachable by others without credentials (flows/serve_auth.py).
        FileNotFoundError: no dvc.yaml, or an allowed root that is not a folder.
        PoolRefused: the pool exists with another type.
    """
    import logging

    import anyio

    from flows.pipeline import fix_served_project

    log = logging.getLogger(__name__)
    project = fix_served_project(project_dir, allowed_roots)
    log.info("%s", ensure_pool(pool))
    log.info("deployment vrsflow-pipeline/%s (%s) on pool '%s', runs in %s", name, deploy(pool, name), pool, project)

    def stop(signum: int, frame: object) -> None:
        # the runs first, each with SIGTERM: its flow engine marks it Crashed and dvc and the stages end with it;
        # unwinding the worker at once would kill them before they can say so
        stopped = stop_runs()
        log.info("worker stopped (%s): %d run(s) stopped", signal.Signals(signum).name, stopped)
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        anyio.run(_run_worker, locked_worker_class(), pool, limit, worker_name)
    except KeyboardInterrupt:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stop_runs(grace_s: float = 30.0) -> int:
    """SIGTERM every process this worker started (its run processes), wait up to `grace_s` seconds for them to end
    (SIGKILL after that); return how many there were."""
    import psutil

    runs = psutil.Process().children(recursive=False)
    for proc in runs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(runs, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    return len(runs)


def locked_worker_class() -> type:
    """Prefect's process worker whose runs' processes come from the pool's template alone.

    A flow run and a deployment carry job variables that the process worker applies over the pool's template —
    the `env` ones even where the template holds a literal (Prefect merges them: `from_template_and_values`). The
    locked template (LOCKED_JOB_TEMPLATE) stops the command; this configuration class also drops every job
    variable, so nobody who may start a run sets the environment (PATH, LD_PRELOAD) of the process it runs in."""
    from prefect.workers.process import ProcessJobConfiguration, ProcessWorker

    class LockedJobConfiguration(ProcessJobConfiguration):
        @classmethod
        async def from_template_and_values(cls, base_job_template, values, client=None):
            return await super().from_template_and_values(base_job_template, {}, client=client)

    class LockedProcessWorker(ProcessWorker):
        job_configuration = LockedJobConfiguration

    return LockedProcessWorker


async def _run_worker(worker_class: type, pool: str, limit: int, worker_name: str | None) -> None:
    async with worker_class(work_pool_name=pool, limit=limit, name=worker_name) as worker:
        await worker.start()
