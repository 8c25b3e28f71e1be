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
