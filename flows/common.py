"""What every stage flow shares: run the stage function as a task, publish its report; a full disk while it
writes is one line (`stages.core.disk`), not three tracebacks."""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from prefect import get_run_logger, runtime, task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE

from flows.prefect_api import run_record
from stages.core import progress
from stages.core.disk import disk_full, no_space_error, remove_partial, stage_outs
from stages.core.errors import OneLineError
from stages.core.report import StageReport

TIMINGS_ENV = "VRSFLOW_TIMINGS"  # a file: each stage process appends one JSON line of timings (bench/)


def _artifact_key(stage: str, name: str) -> str:
    # Prefect artifact keys: lowercase letters, digits and dashes only.
    return "-".join("".join(c if c.isalnum() else " " for c in f"{stage} {name}".lower()).split())


def publish_report(report: StageReport) -> None:
    """Publish a stage's tables, metrics and markdown as Prefect artifacts."""
    for name, table in report.tables.items():
        records = table.astype(object).where(table.notna(), None).to_dict(orient="records")
        key = _artifact_key(report.stage, name)
        create_table_artifact(table=records, key=key, description=f"{report.stage}: {name}")
    if report.metrics:
        rows = [{"metric": k, "value": v} for k, v in sorted(report.metrics.items())]
        key = _artifact_key(report.stage, "metrics")
        create_table_artifact(table=rows, key=key, description=f"{report.stage} metrics")
    if report.markdown:
        create_markdown_artifact(markdown=report.markdown, key=_artifact_key(report.stage, "report"))


def run_stage(stage: str, fn: Callable[..., StageReport], *args: Any, **kwargs: Any) -> StageReport:
    """Run `fn(*args, **kwargs)` as a Prefect task with a progress artifact, then publish its report.

    Task caching stays off: DVC is the only cache of stage results.
    """
    logger = get_run_logger()
    artifact_id = create_progress_artifact(progress=0.0, description=f"{stage} progress")

    def on_progress(desc: str, done: int, total: int) -> None:
        if total:
            update_progress_artifact(artifact_id=artifact_id, progress=100.0 * done / total)

    def on_markdown(markdown: str) -> None:  # a training stage's curves so far: the report artifact's key, updated
        create_markdown_artifact(markdown=markdown, key=_artifact_key(stage, "report"),
                                 description=f"{stage}: curves so far (the run goes on)")

    stage_task = task(_disk_full_in_one_line(stage, fn), name=stage, cache_policy=NO_CACHE, persist_result=False)
    progress.add_listener(on_progress)
    progress.add_markdown_listener(on_markdown)
    started = time.time()
    try:
        # recorded (flow run, this pid): if this process is killed outright, the next stage marks the run crashed
        with run_record(runtime.flow_run.id):
            report = stage_task(*args, **kwargs)
    finally:
        progress.remove_listener(on_progress)
        progress.remove_markdown_listener(on_markdown)
    _record_timings(stage, started, time.time())
    update_progress_artifact(artifact_id=artifact_id, progress=100.0)
    publish_report(report)
    logger.info("%s", report.summary_line())  # one short line; all metrics are in metrics/<stage>.json
    return report


def _disk_full_in_one_line(stage: str, fn: Callable[..., StageReport]) -> Callable[..., StageReport]:
    """`fn`, which on a full disk or quota removes what it wrote into the stage's outputs (dvc.yaml) and raises
    `DiskFull`: one line naming the stage, the path and the free space. The flow and its task end Failed with that
    line and no traceback, and the command prints it alone and exits 1 (`_print_disk_full`); DVC records nothing
    of a failed command, and the stage writes its lineage last."""
    item = os.environ.get("VRSFLOW_STAGE_ITEM", "")  # a foreach stage's item: `bench-mevis` is dvc's `bench@mevis`
    name = stage.removesuffix(f"-{item}") if item and stage.endswith(f"-{item}") else stage

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> StageReport:
        started = time.time_ns()
        try:
            return fn(*args, **kwargs)
        except OneLineError:
            _print_disk_full()  # its line is the message: no traceback (a stage's missing environment, a port)
            raise
        except Exception as err:
            cause = no_space_error(err)
            if cause is None:
                raise
            outputs = stage_outs(name, item)
            remove_partial(outputs, started)
            _print_disk_full()
            raise disk_full(f"{name}@{item}" if item else name, cause, outputs) from None

    return run


class _NoDiskFullTraceback(logging.Filter):
    """Prefect logs a failed task's and flow's exception with its traceback: for `DiskFull` the line is enough."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], OneLineError):
            record.exc_info, record.exc_text = None, None
        return True


def _print_disk_full() -> None:
    """Prefect's run loggers without DiskFull's traceback, and the process's last word on it one line
    (`sys.excepthook`: the console script, and the fork server's child, which reports through it)."""
    if getattr(sys.excepthook, "vrsflow_disk_full", False):
        return
    for name in ("prefect.task_runs", "prefect.flow_runs"):
        logging.getLogger(name).addFilter(_NoDiskFullTraceback())
    previous = sys.excepthook

    def hook(kind, value, tb) -> None:
        if isinstance(value, OneLineError):
            sys.stderr.write(f"error: {value}\n")
        else:
            previous(kind, value, tb)

    hook.vrsflow_disk_full = True
    sys.excepthook = hook


def _record_timings(stage: str, started: float, finished: float) -> None:
    """Append when this process started and when the stage function ran to $VRSFLOW_TIMINGS, if set.

    bench/bench_orchestration.py reads these to split a `dvc repro` into stage work and orchestration.
    """
    path = os.environ.get(TIMINGS_ENV)
    if not path:
        return
    import psutil

    record = {"stage": stage, "pid": os.getpid(), "process_start": psutil.Process().create_time(),
              "task_start": started, "task_end": finished, "forked": os.environ.get("VRSFLOW_FORKED") == "1"}
    with open(path, "a") as out:
        out.write(json.dumps(record) + "\n")
