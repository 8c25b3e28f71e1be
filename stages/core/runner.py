"""Where per-sample work runs: in-process, on a thread pool, or on a Dask cluster (params `runner`).

Stage code calls `map_ordered(fn, items, runner)`; results come back in input order whatever the
backend, so outputs do not depend on parallelism (per-row seeds are derived from row ids, never
from a shared generator). `fn` must be a module-level function for the Dask backend (pickled).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal, TypeVar

from stages.core.progress import track
from stages.core.typed_config import Server

T = TypeVar("T")
R = TypeVar("R")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunnerParams:
    kind: Server[Literal["serial", "threads", "dask"]] = "threads"  # where per-sample work runs
    workers: Server[int] = 2  # threads (kind: threads) or local Dask workers when no address is given
    dask_address: Server[str] = ""  # tcp://scheduler:8786 of an existing Dask cluster; "" = a local one


def map_ordered(fn: Callable[[T], R], items: Iterable[T], runner: RunnerParams, desc: str = "") -> list[R]:
    """Apply `fn` to every item with the configured backend; results in input order.

    An exception raised by `fn` propagates (with the item's position in the message for Dask).
    """
    items = list(items)
    if runner.kind == "serial" or len(items) <= 1:
        return [fn(item) for item in track(items, total=len(items), desc=desc)]
    if runner.kind == "threads":
        with ThreadPoolExecutor(max_workers=max(1, runner.workers)) as pool:
            return list(track(pool.map(fn, items), total=len(items), desc=desc))
    return _map_dask(fn, items, runner, desc)


def _map_dask(fn: Callable[[T], R], items: Sequence[T], runner: RunnerParams, desc: str) -> list[R]:
    from dask.distributed import Client, LocalCluster, as_completed

    cluster = None
    if runner.dask_address:
        client = Client(runner.dask_address)
    else:
        cluster = LocalCluster(n_workers=max(1, runner.workers), threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
    try:
        futures = client.map(fn, items, pure=False)
        position = {future.key: i for i, future in enumerate(futures)}
        results: list[R | None] = [None] * len(items)
        for future in track(as_completed(futures), total=len(futures), desc=desc):
            results[position[future.key]] = future.result()
        return results  # type: ignore[return-value]
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
