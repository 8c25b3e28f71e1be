"""One Prefect API for a whole repro (flows/prefect_api.py), with real processes and a real Prefect server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.pipeline_repo import env_with_venv

CLIENT = """
import sys, time
from flows.prefect_api import prefect_api
from prefect.settings import PREFECT_API_URL
with prefect_api() as url:
    assert PREFECT_API_URL.value() == url  # Prefect itself talks to it
    print(url, flush=True)
    time.sleep(float(sys.argv[1]))
"""


def _env(home: Path) -> dict[str, str]:
    env = env_with_venv()
    env.pop("PREFECT_API_URL", None)
    env.update(PREFECT_HOME=str(home), VRSFLOW_PREFECT_LINGER_S="1", PREFECT_SERVER_ANALYTICS_ENABLED="false")
    return env


def _client(home: Path, hold_s: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CLIENT, str(hold_s)], env=_env(home), stdout=subprocess.PIPE,
                            text=True, process_group=0)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_processes_share_one_server_that_outlives_their_signals_and_stops_when_idle(tmp_path: Path) -> None:
    first, second = _client(tmp_path, 4), _client(tmp_path, 4)  # started together: one server, not two
    urls = {first.stdout.readline().strip(), second.stdout.readline().strip()}
    assert len(urls) == 1 and next(iter(urls)).startswith("http://127.0.0.1:"), urls
    url = urls.pop()
    state = json.loads((tmp_path / "vrsflow-api.json").read_text())
    assert state["url"] == url and _alive(state["keeper_pid"])

    # a SIGTERM to a client's process group (what `timeout` sends) does not reach the server
    os.killpg(first.pid, signal.SIGTERM)
    first.wait(timeout=30)
    assert _healthy(url)
    third = _client(tmp_path, 0)
    assert third.stdout.readline().strip() == url  # reused while leases are live
    third.wait(timeout=60)
    second.wait(timeout=60)
    assert second.returncode == 0 and third.returncode == 0

    # no live lease for VRSFLOW_PREFECT_LINGER_S (1 s): the keeper stops the server and forgets it
    deadline = time.monotonic() + 30
    while _alive(state["keeper_pid"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(state["keeper_pid"])
    assert not (tmp_path / "vrsflow-api.json").exists()
    assert not _healthy(url)
