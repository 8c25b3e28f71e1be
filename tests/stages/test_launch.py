"""`stages.models.launch`: the stage starts its own process group (torchrun) and reads back the main
process's result; a stage stopped by SIGTERM leaves no worker running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from stages.models.launch import launch_command, run_launched
from tests.pipeline_repo import env_with_venv

REPO = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by its parent) counts as gone
    status = Path(f"/proc/{pid}/stat")
    return not (status.is_file() and status.read_text().split(") ")[-1].startswith("Z"))


def test_launch_command_names_the_launcher_and_module(tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    assert launch_command(3, "", "stages.grpo.trl_engine", job)[1:] == [
        "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "3", "-m", "stages.core.lifeline",
        "stages.grpo.trl_engine", "--job", str(job)]
    accel = launch_command(2, "configs/accelerate/ddp.yaml", "stages.sft", job)
    assert accel[1:7] == ["-m", "accelerate.commands.launch", "--config_file", "configs/accelerate/ddp.yaml",
                          "--num_processes", "2"]
    assert accel[-5:] == ["-m", "stages.core.lifeline", "stages.sft", "--job", str(job)]


def test_run_launched_returns_the_main_process_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # `-m tests.launch_worker` resolves from the project folder, as the stages do
    result = run_launched("grpo", 2, "", "tests.launch_worker", {"pids": str(tmp_path)})
    assert result == {"world_size": 2, "sum": 3.0}  # ranks 0 and 1 each gave rank + 1 to one gloo all-reduce
    assert sorted(p.name for p in tmp_path.glob("*.pid")) == ["0.pid", "1.pid"]


def test_missing_accelerate_config_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"grpo.accelerate_config: .*nope.yaml is not a file"):
        run_launched("grpo", 2, str(tmp_path / "nope.yaml"), "tests.launch_worker", {})


def _start_sleeping_stage(tmp_path: Path, extra: str = "") -> tuple[subprocess.Popen, list[int]]:
    """A stage process (its own process group) running 2 sleeping workers under torchrun; (it, worker pids)."""
    stage = textwrap.dedent(f"""
        {extra}
        from stages.models.launch import run_launched
        run_launched("grpo", 2, "", "tests.launch_worker", {{"pids": {str(tmp_path)!r}, "sleep": 120}})
    """)
    proc = subprocess.Popen([sys.executable, "-c", stage], cwd=REPO, process_group=0,
                            env={**env_with_venv(), "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 120
    while (len([p for p in tmp_path.glob("*.pid") if p.read_text()]) < 2 and time.monotonic() < deadline
           and proc.poll() is None):
        time.sleep(0.2)
    pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
    assert len(pids) == 2 and all(_alive(p) for p in pids)
    _wait_until_ready(tmp_path, proc)
    return proc, pids


def _wait_until_ready(folder: Path, proc: subprocess.Popen) -> None:
    """Until both workers are in their sleep (past the group set-up: each has touched its `<rank>.ready`)."""
    deadline = time.monotonic() + 60
    while len(list(folder.glob("*.ready"))) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert len(list(folder.glob("*.ready"))) == 2, "the workers did not get past the group set-up"


def _gone_within(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [p for p in pids if _alive(p)]


@pytest.mark.slow  # torchrun and two workers importing torch: ~15 s on a quiet machine, a minute when loaded
def test_sigkill_of_the_stage_process_group_ends_launcher_and_workers(tmp_path: Path) -> None:
    """`kill -9` of the stage's process group reaches the stage and its launcher, not torchrun's workers
    (each in a session of its own): they end through their parent-death signal (stages.core.lifeline)."""
    import psutil

    proc, pids = _start_sleeping_stage(tmp_path)
    try:
        launcher = [c.pid for c in psutil.Process(proc.pid).children()]
        assert len(launcher) == 1 and all(psutil.Process(p).ppid() == launcher[0] for p in pids)
        assert all(os.getsid(p) != os.getsid(proc.pid) for p in pids)  # beyond a kill of the stage's session
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert not _gone_within([*launcher, *pids], 10), "processes of the stage outlived its SIGKILL"
        # its job folder is left behind; the next stage removes it (it names the dead stage's pid)
        from stages.models.launch import remove_leftover_job_folders

        assert [p for p in remove_leftover_job_folders() if f"-{proc.pid}-" in p.name]
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_sigterm_to_the_stage_stops_every_worker(tmp_path: Path) -> None:
    """The flow engine turns SIGTERM into an exception in the stage; the launcher must then be stopped so
    that its workers do not go on training (and writing checkpoints) after the stage has ended."""
    stage = textwrap.dedent(f"""
        import signal, sys
        def stop(signum, frame):
            raise SystemExit(143)  # what Prefect's engine does with SIGTERM: an exception in the main thread
        signal.signal(signal.SIGTERM, stop)
        from stages.models.launch import run_launched
        run_launched("grpo", 2, "", "tests.launch_worker", {{"pids": {str(tmp_path)!r}, "sleep": 120}})
    """)
    proc = subprocess.Popen([sys.executable, "-c", stage], cwd=REPO, env={**env_with_venv(), "PYTHONPATH": str(REPO)})
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("*.pid"))) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        _wait_until_ready(tmp_path, proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 143
        deadline = time.monotonic() + 20
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in pids if _alive(p)], "workers still running after the stage stopped"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid_file in tmp_path.glob("*.pid"):
            if _alive(int(pid_file.read_text())):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
