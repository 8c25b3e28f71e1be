"""Per-sample work gives the same ordered results on every backend."""

from __future__ import annotations

import pytest

from stages.core.runner import RunnerParams, map_ordered


def square(x: int) -> int:
    return x * x


def explode(x: int) -> int:
    raise ValueError(f"bad item {x}")


@pytest.mark.parametrize("kind", ["serial", "threads"])
def test_results_in_input_order(kind: str) -> None:
    assert map_ordered(square, range(20), RunnerParams(kind=kind, workers=3)) == [x * x for x in range(20)]


def test_errors_propagate() -> None:
    with pytest.raises(ValueError, match="bad item"):
        map_ordered(explode, [1, 2], RunnerParams(kind="threads"))


def test_dask_local_cluster_matches_serial() -> None:
    """A real local Dask cluster (worker processes); part of the default run, so CI exercises it.
    The default run's twin of tests/test_pipeline.py's slow check that serial, threads and dask build
    byte-identical shards."""
    assert map_ordered(square, range(10), RunnerParams(kind="dask", workers=2)) == [x * x for x in range(10)]


def test_dask_errors_propagate() -> None:
    with pytest.raises(ValueError, match="bad item"):
        map_ordered(explode, [1, 2], RunnerParams(kind="dask", workers=1))
