"""A stage forked by the warm server never outlives what it belongs to: killed with `kill -9`, the `vrsflow stage`
command that asked for it (the child watches the command's connection) or the server itself (`vrsflow repro`'s,
which dies with it; the child has the parent-death signal) takes the stage with it within seconds."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from flows.forkserver import ENV
from tests.pipeline_repo import env_with_venv

REPO = Path(__file__).resolve().parents[2]

# the real server loop, with a stage command that only sleeps (`vrsflow repro` gives it flows.cli:main) and no
# warm-up imports (torch is imported only after a first stage has ended: never here)
SERVER = """
import sys, time
import flows.forkserver
flows.forkserver.warm_up_order = lambda: ["torch"]
flows.forkserver.serve(sys.argv[1], lambda argv: time.sleep(300))
"""
CLIENT = "import sys; from flows.forkserver import run_in_server; sys.exit(run_in_server(['stage', 'sft']))"


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


@pytest.fixture()
def stage(tmp_path):
    """(server, client, the forked stage's pid): a sleeping stage a client asked the server for."""
    path = str(tmp_path / "stages.sock")
    env = {**env_with_venv(), "PYTHONPATH": str(REPO)}
    server = subprocess.Popen([sys.executable, "-c", textwrap.dedent(SERVER), path], cwd=REPO, env=env,
                              start_new_session=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    client = subprocess.Popen([sys.executable, "-c", CLIENT], cwd=REPO, env={**env, ENV: path},
                              stdout=subprocess.DEVNULL)
    children: list[psutil.Process] = []
    while not children and time.monotonic() < deadline:
        children = psutil.Process(server.pid).children()
        time.sleep(0.05)
    assert len(children) == 1, "the server forked no stage"
    time.sleep(0.5)  # the child is past its set-up, in the stage
    yield server, client, children[0].pid
    for proc in (client, server):
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with contextlib.suppress(ProcessLookupError):
        os.kill(children[0].pid, signal.SIGKILL)


def test_a_stage_whose_command_is_killed_stops(stage) -> None:
    server, client, child = stage
    client.send_signal(signal.SIGKILL)  # `kill -9` of the `vrsflow stage` command (its process group)
    client.wait()
    assert _gone_within(child, 10), "the forked stage outlived its SIGKILLed command"
    assert server.poll() is None  # the server goes on serving the next stages


def test_a_stage_whose_server_is_killed_dies_and_its_command_ends(stage) -> None:
    server, client, child = stage
    server.send_signal(signal.SIGKILL)  # what the parent-death signal does to the server when `vrsflow repro` dies
    server.wait()
    assert _gone_within(child, 5), "the forked stage outlived its SIGKILLed server"
    assert client.wait(timeout=10) == 1  # the command learns that its stage is gone
