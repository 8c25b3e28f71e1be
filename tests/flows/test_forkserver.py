"""The warm stage server runs only this user's `vrsflow stage …` requests."""

from __future__ import annotations

import socket

import pytest

from flows.forkserver import _trusted


@pytest.mark.parametrize(("request_", "expected"), [
    ({"argv": ["stage", "sample"], "cwd": "/tmp", "env": {}}, True),
    ({"argv": ["repro"], "cwd": "/tmp", "env": {}}, False),
    ({"argv": ["evaluate", "--pred", "x"], "cwd": "/tmp", "env": {}}, False),
    ({"argv": ["stage"], "cwd": "/tmp", "env": {}}, False),
    ({"argv": ["stage", 1], "cwd": "/tmp", "env": {}}, False),
    ({"argv": "stage sample", "cwd": "/tmp", "env": {}}, False),
    ({"argv": ["stage", "sample"], "cwd": None, "env": {}}, False),
    ({"argv": ["stage", "sample"], "cwd": "/tmp", "env": []}, False),
    (["stage", "sample"], False),
])
def test_only_stage_commands_of_this_user_are_served(request_: object, expected: bool) -> None:
    server, client = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with server, client:
        assert _trusted(server, request_) is expected


def test_warm_up_imports_the_data_stages_before_torch() -> None:
    from flows.cli import stage_names
    from flows.forkserver import warm_up_order

    order = warm_up_order()
    assert len(order) == len(set(order)) and order[0] == "flows.common"
    assert {f"flows.{name}" for name in stage_names()} <= set(order)  # every stage flow is warmed
    torch_at = order.index("torch")
    for light in ("flows.synth", "flows.ingest", "flows.sample", "flows.cot", "flows.filter"):
        assert order.index(light) < torch_at, light
    assert order.index("flows.sft") > torch_at


def test_stages_are_answered_while_the_server_is_still_warming_up(tmp_path, capfd) -> None:
    """The server listens at once; requests during its warm-up are forked and answered (the SIGCHLD
    handler replies even while a long import runs)."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    from flows.forkserver import ENV, run_in_server

    repo = Path(__file__).resolve().parents[2]
    path = str(tmp_path / "stages.sock")
    server = subprocess.Popen([sys.executable, "-m", "flows.forkserver", path, "flows.cli:main"], cwd=repo,
                              start_new_session=True)
    old = os.environ.get(ENV)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.environ[ENV] = path
        assert run_in_server(["stage", "--help"]) == 0
        assert run_in_server(["stage", "no_such_stage"]) == 2  # a usage error: one line, exit 2
        assert run_in_server(["stage", "--help"]) == 0
    finally:
        if old is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = old
        server.terminate()
        server.wait(timeout=30)
    out, err = capfd.readouterr()
    assert out.count("usage: vrsflow stage") == 2 and "unknown stage 'no_such_stage'" in err


def test_cli_prefect_api_and_fork_server_depend_one_way() -> None:
    """cli → prefect_api → forkserver, and cli → forkserver: never the reverse (the fork server is told on its
    command line what its children run). An import back would put the whole CLI in every stage's code closure."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "flows"

    def flows_imports(name: str) -> set[str]:
        tree = ast.parse((root / f"{name}.py").read_text())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("flows."):
                found.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("flows.")}
        return found

    assert flows_imports("forkserver") == set()
    assert "cli" not in flows_imports("prefect_api")
    assert flows_imports("prefect_api") <= {"forkserver"}
