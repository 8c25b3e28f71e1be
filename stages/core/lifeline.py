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
import multiprocessing
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
from concurrent.futures import ProcessPoolExecutor

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


def process_pool(workers: int) -> ProcessPoolExecutor:
    """A `ProcessPoolExecutor` of `workers` spawned processes that die with this one, however it ends: the pool's
    own shutdown covers a normal exit and an exception, the kernel's parent-death signal a SIGTERM or SIGKILL
    (without it the workers of a killed bench went on training beside the next run). Submit from the thread that
    made the pool: the pool starts its workers there, and the signal fires when that thread ends."""
    return ProcessPoolExecutor(max_workers=max(1, workers), mp_context=multiprocessing.get_context("spawn"),
                               initializer=die_with_parent, initargs=(signal.SIGKILL, os.getpid()))


def command(argv: Sequence[str]) -> list[str]:
    """`argv` run through the lifeline: the program replaces the wrapper (same pid) once its signal is set."""
    return [sys.executable, "-m", "stages.core.lifeline", "--", *argv]


def module_command(module: str, args: Sequence[str] = ()) -> list[str]:
    """`python -m MODULE ARGS` that dies with its parent (what a launcher such as torchrun is given to run)."""
    return [sys.executable, "-m", "stages.core.lifeline", module, *args]


def popen(argv: Sequence[str], reap: bool = False, **kwargs) -> subprocess.Popen:
    """`subprocess.Popen(argv)` whose process dies with this one (call it from the thread that waits for it).

    `reap=True`: its whole process tree dies with it too — grandchildren that other programs start and leave
    behind included (`reap_tree`: a Ray worker's vLLM engine processes outlive the worker otherwise)."""
    env = dict(kwargs.pop("env", None) or os.environ)
    env[PARENT_ENV] = str(os.getpid())
    wrapped = [sys.executable, "-m", "stages.core.lifeline", "--reap", "--", *argv] if reap else command(argv)
    return subprocess.Popen(wrapped, env=env, **kwargs)


def terminate(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM `proc` if it still runs, SIGKILL it after `grace_s` seconds, and reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


def reap_tree(argv: Sequence[str], grace_s: float = 3.0) -> int:
    """Run `argv` as a child and take its whole process tree down with it; returns its exit code.

    This process becomes a child subreaper (prctl PR_SET_CHILD_SUBREAPER): a process of the tree whose parent
    dies is re-parented here, not to init, so nothing the program started can escape the tree. When the
    program ends, or this process is told to stop (SIGTERM / SIGINT — its parent-death signal is SIGTERM), the
    program gets SIGTERM, then every process left in the tree SIGKILL after `grace_s` seconds at most.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(err)}")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    # the program is a child here, not this process after an exec: what it starts through the lifeline must
    # expect *it* as parent, which no variable can name before it exists (getppid() then; the subreaper holds
    # whatever outlives its parent anyway)
    env = {k: v for k, v in os.environ.items() if k != PARENT_ENV}
    child = subprocess.Popen(list(argv), env=env)
    while child.poll() is None and not stop.wait(0.2):
        pass
    if child.poll() is None:
        child.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=grace_s)  # what is left then goes with the rest of the tree, below
    _kill_descendants()
    return child.returncode if child.returncode is not None else 128 + int(signal.SIGTERM)


def _kill_descendants() -> None:
    import psutil

    me = psutil.Process()
    for _ in range(10):  # a process may fork while we kill: look again until the tree is empty
        left = me.children(recursive=True)
        if not left:
            return
        for proc in left:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        psutil.wait_procs(left, timeout=2.0)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:  # adopted orphans are our children now: collect them
                pass


def stop_when_gone(pid: int, grace_s: float = 5.0, first_wait_s: float = 0.0) -> threading.Thread:
    """A parent watch, for a process the kernel cannot tie to `pid` (not its direct parent): when `pid` ends,
    SIGTERM this process (a stage's flow engine then records the run as crashed and stops its launcher) and
    SIGKILL it `grace_s` seconds later if it is still there. Returns the (daemon) watching thread.

    `first_wait_s`: wait that long after `pid` ends before the SIGTERM. Where `pid` shares this process's group
    (a plain `dvc repro` and its stage), the signal that ended it has usually reached this process too, and a
    second SIGTERM in the middle of the first one's handling cut the flow engine's report of the crash short."""

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
        time.sleep(first_wait_s)
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
    """`python -m stages.core.lifeline -- PROGRAM ARGS…` (exec PROGRAM) or `… MODULE ARGS…` (run the module);
    `--reap -- PROGRAM ARGS…` runs PROGRAM as a child and takes its whole process tree down with it."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args == ["--"] or args[:2] == ["--reap", "--"] and len(args) < 3:
        sys.stderr.write("usage: python -m stages.core.lifeline [--reap] (-- PROGRAM | MODULE) [ARGS…]\n")
        raise SystemExit(2)
    if args[0] == "--reap":  # the program's whole tree dies with it and with this process's parent
        die_with_parent(signal.SIGTERM)
        raise SystemExit(reap_tree(args[2:]))
    die_with_parent()
    os.environ[PARENT_ENV] = str(os.getpid())  # for what this process starts in turn (torchrun's workers)
    if args[0] == "--":
        os.execvp(args[1], args[1:])
    sys.argv = [args[0], *args[1:]]
    runpy.run_module(args[0], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
