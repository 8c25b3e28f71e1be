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

from stages.core import lifeline

log = logging.getLogger(__name__)


class DvcError(RuntimeError):
    """A dvc command failed; the message holds the command and the tail of its output."""


def dvc_executable() -> str:
    """The dvc next to the running Python (the project's venv), else the one on PATH."""
    beside = Path(sys.executable).with_name("dvc")
    return str(beside) if beside.exists() else (shutil.which("dvc") or "dvc")


def run_dvc(args: Sequence[str], project_dir: Path, capture: bool = False,
            extra_env: Mapping[str, str] | None = None, tied: bool = False) -> str:
    """Run `dvc <args>` in `project_dir`, streaming its output lines to the log.

    `extra_env` is added to the environment dvc (and the stage commands it starts) sees. With `tied`, dvc dies
    with this process however it ends (stages/core/lifeline.py; call it from the thread that waits for it).
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
    start = lifeline.popen if tied else subprocess.Popen
    proc = start(cmd, cwd=project_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                 bufsize=1)
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


SSH_KEY_ENV = "VRSFLOW_DVC_SSH_KEY"  # an ssh:// remote's private key file (else the SSH agent, ~/.ssh keys)


def configure_remote(project_dir: Path, name: str, url: str) -> None:
    """Make `url` the default DVC remote `name` (local config: credentials never reach git); for an ssh:// remote
    the key file $VRSFLOW_DVC_SSH_KEY names, when set.

    Raises:
        ValueError: the URL holds a password (it would be written to a file; use a key or the agent).
    """
    from urllib.parse import urlsplit

    if urlsplit(url).password is not None:
        raise ValueError(f"remote '{name}': the URL holds a password; use a key (${SSH_KEY_ENV} or the SSH agent)")
    run_dvc(["remote", "add", "--local", "--force", "--default", name, url], project_dir, capture=True)
    key = os.environ.get(SSH_KEY_ENV, "")
    if url.startswith("ssh://") and key:
        run_dvc(["remote", "modify", "--local", name, "keyfile", key], project_dir, capture=True)


class RemoteFailed(RuntimeError):
    """A push or pull failed; the message is one line naming the remote and what failed."""


# what dvc-ssh / asyncssh (and the other filesystems) say, in order: the first that matches names the failure
_FAILURES = (
    (("Permission denied for user", "Too many authentication failures", "No more authentication methods",
      "Authentication failed"), "authentication refused (wrong key or password?)"),
    (("Connect call failed", "Connection refused", "Name or service not known", "No route to host",
      "timed out", "Temporary failure in name resolution", "Network is unreachable"), "cannot reach the host"),
    (("Permission denied", "Read-only file system", "read-only", "Operation not permitted", "AccessDenied"),
     "the remote refuses to write (read-only?)"),
)


def remote_failure(output: str) -> str:
    """What a failed `dvc push` / `dvc pull` output says went wrong, in a few words plus dvc's own reason."""
    lines = output.strip().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("ERROR")]
    if not starts:
        return lines[-1] if lines else "no output"
    reason = lines[starts[-1]].removeprefix("ERROR:").strip().removeprefix("unexpected error - ")
    listed = [line.strip() for line in lines[starts[-1] + 1:] if line.strip() and not line.startswith(("Is your", "<"))]
    if reason.endswith(":") and listed:  # dvc lists the targets on the lines below
        reason += f" {', '.join(listed[:3])}{f' and {len(listed) - 3} more' if len(listed) > 3 else ''}"
    for needles, what in _FAILURES:
        if any(needle in output for needle in needles):
            return f"{what}: {reason}"
    return reason


def transfer(project_dir: Path, verb: str, name: str, url: str, jobs: int | None = None,
             targets: Sequence[str] = ()) -> str:
    """`dvc push` or `dvc pull` (of `targets` and what they depend on; default all) against the remote `name`
    (configured as `url` first); returns dvc's output.

    Raises:
        RemoteFailed: one line: the remote, its URL (no password), the verb and what failed.
    """
    configure_remote(project_dir, name, url)
    cmd = [dvc_executable(), verb, "-r", name, *(["-j", str(jobs)] if jobs else []),
           *(["--with-deps", *targets] if targets else [])]  # a stage comes with the outputs it was built from
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(cmd, cwd=project_dir, env=env, capture_output=True, text=True)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise RemoteFailed(f"remote '{name}' ({url}): {verb} failed: {remote_failure(output)}")
    return output


def push(project_dir: Path, remote: str | None = None) -> str:
    """`dvc push` (to `remote`, or the default remote)."""
    return run_dvc(["push", *(["-r", remote] if remote else [])], project_dir)
