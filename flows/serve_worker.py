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
import functools
import signal
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prefect.client.schemas.objects import WorkPool

DEFAULT_POOL = "vrsflow"
DEFAULT_DEPLOYMENT = "vrsflow-pool"
POOL_TYPE = "process"


# The flow every run of the pool runs: the deployment's entry point, and what the run process imports whatever the
# deployment says by then (Prefect's engine takes PREFECT__FLOW_ENTRYPOINT over the deployment's entry point and
# pull steps, which anyone holding the API secret could edit).
ENTRYPOINT = "flows.pipeline.pipeline_flow"

# Prefect's client retry settings for the run process and, through it, dvc and every stage process: a request that
# finds the API gone (a server restart) is retried with Prefect's exponential backoff, 2 + 4 + … + 64 s ≈ 2 min in
# all (its default, 5, gives up after ≈ 1 min: a server on a busy machine took 32 s to come back), then the stage
# fails in one line naming the API (flows.prefect_api.api_unreachable). Prefect retries a refused connection only on
# a client that has connected once: a stage process that starts while the server is down fails at once.
CLIENT_RETRY_ENV = {"PREFECT_CLIENT_MAX_RETRIES": "6"}

# The pool's job template with nothing a run can set, and what the worker builds every run's process from, whatever
# the server's copy of the pool's template holds by then (`locked_worker_class`). Prefect's process worker builds
# each run's process from the pool's template and the run's job variables (`command`, `env`, `working_dir`, … in
# the default template), which anyone who may start a run can pass, and the template itself anyone holding the API
# secret can edit. Every field is a literal (command None: the worker fills in its own interpreter's
# `python -m prefect.engine`), and the variables schema has no properties, so job variables change nothing.
LOCKED_JOB_TEMPLATE = {
    "job_configuration": {"command": None, "env": {"PREFECT__FLOW_ENTRYPOINT": ENTRYPOINT, **CLIENT_RETRY_ENV},
                          "labels": {}, "name": None, "stream_output": True, "working_dir": None},
    "variables": {"type": "object", "properties": {}},
}


class PoolRefused(RuntimeError):
    """The named work pool cannot take the deployment; the message is one line."""


class RunRefused(RuntimeError):
    """A run of the pool is not one this worker serves; the message is one line."""


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
        if existing.base_job_template != LOCKED_JOB_TEMPLATE:  # made or edited elsewhere
            client.update_work_pool(pool, WorkPoolUpdate(base_job_template=LOCKED_JOB_TEMPLATE))
            return relocked(existing)
    return f"work pool '{pool}' exists"


def relocked(pool: WorkPool) -> str:
    """The line that says `pool`'s template was not vrsflow's and was put back."""
    return (f"work pool '{pool.name}': its job template differed from vrsflow's locked one (last changed "
            f"{pool.updated or 'at an unknown time'}, by someone holding the API secret); re-locked, and runs start "
            f"from vrsflow's template alone")


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


