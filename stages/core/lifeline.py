"""Processes that die with the process that started them, whatever kills it (`kill -9` included).

A SIGTERM or Ctrl-C reaches a stage's Python code, which stops what it started. A SIGKILL (or the OOM killer)
gives it no chance, and `torch.distributed.run` starts each worker in a session of its own, so a kill of the
stage's process group does not reach the workers either: they went on training beside the rerun.

Linux's parent-death signal closes that gap: `prctl(PR_SET_PDEATHSIG, SIGKILL)` in a child makes the kernel
kill it as soon as its parent exits, however the parent exits. Every level sets it for itself:

    stage ──popen()──▶ python -m stages.core.lifeline -- LAUNCHER …   (exec: the launcher keeps this pid)
                           └─ torchrun's workers: python -m stages.core.lifeline MODULE --job JOB

Two details make it hold:

- the signal is set in the child, so a parent that dies between fork and prctl would be missed; the child
  therefore compares `getppid()` with the pid its parent wrote into $VRSFLOW_LIFELINE_PARENT *after*
  setting the signal, and exits when they differ (the kernel has re-parented it already);
- the kernel sends it when the parent *thread* that forked the child ends, not the whole process: the
  stage therefore starts its launcher from the thread that then waits for it (`subprocess.Popen` +
  `wait` in one function), and torchrun starts its workers from its main thread.

Where the process to outlive is not the direct parent (a stage forked by `vrsflow repro`'s fork server lives
as long as the `vrsflow stage` command that asked for it; a stage run by dvc, as long as `vrsflow repro`), a
parent watch does it instead: a thread that waits for that process's end (`stop_when_gone`, a pidfd) or for
its connection to close (`stop_when_closed`), then stops this process (SIGTERM, SIGKILL seconds later).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

PARENT_ENV = "VRSFLOW_LIFELINE_PARENT"  # the pid a child started through this module must have as its parent
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(signum: int = signal.SIGKILL, parent: int = 0) -> bool:
    """Have the kernel send `signum` to this process when its parent ends; exit at once if it has already.

    The expected parent is `parent`, else $VRSFLOW_LIFELINE_PARENT when set (this process was started through
    `popen` or `command`), else the current parent. Returns False where the platform has no parent-death signal.
    """
    if not sys.platform.startswith("linux"):
        return False
    expected = parent or int(os.environ.get(PARENT_ENV) or 0) or os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")
    if os.getppid() != expected:  # the parent died before the signal was set: nobody would send it now
        os._exit(128 + int(signum))
    return True


def command(argv: Sequence[str]) -> list[str]:
    """`argv` run through the lifeline: the program replaces the wrapper (same pid) once its signal is set."""
    return [sys.executable, "-m", "stages.core.lifeline", "--", *argv]


def module_command(module: str, args: Sequence[str] = ()) -> list[str]:
    """`python -m MODULE ARGS` that dies with its parent (what a launcher such as torchrun is given to run)."""
    return [sys.executable, "-m", "stages.core.lifeline", module, *args]


def popen(argv: Sequence[str], **kwargs) -> subprocess.Popen:
    """`subprocess.Popen(argv)` whose process dies with this one (call it from the thread that waits for it)."""
    env = dict(kwargs.pop("env", None) or os.environ)
    env[PARENT_ENV] = str(os.getpid())
    return subprocess.Popen(command(argv), env=env, **kwargs)


def stop_when_gone(pid: int, grace_s: float = 5.0) -> threading.Thread:
    """A parent watch, for a process the kernel cannot tie to `pid` (not its direct parent): when `pid` ends,
    SIGTERM this process (a stage's flow engine then records the run as crashed and stops its launcher) and
    SIGKILL it `grace_s` seconds later if it is still there. Returns the (daemon) watching thread."""

    def wait() -> None:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            fd = -1
        except OSError:  # no pidfd (old kernel): poll
            while alive(pid):
                time.sleep(0.5)
            fd = -1
        if fd >= 0:
            select.select([fd], [], [])  # readable once the process has ended
            os.close(fd)
        _stop_self(grace_s)

    thread = threading.Thread(target=wait, name=f"vrsflow-watch-{pid}", daemon=True)
    thread.start()
    return thread


def stop_when_closed(sock: socket.socket, grace_s: float = 5.0) -> threading.Thread:
    """A parent watch over a connection the peer never writes to again: when the peer's end closes (the peer
    died), stop this process as `stop_when_gone` does. Returns the (daemon) watching thread."""

    def wait() -> None:
        with contextlib.suppress(OSError):
            while sock.recv(4096):
                pass
        _stop_self(grace_s)

    thread = threading.Thread(target=wait, name="vrsflow-watch-peer", daemon=True)
    thread.start()
    return thread


def _stop_self(grace_s: float) -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace_s)
    os.kill(os.getpid(), signal.SIGKILL)


def alive(pid: int) -> bool:
    """Whether process `pid` exists (another user's process counts: a reused pid is not ours to judge)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m stages.core.lifeline -- PROGRAM ARGS…` (exec PROGRAM) or `… MODULE ARGS…` (run the module)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args == ["--"]:
        sys.stderr.write("usage: python -m stages.core.lifeline (-- PROGRAM | MODULE) [ARGS…]\n")
        raise SystemExit(2)
    die_with_parent()
    os.environ[PARENT_ENV] = str(os.getpid())  # for what this process starts in turn (torchrun's workers)
    if args[0] == "--":
        os.execvp(args[1], args[1:])
    sys.argv = [args[0], *args[1:]]
    runpy.run_module(args[0], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
