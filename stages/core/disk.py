"""A full disk (or an exceeded quota) while a stage writes: recognised, reported in one line, its partial files
removed.

Libraries report it in their own ways — an `OSError` with errno ENOSPC / EDQUOT from Python's own writes (often
without a file name: `handle.write` has none), pyarrow's `OSError` whose errno is unset but whose text holds the
C library's "No space left on device", safetensors' error text — and often wrapped in another exception. So
`no_space_error` walks the exception chain and accepts either sign. `disk_full` turns it into `DiskFull`: one line
naming the stage, the path (the error's own file name, else the stage's output on the fullest filesystem) and the
space left there. `remove_partial` deletes what this run wrote into the stage's outputs (files modified since it
started, and the folders it created that are left empty), so the space comes back and nothing half-written is left
for DVC to record; older files are left as they are (DVC removes a stage's outputs before it runs it again).
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from stages.core.errors import OneLineError

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
NO_SPACE_TEXTS = tuple(os.strerror(code) for code in NO_SPACE)  # "No space left on device", "Disk quota exceeded"


class DiskFull(OneLineError, OSError):
    """A stage ran out of disk space or quota while writing; `str()` is the one line to show."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(code, message)

    def __str__(self) -> str:
        return str(self.strerror)


def no_space_error(err: BaseException | None) -> BaseException | None:
    """The exception in `err`'s chain (`__cause__` / `__context__`) that reports a full disk or quota, or None."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in NO_SPACE:
            return err
        if any(text in str(err) for text in NO_SPACE_TEXTS):
            return err
        err = err.__cause__ or err.__context__
    return None


def free_bytes(path: str | Path) -> int:
    """Free bytes (for this user) on the filesystem holding `path`, or its nearest existing parent."""
    folder = Path(path).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return shutil.disk_usage(folder).free


def human_bytes(n: int) -> str:
    """1536 → "1.5 KiB"."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def disk_full(stage: str, err: BaseException, outputs: Iterable[str | Path] = ()) -> DiskFull:
    """The one-line `DiskFull` for `err` (a `no_space_error`) raised while `stage` wrote.

    The path is the error's own file name when it has one, else the output (of `outputs`) on the filesystem with
    the least free space, else the working directory.
    """
    path = getattr(err, "filename", None) or getattr(err, "filename2", None)
    if not path:
        candidates = [Path(p) for p in outputs] or [Path.cwd()]
        path = min(candidates, key=free_bytes)
    quota = (isinstance(err, OSError) and err.errno == errno.EDQUOT) or NO_SPACE_TEXTS[1] in str(err)
    code = errno.EDQUOT if quota else errno.ENOSPC
    what = "disk quota exceeded" if quota else "no space left on device"
    return DiskFull(code, f"{stage}: {what} writing {path} ({human_bytes(free_bytes(path))} free there); the "
                          "partial files of this run were removed and nothing was recorded: free some space and "
                          "run the stage again")


def remove_partial(outputs: Iterable[str | Path], since_ns: int) -> int:
    """Delete what was written into `outputs` (files or folders) since `since_ns` (time.time_ns() at the run's
    start): files modified since, then folders created since that are left empty. Returns the files removed."""
    removed = 0
    for output in map(Path, outputs):
        if output.is_symlink() or output.is_file():
            if output.lstat().st_mtime_ns >= since_ns:
                output.unlink()
                removed += 1
            continue
        if not output.is_dir():
            continue
        for folder, dirs, files in os.walk(output, topdown=False):
            for name in files:
                path = Path(folder) / name
                if path.lstat().st_mtime_ns >= since_ns:
                    path.unlink()
                    removed += 1
            for name in dirs:
                _remove_if_new_and_empty(Path(folder) / name, since_ns)
        _remove_if_new_and_empty(output, since_ns)
    return removed


def _remove_if_new_and_empty(folder: Path, since_ns: int) -> None:
    try:
        if not folder.is_symlink() and folder.stat().st_ctime_ns >= since_ns and not any(folder.iterdir()):
            folder.rmdir()
    except OSError:  # already gone, or not empty after all
        pass


def stage_outs(stage: str, item: str = "", project_dir: Path = Path(".")) -> list[Path]:
    """The outs, metrics and plots of `stage` in `project_dir/dvc.yaml` that DVC does not keep between runs (no
    `persist: true`), params interpolated; `item` is a foreach stage's item. [] when dvc.yaml does not list it."""
    from stages.core.model_card import interpolate

    dvc_yaml = project_dir / "dvc.yaml"
    if not dvc_yaml.is_file():
        return []
    stages = (yaml.safe_load(dvc_yaml.read_text()) or {}).get("stages") or {}
    entry = stages.get(stage)
    if entry is None:
        return []
    if "foreach" in entry:
        entry = entry.get("do") or {}
    params_file = project_dir / "params.yaml"
    params: Mapping[str, Any] = (yaml.safe_load(params_file.read_text()) or {}) if params_file.is_file() else {}
    params = {**params, "item": item}
    outs = []
    for section in ("outs", "metrics", "plots"):
        for out in entry.get(section) or []:
            name, options = next(iter(out.items())) if isinstance(out, Mapping) else (out, {})
            if not (options or {}).get("persist", False):
                outs.append(project_dir / interpolate(str(name), params).rstrip("/"))
    return outs
