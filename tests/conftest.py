"""Shared test set-up: offline model libraries, a temporary PREFECT_HOME and ONE Prefect server
for the whole session (flows run in-process and in `dvc repro` subprocesses all report to it)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import Phase, settings

from tests.skip_guard import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401 (no silent skips)

# Before prefect or transformers are imported anywhere: no hub, no telemetry, an isolated home.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="vrsflow-prefect-home-")
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
# a loaded machine may take longer (the mutation run starts a server per mutant at nice 19)
SERVER_STARTUP_S = int(os.environ.get("VRSFLOW_TEST_SERVER_STARTUP_S", "60"))
os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = str(SERVER_STARTUP_S)
os.environ["DO_NOT_TRACK"] = "1"

PROJECT_ROOT = Path(__file__).resolve().parents[1]

# scripts/mutation.sh: one failing example kills a mutant; shrinking it to the smallest one only costs time
settings.register_profile("mutation", phases=(Phase.explicit, Phase.reuse, Phase.generate))
if os.environ.get("VRSFLOW_HYPOTHESIS_PROFILE"):
    settings.load_profile(os.environ["VRSFLOW_HYPOTHESIS_PROFILE"])


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[str]:
    """A temporary Prefect server for the session; its API URL is exported for subprocesses too."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=SERVER_STARTUP_S):
        url = PREFECT_API_URL.value()
        previous = os.environ.get("PREFECT_API_URL")
        os.environ["PREFECT_API_URL"] = url
        try:
            yield url
        finally:
            if previous is None:
                os.environ.pop("PREFECT_API_URL", None)
            else:
                os.environ["PREFECT_API_URL"] = previous


@pytest.fixture(autouse=True)
def torch_threads_as_before() -> Iterator[None]:
    """A test (or a stage it runs) that sets torch's thread count sets it for itself only: torch keeps it for the
    whole process, and two OpenMP threads on a core the other test worker also uses wait on each other (a SAM2
    test took 60 s with two threads, 1.4 s with one, on 2 loaded cores)."""
    torch = sys.modules.get("torch")  # never imports torch for a test that does not
    omp = os.environ.get("OMP_NUM_THREADS", "")  # what torch starts with, if a test imports it first
    threads = torch.get_num_threads() if torch is not None else int(omp) if omp.isdigit() else None
    yield
    torch = sys.modules.get("torch")
    if torch is not None and threads is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def project_root() -> Path:
    """The checkout the tests run from."""
    return PROJECT_ROOT


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """scripts/mutation.sh: the fastest tests first (the durations mutmut recorded, in the file that
    VRSFLOW_TEST_ORDER names), so that a killed mutant stops at its cheapest failing test (mutmut runs pytest -x);
    a survivor runs them all either way."""
    stats = os.environ.get("VRSFLOW_TEST_ORDER")
    if not stats or not Path(stats).is_file():
        return
    import json

    duration = json.loads(Path(stats).read_text()).get("duration_by_test", {})
    items.sort(key=lambda item: duration.get(item.nodeid, float("inf")))  # stable: unknown tests keep their order
