"""One writer per output: a second run on a locked folder refuses in one line naming the holder's process; the
lock of a killed holder is taken over; processes a holder starts do not lock again."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from stages.core.output_lock import HELD_ENV, OutputLocked, hold_outputs, lock_file
from tests.pipeline_repo import env_with_venv

REPO = Path(__file__).resolve().parents[2]


def _holder(folder: Path, ready: Path) -> subprocess.Popen:
    """Another process holding `folder`'s lock (as a running stage does) until it is killed."""
    code = textwrap.dedent(f"""
        import time
        from stages.core.output_lock import hold_outputs
        with hold_outputs("sft", [{str(folder)!r}]):
            open({str(ready)!r}, "w").close()
            time.sleep(300)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], env={**env_with_venv(), "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert ready.exists(), "the holder did not start"
    return proc


def test_second_run_refuses_in_one_line_naming_the_holder(tmp_path: Path) -> None:
    folder = tmp_path / "models" / "sft"
    holder = _holder(folder, tmp_path / "ready")
    try:
        with pytest.raises(OutputLocked) as err, hold_outputs("sft", [folder, tmp_path / "ckpt"]):
            pass
        message = str(err.value)
        assert "\n" not in message and f"pid {holder.pid} (" in message and "sft" in message
        assert message.startswith(f"sft: {os.path.relpath(folder)} is being written by pid {holder.pid}")
        assert not (tmp_path / ".ckpt.lock").exists() or not (tmp_path / ".ckpt.lock").read_text()  # all or none
    finally:
        holder.kill()
        holder.wait()


def test_vrsflow_stage_refuses_before_any_work(tmp_path: Path) -> None:
    """`vrsflow stage sft` on folders another run holds: exit 2, stderr is exactly one line naming the holder."""
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    holder = _holder(tmp_path / "models" / "checkpoints" / "sft", tmp_path / "ready")  # sft.checkpoint_dir
    try:
        env = {**env_with_venv(), "PYTHONPATH": str(REPO)}
        env.pop("VRSFLOW_FORKSERVER", None)
        done = subprocess.run([sys.executable, "-m", "flows.cli", "stage", "sft", "--params", "params.yaml"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert lines[0].startswith("error: sft: models/checkpoints/sft is being written by pid "
                                   f"{holder.pid} (python"), lines[0]
        assert not (tmp_path / "models" / "sft").exists()  # nothing written
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_holders_lock_is_taken_over(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "out"
    holder = _holder(folder, tmp_path / "ready")
    assert f"pid {holder.pid} (" in lock_file(folder).read_text()
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with caplog.at_level(logging.INFO, logger="stages.core.output_lock"), hold_outputs("sft", [folder]):
        assert lock_file(folder).read_text().startswith(f"pid {os.getpid()} (")
        assert os.environ[HELD_ENV] == str(folder.absolute())
    assert f"from pid {holder.pid} (" in caplog.text  # the takeover is logged, naming the dead holder
    assert lock_file(folder).read_text() == "" and HELD_ENV not in os.environ  # released cleanly


def test_processes_a_holder_starts_do_not_lock_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "out"
    with hold_outputs("grpo", [folder]):
        child = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
            from stages.core.output_lock import hold_outputs
            with hold_outputs("grpo", [{str(folder)!r}]):
                print("inside")
        """)], env={**os.environ, **env_with_venv(), "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                               timeout=60)
        assert child.returncode == 0 and child.stdout == "inside\n", child.stderr
        with hold_outputs("grpo", [folder]):  # nested in the holder itself: a no-op, not a self-deadlock
            pass
    monkeypatch.setenv("RANK", "1")  # a launched worker other than the main one never locks
    with hold_outputs("grpo", [tmp_path / "other"]):
        assert not lock_file(tmp_path / "other").exists()
