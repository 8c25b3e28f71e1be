"""Calls of the `dvc` command line for pipeline runs started outside `dvc repro` (the Prefect UI).

DVC stays the single source of truth: a UI run is a `dvc exp run -S key=value …`; results are pushed
to the DVC remote when one is configured (params `remote.url` or the environment variable it names).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

log = logging.getLogger(__name__)


class DvcError(RuntimeError):
    """A dvc command failed; the message holds the command and the tail of its output."""


def dvc_executable() -> str:
    """The dvc next to the running Python (the project's venv), else the one on PATH."""
    beside = Path(sys.executable).with_name("dvc")
    return str(beside) if beside.exists() else (shutil.which("dvc") or "dvc")


def run_dvc(args: Sequence[str], project_dir: Path, capture: bool = False,
            extra_env: Mapping[str, str] | None = None) -> str:
    """Run `dvc <args>` in `project_dir`, streaming its output lines to the log.

    `extra_env` is added to the environment dvc (and the stage commands it starts) sees.
    Returns the output text. Raises DvcError on a non-zero exit.
    """
    cmd = [dvc_executable(), *args]
    env = {**os.environ, **(extra_env or {})}
    # the stage commands (`vrsflow stage …`) must resolve to this environment's console script
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    log.info("$ %s", " ".join(cmd))
    if capture:  # machine-readable output: warnings on stderr must not end up in the JSON
        done = subprocess.run(cmd, cwd=project_dir, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise DvcError(f"`{' '.join(cmd)}` failed with exit code {done.returncode}:\n{done.stderr[-4000:]}")
        if done.stderr.strip():
            log.info("%s", done.stderr.strip())
        return done.stdout
    proc = subprocess.Popen(cmd, cwd=project_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1)
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        log.info("%s", line.rstrip())
    code = proc.wait()
    output = "".join(lines)
    if code != 0:
        raise DvcError(f"`{' '.join(cmd)}` failed with exit code {code}:\n{output[-4000:]}")
    return output


def format_overrides(overrides: Mapping[str, object]) -> list[str]:
    """`{"sample.grpo_size": 8}` → `["-S", "sample.grpo_size=8"]` (values as YAML scalars)."""
    args: list[str] = []
    for key, value in sorted(overrides.items()):
        text = json.dumps(value) if isinstance(value, bool | list | dict) or value is None else str(value)
        args += ["-S", f"{key}={text}"]
    return args


def exp_run(project_dir: Path, overrides: Mapping[str, object], targets: Sequence[str] = (),
            name: str | None = None) -> str:
    """`dvc exp run -S … [--name NAME] [targets]`; returns dvc's output."""
    args = ["exp", "run", *format_overrides(overrides)]
    if name:
        args += ["--name", name]
    return run_dvc([*args, *targets], project_dir)


def metrics_show(project_dir: Path) -> dict:
    """`dvc metrics show --json` for the workspace, as {file: {metric: value}}."""
    raw = json.loads(run_dvc(["metrics", "show", "--json"], project_dir, capture=True) or "{}")
    # DVC 3 keys the workspace as "" (older releases: "workspace")
    workspace = raw.get("", raw.get("workspace", {})) if isinstance(raw, dict) else {}
    data = workspace.get("data", {}) if isinstance(workspace, dict) else {}
    return {path: entry.get("data", {}) for path, entry in data.items() if isinstance(entry, dict)}


def remote_url(configured: str, env_var: str) -> str:
    """The remote URL: the environment variable named `env_var` wins over params' `remote.url`."""
    return os.environ.get(env_var, "") or configured


def configure_remote(project_dir: Path, name: str, url: str) -> None:
    """Make `url` the default DVC remote `name` (local config: credentials never reach git)."""
    run_dvc(["remote", "add", "--local", "--force", "--default", name, url], project_dir, capture=True)


def push(project_dir: Path, remote: str | None = None) -> str:
    """`dvc push` (to `remote`, or the default remote)."""
    return run_dvc(["push", *(["-r", remote] if remote else [])], project_dir)
