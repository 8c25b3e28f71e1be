"""The warm stage server (flows/forkserver.py) forks a stage only for a peer of its own uid: another user who
can reach the socket gets no child and no answer."""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import struct
import tempfile
from pathlib import Path

import pytest

from flows import forkserver

REQUEST = {"argv": ["stage", "no-such-stage"], "cwd": "/", "env": {}}


class _Peer:
    """A connection whose kernel-reported peer credentials (SO_PEERCRED) are the given uid."""

    def __init__(self, uid: int) -> None:
        self.uid = uid
        self.asked: list[tuple[int, int, int]] = []

    def getsockopt(self, level: int, option: int, size: int) -> bytes:
        self.asked.append((level, option, size))
        return struct.pack("3i", os.getpid(), self.uid, os.getgid())


def test_a_peer_of_another_uid_is_not_trusted() -> None:
    me, other = _Peer(os.getuid()), _Peer(os.getuid() + 1)
    assert forkserver._trusted(me, REQUEST) is True
    assert forkserver._trusted(other, REQUEST) is False
    assert other.asked == [(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))]  # the kernel's word


def _client_as(uid: int, path: str, answer: int) -> None:
    """In a forked child: become `uid`, send a stage request as run_in_server does, report what came back."""
    try:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        body = json.dumps(REQUEST).encode()
        socket.send_fds(sock, [struct.pack("!I", len(body)) + body], [0, 1, 2])
        sock.settimeout(20)
        os.write(answer, sock.recv(64) or b"(closed)")
    except BaseException as err:  # noqa: BLE001 (reported to the test through the pipe)
        os.write(answer, f"client error: {err!r}".encode())
    finally:
        os._exit(0)


@pytest.mark.skipif(os.getuid() != 0, reason="connecting as another uid needs root (the test above runs anyway)")
def test_the_server_forks_nothing_for_another_user() -> None:
    """A real client process running as `nobody` (uid 65534) connects to the server's socket and sends a
    well-formed stage request: the server's accept path closes the connection without forking."""
    folder = Path(tempfile.mkdtemp(prefix="vrsflow-peer-"))  # /tmp/…: reachable by nobody (pytest's is 0700)
    try:
        folder.chmod(0o777)
        path = str(folder / "server.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        os.chmod(path, 0o777)  # as a socket a careless umask or shared folder would leave open
        listener.listen(1)
        read_end, write_end = os.pipe()
        client = os.fork()
        if client == 0:
            _client_as(65534, path, write_end)
        os.close(write_end)
        waiting: dict[int, socket.socket] = {}
        try:
            ready, _, _ = select.select([listener], [], [], 30)
            assert ready, "the client never connected"
            forkserver._accept(listener, waiting)
            output = os.read(read_end, 256).decode()
        finally:
            os.waitpid(client, 0)
            os.close(read_end)
            for pid, conn in waiting.items():  # only if the uid check is gone: reap the stage it forked
                os.waitpid(pid, 0)
                conn.close()
            listener.close()
        assert waiting == {}, "forked a stage for another user"
        assert output == "(closed)", output  # no {"pid": …} reply: the connection was just closed
    finally:
        shutil.rmtree(folder, ignore_errors=True)

