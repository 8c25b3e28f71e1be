"""stages.models.seed_runs: seeds in processes of their own, at most `parallel` at once, every result returned;
a failing seed stops the others and is named in one line; the best seed chosen in order, a tie to the lowest."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from stages.core import lifeline
from stages.core.errors import OneLineError
from stages.models.seed_runs import MAX_AT_ONCE, SeedFailed, best_seed, drop_seed_folders, parallel_seeds, run_seeds

ROOT = Path(__file__).resolve().parents[2]


def _jobs(log: Path, seeds: list[int], sleep_s: float, fail: tuple[int, ...] = ()) -> dict[int, dict]:
    return {seed: {"seed": seed, "log": str(log), "sleep_s": sleep_s, "fail": list(fail), "fail_after_s": 4.0}
            for seed in seeds}


def test_every_seed_runs_in_its_own_process_at_most_parallel_at_once(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # `python -m tests.seed_worker` from the project root
    results = run_seeds("probe", "tests.seed_worker", _jobs(tmp_path, [4, 1, 3], 1.0), parallel=2)
    assert results == {1: {"seed": 1, "square": 1}, 3: {"seed": 3, "square": 9}, 4: {"seed": 4, "square": 16}}
    assert list(results) == [1, 3, 4]
    pids = {int((tmp_path / f"pid-{seed}").read_text()) for seed in (1, 3, 4)}
    assert len(pids) == 3 and os.getpid() not in pids
    spans = [json.loads((tmp_path / f"ran-{seed}").read_text()) for seed in (1, 3, 4)]
    for start, _ in spans:  # at no start were more than two seeds running
        assert sum(1 for s, e in spans if s <= start < e) <= 2
    assert any(s2 < e1 and s1 < e2 for i, (s1, e1) in enumerate(spans) for s2, e2 in spans[i + 1:])  # two at once


def test_a_failing_seed_is_named_in_one_line_and_stops_the_seed_still_running(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    started = time.monotonic()
    with pytest.raises(SeedFailed, match=r"^probe: seed 2 failed \(exit code 3") as error:
        run_seeds("probe", "tests.seed_worker", _jobs(tmp_path, [1, 2], 60.0, fail=(2,)), parallel=2)
    assert isinstance(error.value, OneLineError) and "\n" not in str(error.value)
    assert time.monotonic() - started < 40  # seed 1 (60 s) was stopped, not waited for
    survivor = int((tmp_path / "pid-1").read_text())
    assert not lifeline.alive(survivor) and not (tmp_path / "ran-1").exists()


def test_parallel_seeds_is_the_request_else_all_on_a_gpu_else_one_per_core() -> None:
    assert parallel_seeds(2, 5, cuda=False) == 2 and parallel_seeds(9, 3, cuda=True) == 3
    assert parallel_seeds(0, 5, cuda=True) == 5
    # a long seed list (a screened run) takes turns: the processes at once stay bounded
    assert parallel_seeds(0, 64, cuda=True) == MAX_AT_ONCE == 8 and parallel_seeds(12, 64, cuda=True) == 12
    cores = len(os.sched_getaffinity(0))
    assert parallel_seeds(0, 64, cuda=False) == cores and parallel_seeds(0, 1, cuda=False) == 1


def test_the_best_seed_compares_in_order_and_a_tie_keeps_the_lowest_seed() -> None:
    figures = {5: (0.3, 0.1), 2: (0.3, 0.2), 7: (0.1, 0.9)}
    assert best_seed(figures, lambda f: f) == 2
    figures[0] = (0.3, 0.2)
    assert best_seed(figures, lambda f: f) == 0
    with pytest.raises(ValueError, match="no seed"):
        best_seed({}, lambda f: f)


def test_a_seed_process_logs_its_info_lines_to_the_stage(tmp_path: Path) -> None:
    """seed_process configures logging as the vrsflow command does: a seed's INFO line (a screen's outcome) reaches
    stderr, which the stage's log inherits."""
    import subprocess
    import sys

    job = tmp_path / "job.json"
    job.write_text(json.dumps({"probe": {"steps": 3}, "seed": 5, "result": str(tmp_path / "result.json")}))
    code = ("import logging\nfrom dataclasses import dataclass\nfrom stages.models.seed_runs import seed_process\n"
            "@dataclass(frozen=True)\nclass Probe:\n    steps: int = 1\n"
            "def train(params, job):\n"
            "    logging.getLogger('stages.probe').info('seed %d: screen passed after %d steps', job['seed'], "
            "params.steps)\n    return {'seed': job['seed']}\n"
            "seed_process('probe', Probe, train, ['--job', " + repr(str(job)) + "])\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "stages.probe INFO seed 5: screen passed after 3 steps" in done.stderr
    assert json.loads((tmp_path / "result.json").read_text()) == {"seed": 5}


def test_a_finished_stage_drops_only_its_listed_seeds_folders(tmp_path: Path) -> None:
    """Shortening the seed list and publishing must not delete another seed's resumable state (a lost state is hours
    of CPU training); the folder itself goes once nothing is left in it."""
    states = tmp_path / "checkpoints"
    for seed in (0, 1, 26):
        (states / f"seed-{seed}").mkdir(parents=True)
        (states / f"seed-{seed}" / "state.pt").write_bytes(b"state %d" % seed)
    drop_seed_folders(states, (0, 1))
    assert [p.name for p in states.iterdir()] == ["seed-26"]
    assert (states / "seed-26" / "state.pt").read_bytes() == b"state 26"
    drop_seed_folders(states, (26,))
    assert not states.exists()
    drop_seed_folders(states, (0,))  # nothing there: nothing to do
