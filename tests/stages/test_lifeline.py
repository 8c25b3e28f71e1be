"""`stages.core.lifeline`: a child started through it ends when its parent is SIGKILLed, and one whose parent
died before the parent-death signal was set exits at once instead of running on unwatched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from stages.core import lifeline
from tests.pipeline_repo import env_with_venv

REPO = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")  # a zombie (exited, not reaped yet) counts as gone
    return not (stat.is_file() and stat.read_text().split(") ")[-1].startswith("Z"))


def _wait_for(path: Path, seconds: float = 30) -> int:
    deadline = time.monotonic() + seconds
    while not (path.is_file() and path.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return int(path.read_text())


def _gone_after_parent_sigkill(proc: subprocess.Popen, child: int) -> bool:
    """With `child` alive and `proc` its parent (asserted: exec'd in place of any wrapper, the child is the program
    itself), SIGKILL `proc`, then whether `child` is gone within 5 s. Both are SIGKILLed here whatever happens, so no
    test leaves either behind, a failed precondition included."""
    try:
        assert _alive(child) and f"PPid:\t{proc.pid}\n" in Path(f"/proc/{child}/status").read_text()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 5
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        return not _alive(child)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if _alive(child):
            os.kill(child, signal.SIGKILL)


def test_child_dies_within_seconds_of_its_sigkilled_parent(tmp_path: Path) -> None:
    """The parent starts a sleeping child through `lifeline.popen` (a thread of its own waits for it, as the
    stage's launcher call does) and is SIGKILLed; the child is re-parented, so only the kernel's parent-death
    signal can end it."""
    child_pid = tmp_path / "child.pid"
    parent = textwrap.dedent(f"""
        import sys, threading
        from stages.core import lifeline
        code = "import os, time; open({str(child_pid)!r}, 'w').write(str(os.getpid())); time.sleep(300)"
        proc = lifeline.popen([sys.executable, "-c", code])
        proc.wait()
    """)
    proc = subprocess.Popen([sys.executable, "-c", parent], cwd=REPO, env={**env_with_venv(), "PYTHONPATH": str(REPO)})
    child = _wait_for(child_pid)
    assert _gone_after_parent_sigkill(proc, child), "the child outlived its SIGKILLed parent"


def test_a_child_whose_parent_is_already_gone_exits_at_once(tmp_path: Path) -> None:
    """The race: the parent died between starting the child and the child setting its signal. The child then
    sees a parent other than the one named in its environment and exits (128 + SIGKILL) without running."""
    marker = tmp_path / "ran"
    env = {**env_with_venv(), "PYTHONPATH": str(REPO), lifeline.PARENT_ENV: "1"}  # pid 1 is never our parent
    done = subprocess.run(lifeline.command([sys.executable, "-c", f"open({str(marker)!r}, 'w')"]), cwd=REPO,
                          env=env, timeout=60)
    assert done.returncode == 128 + signal.SIGKILL and not marker.exists()
    env[lifeline.PARENT_ENV] = str(os.getpid())  # the true parent: the program runs
    done = subprocess.run(lifeline.command([sys.executable, "-c", f"open({str(marker)!r}, 'w')"]), cwd=REPO,
                          env=env, timeout=60)
    assert done.returncode == 0 and marker.exists()


def test_module_mode_runs_the_module_as_main(tmp_path: Path) -> None:
    """What torchrun's workers run: `python -m stages.core.lifeline MODULE ARGS` = `python -m MODULE ARGS`,
    with the parent-death signal set (SIGKILL = 9, read back from /proc)."""
    package = tmp_path / "probe_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "probe.py").write_text(textwrap.dedent("""
        import os, signal, sys, ctypes
        libc = ctypes.CDLL(None)
        value = ctypes.c_int()
        libc.prctl(2, ctypes.byref(value), 0, 0, 0)  # PR_GET_PDEATHSIG
        print(__name__, sys.argv[1:], value.value, os.environ["VRSFLOW_LIFELINE_PARENT"] == str(os.getpid()))
    """))
    env = {**env_with_venv(), "PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}"}
    out = subprocess.run(lifeline.module_command("probe_pkg.probe", ["--job", "x"]), cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == f"__main__ ['--job', 'x'] {int(signal.SIGKILL)} True"


def test_parent_watch_stops_a_process_when_the_watched_one_ends(tmp_path: Path) -> None:
    """`stop_when_gone`: what a stage run by `vrsflow repro`'s dvc uses to end with the repro (not its parent)."""
    watched = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    code = f"import time; from stages.core import lifeline; lifeline.stop_when_gone({watched.pid}); time.sleep(300)"
    watcher = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env={**env_with_venv(), "PYTHONPATH": str(REPO)})
    try:
        time.sleep(1.0)
        assert watcher.poll() is None
        watched.kill()
        watched.wait()
        assert watcher.wait(timeout=10) == -signal.SIGTERM  # SIGTERM first: a flow engine records the crash
    finally:
        for proc in (watched, watcher):
            if proc.poll() is None:
                proc.kill()


