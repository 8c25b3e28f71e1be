"""One writer per output folder: a stage holds a lock on the folders it writes for its whole run.

The lock is `fcntl.flock` on a file beside the folder (`models/.sft.lock` for `models/sft`), not inside it (the
stage and DVC delete and recreate the folder). The kernel releases it when the holder ends, however it ends, so
a `kill -9`ed run's lock is simply taken over by the next run; the file records who holds it (pid, command,
start) so that a second run can say whose run is in the way, in one line.

Processes a holder starts (torchrun's workers) inherit $VRSFLOW_HELD_OUTPUTS and do not lock again; they die
with their stage (`stages.core.lifeline`), so nothing writes into a folder once its lock is free.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

log = logging.getLogger(__name__)

HELD_ENV = "VRSFLOW_HELD_OUTPUTS"  # folders this process or one that started it holds (os.pathsep-separated)


class OutputLocked(RuntimeError):
    """Another live run holds the lock on an output folder."""


def lock_file(folder: str | Path) -> Path:
    """Where the lock of `folder` lives: a hidden file beside it."""
    folder = Path(folder).absolute()
    return folder.parent / f".{folder.name}.lock"


def stage_folders(stage: str, params) -> list[str]:
    """The folders a stage writes and resumes from, from its params (stages without resumable state: none)."""
    if stage == "sft":
        return [params.sft.out_dir, params.sft.checkpoint_dir]
    if stage == "pretrain_sam2":
        return [params.pretrain_sam2.out_dir, params.pretrain_sam2.checkpoint_dir]
    if stage == "finetune_sam2":
        return [params.finetune_sam2.out_dir, params.finetune_sam2.checkpoint_dir]
    if stage == "grpo":
        return [params.grpo.out_dir, params.grpo.checkpoint_dir] + (
            [params.grpo.verl.out_dir] if params.grpo.engine == "verl" else [])
    return []


def _describe_self() -> str:
    try:
        argv = Path("/proc/self/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        command = " ".join(Path(argv[0].decode()).name if i == 0 else a.decode() for i, a in enumerate(argv))
    except OSError:
        command = "?"
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    command = " ".join(command.split())  # one line, whatever the arguments hold
    return f"pid {os.getpid()} ({command[:100]}, since {started})"


@contextlib.contextmanager
def hold_outputs(stage: str, folders: Iterable[str | Path]) -> Iterator[None]:
    """Hold the locks of `folders` for the body; refuse at once when a live run holds one.

    A no-op for folders a parent process holds already, and in a launched worker other than rank 0.

    Raises:
        OutputLocked: one line naming the folder and the holder's process.
    """
    held = {f for f in os.environ.get(HELD_ENV, "").split(os.pathsep) if f}
    wanted = list(dict.fromkeys(str(Path(f).absolute()) for f in folders))
    if os.environ.get("RANK", "0") != "0" or not set(wanted) - held:
        yield
        return
    handles: list[int] = []
    previous_env = os.environ.get(HELD_ENV)
    try:
        for folder in (f for f in wanted if f not in held):
            path = lock_file(folder)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "another process"
                os.close(fd)
                raise OutputLocked(f"{stage}: {os.path.relpath(folder)} is being written by {holder}; "
                                   "wait for that run to end or stop it") from None
            handles.append(fd)
            leftover = os.pread(fd, 4096, 0).decode(errors="replace").strip()
            if leftover:  # released without being cleared: its holder was killed
                log.info("%s: taking over the lock of %s from %s, which ended without releasing it",
                         stage, os.path.relpath(folder), leftover)
            os.ftruncate(fd, 0)
            os.pwrite(fd, (_describe_self() + "\n").encode(), 0)
        os.environ[HELD_ENV] = os.pathsep.join(sorted(held | set(wanted)))
        yield
    finally:
        if previous_env is None:
            os.environ.pop(HELD_ENV, None)
        else:
            os.environ[HELD_ENV] = previous_env
        for fd in handles:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # released cleanly: nobody to take over from
            os.close(fd)