@functools.cache  # one class: Prefect registers each worker class by its dispatch key
def locked_worker_class() -> type:
    """Prefect's process worker whose runs' processes come from vrsflow's locked template alone, which runs only
    runs of the pipeline's deployments as `deploy` makes them, and ends the others.

    Prefect's process worker builds each run's process from the server's copy of the pool's template and the job
    variables of the deployment and the run (`from_template_and_values`), all of which anyone holding the API
    secret can set. The job configuration class here takes neither: it builds from LOCKED_JOB_TEMPLATE, with this
    interpreter's `python -m prefect.engine` as the command. The worker puts the server's copy back whenever it
    differs (at each sync with the API) and marks Cancelled, with the reason, a run it will not run."""
    import shlex
    import sys

    from prefect.states import Cancelled, Crashed
    from prefect.workers.process import ProcessJobConfiguration, ProcessWorker, ProcessWorkerResult

    class LockedJobConfiguration(ProcessJobConfiguration):
        @classmethod
        async def from_template_and_values(cls, base_job_template, values, client=None):
            configuration = await super().from_template_and_values(LOCKED_JOB_TEMPLATE, {}, client=client)
            # an explicit command: Prefect then starts the engine itself rather than resolving a workspace from
            # the deployment (its storage and pull steps)
            configuration.command = shlex.join([sys.executable, "-m", "prefect.engine"])
            return configuration

    class LockedProcessWorker(ProcessWorker):
        job_configuration = LockedJobConfiguration

        @classmethod
        def __dispatch_key__(cls) -> str:
            return "vrsflow-locked-process"  # its own key: Prefect's `process` worker stays registered as it is

        async def sync_with_backend(self) -> None:
            await super().sync_with_backend()
            pool = self._work_pool_or_none()
            if pool is not None and pool.base_job_template != LOCKED_JOB_TEMPLATE:
                from prefect.client.schemas.actions import WorkPoolUpdate

                self._logger.warning("%s", relocked(pool))
                await self.client.update_work_pool(pool.name, WorkPoolUpdate(base_job_template=LOCKED_JOB_TEMPLATE))

        def _work_pool_or_none(self) -> WorkPool | None:
            try:
                return self.work_pool
            except RuntimeError:  # not synced yet
                return None

        async def get_and_submit_flow_runs(self):
            # the runs due now that this worker will not run are ended at each poll, before Prefect takes the
            # others: a refusal needs no free slot, so it comes within one polling interval even while the
            # worker runs a run; `run` checks again, in case a deployment changed in between
            if self._work_pool_or_none() is not None:
                try:
                    for flow_run in await self._due_runs():
                        reason = await self.refusal(flow_run)
                        if reason is not None:
                            await self._refuse(flow_run, reason)
                except Exception as err:  # the API unreachable: Prefect's own poll below reports it
                    self._logger.warning("could not check the pool's due runs: %s: %s", type(err).__name__, err)
            return await super().get_and_submit_flow_runs()

        async def _due_runs(self):
            from datetime import UTC, datetime

            from prefect.client.schemas.filters import (
                FlowRunFilter,
                FlowRunFilterNextScheduledStartTime,
                FlowRunFilterState,
                FlowRunFilterStateType,
                WorkPoolFilter,
                WorkPoolFilterName,
            )
            from prefect.client.schemas.objects import StateType

            return await self.client.read_flow_runs(
                flow_run_filter=FlowRunFilter(
                    state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED])),
                    next_scheduled_start_time=FlowRunFilterNextScheduledStartTime(before_=datetime.now(UTC))),
                work_pool_filter=WorkPoolFilter(name=WorkPoolFilterName(any_=[self.work_pool.name])))

        async def _refuse(self, flow_run, reason: str) -> None:
            message = f"refused by vrsflow worker '{self.name}': {reason}"
            self.get_flow_run_logger(flow_run).error("%s", message)
            await self.client.set_flow_run_state(flow_run.id, Cancelled(message=message), force=True)

        async def run(self, flow_run, configuration, task_status=None):
            reason = await self.refusal(flow_run)
            if reason is not None:
                await self._refuse(flow_run, reason)
                if task_status is not None:
                    task_status.started(RunRefused(reason))  # Prefect's "not started": no pid, the slot freed
                return ProcessWorkerResult(status_code=0, identifier="refused")
            result = await super().run(flow_run, configuration, task_status=task_status)
            if result.status_code == 0:
                await self._end_if_left_open(flow_run)
            return result

        async def refusal(self, flow_run) -> str | None:
            """Why this worker will not run `flow_run`, or None."""
            from prefect.exceptions import ObjectNotFound

            from flows.pipeline import FLOW_NAME

            if flow_run.job_variables:
                return (f"the run sets job variables ({', '.join(sorted(flow_run.job_variables))}); this worker "
                        f"takes none")
            if flow_run.deployment_id is None:
                return "the run has no deployment; this worker runs only vrsflow's deployment"
            try:
                deployment = await self.client.read_deployment(flow_run.deployment_id)
                flow = await self.client.read_flow(flow_run.flow_id)
            except ObjectNotFound:
                return f"deployment {flow_run.deployment_id} or its flow no longer exists"
            if flow.name != FLOW_NAME:
                return (f"it is a run of flow '{flow.name}' (deployment '{deployment.name}'); this worker runs "
                        f"only '{FLOW_NAME}'")
            if deployment.entrypoint != ENTRYPOINT:
                return f"its deployment's entry point is {deployment.entrypoint!r}, not {ENTRYPOINT!r}"
            if deployment.pull_steps:
                return "its deployment has pull steps; this worker runs none"
            if deployment.job_variables:
                return (f"its deployment sets job variables ({', '.join(sorted(deployment.job_variables))}); "
                        f"this worker takes none")
            return None

        async def _end_if_left_open(self, flow_run) -> None:
            # a run process that exits 0 has reported its run's final state; one that has not (the engine aborted,
            # or never started) would otherwise leave the run Pending for good
            state = (await self.client.read_flow_run(flow_run.id)).state
            if state is not None and not (state.is_final() or state.is_paused() or state.is_cancelling()):
                message = (f"the run's process ended without a final state (it was {state.name}); "
                           f"see the worker's log on '{self.name}'")
                self.get_flow_run_logger(flow_run).error("%s", message)
                await self.client.set_flow_run_state(flow_run.id, Crashed(message=message), force=True)

    return LockedProcessWorker


async def _run_worker(worker_class: type, pool: str, limit: int, worker_name: str | None) -> None:
    async with worker_class(work_pool_name=pool, limit=limit, name=worker_name) as worker:
        await worker.start()