def test_parent_watch_waits_first_wait_s_before_its_sigterm() -> None:
    """`first_wait_s`: the watch of a stage started by a plain `dvc repro` leaves a signal sent to the whole group
    time to be handled before it sends its own."""
    watched = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    code = (f"import time; from stages.core import lifeline; lifeline.stop_when_gone({watched.pid}, first_wait_s=2.0);"
            " time.sleep(300)")
    watcher = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env={**env_with_venv(), "PYTHONPATH": str(REPO)})
    try:
        time.sleep(1.0)
        watched.kill()
        watched.wait()
        ended = time.monotonic()
        assert watcher.wait(timeout=10) == -signal.SIGTERM
        assert time.monotonic() - ended >= 1.9
    finally:
        for proc in (watched, watcher):
            if proc.poll() is None:
                proc.kill()


def _reaping_parent(tmp_path: Path, program: str) -> subprocess.Popen:
    """A parent process that starts `bash -c program` through `lifeline.popen(..., reap=True)` and waits."""
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from stages.core import lifeline
        lifeline.popen(["bash", "-c", {program!r}], reap=True).wait()
    """))
    return subprocess.Popen([sys.executable, str(script)], env=env_with_venv())


def test_reap_takes_an_orphaned_grandchild_down_with_a_sigkilled_parent(tmp_path: Path) -> None:
    """The program leaves a grandchild whose own parent has exited (as a dying Ray worker leaves vLLM's engine
    process): only the subreaper holds it, and it goes when the stage-side parent is SIGKILLed."""
    orphan = tmp_path / "orphan.pid"
    parent = _reaping_parent(tmp_path, f"(sleep 300 & echo $! > {orphan}); sleep 300")
    pid = _wait_for(orphan)
    assert _alive(pid)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)


def test_reap_ends_the_leftovers_when_the_program_exits(tmp_path: Path) -> None:
    """A program that exits normally but left a process behind: the leftover is killed, the exit code kept."""
    orphan = tmp_path / "orphan.pid"
    parent = _reaping_parent(tmp_path, f"(sleep 300 & echo $! > {orphan}); sleep 1; exit 3")
    pid = _wait_for(orphan)
    assert parent.wait(timeout=30) == 0  # the test's parent script itself exits 0
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)
    proc = subprocess.run([sys.executable, "-m", "stages.core.lifeline", "--reap", "--", "bash", "-c", "exit 3"],
                          cwd=REPO, env=env_with_venv(), timeout=30)
    assert proc.returncode == 3


def test_a_lifeline_child_of_the_reaped_program_runs(tmp_path: Path) -> None:
    """The reaped program starts its own children through the lifeline (launch.sh's trainer line): they run."""
    out = tmp_path / "ran"
    proc = subprocess.run([sys.executable, "-m", "stages.core.lifeline", "--reap", "--", "bash", "-c",
                           f"{sys.executable} -m stages.core.lifeline -- touch {out}"],
                          cwd=REPO, env=env_with_venv(), timeout=60)
    assert proc.returncode == 0 and out.is_file()


def test_a_process_pools_workers_die_with_their_sigkilled_parent(tmp_path: Path) -> None:
    """`lifeline.process_pool` (the benches' seeds in parallel): a worker busy with its task is re-parented when the
    pool's process is SIGKILLed, so only the kernel's parent-death signal can end it."""
    worker_pid = tmp_path / "worker.pid"
    parent = textwrap.dedent(f"""
        import os, time
        from stages.core import lifeline
        with lifeline.process_pool(1) as pool:
            pid = pool.submit(os.getpid).result()
            open({str(worker_pid)!r}, "w").write(str(pid))
            pool.submit(time.sleep, 300).result()
    """)
    proc = subprocess.Popen([sys.executable, "-c", parent], cwd=REPO, env={**env_with_venv(), "PYTHONPATH": str(REPO)})
    worker = _wait_for(worker_pid, 60)
    assert _gone_after_parent_sigkill(proc, worker), "the pool's worker outlived its SIGKILLed parent"
