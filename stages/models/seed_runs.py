"""Several training seeds of one stage at once, each in a process of its own, and the choice of the best.

A tiny model's pre-training learns or not depending on its seed (docs/architecture.md: the colour word bound in one
seed of four; one SAM2 seed of three did not learn at 1e-3), so the pre-training stages train several seeds and keep
the one that scores best on the stage's own held-out check. Each seed runs `python -m MODULE --job JOB` (the
stage's `__main__`), started through `stages.core.lifeline` from the thread that waits for it, so that a seed
process dies with the stage however the stage dies; at most `parallel` run at once. On a GPU they share the device
(a tiny model leaves it mostly idle); on the CPU each takes one core.

A seed's process writes its figures to the job's result file only when it has finished; a rerun after a kill starts
the unfinished seeds again (each resumes from its own saved state) and keeps the finished ones.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from stages.core import lifeline
from stages.core.errors import OneLineError
from stages.core.job_folders import JOB_PREFIX, remove_leftover_job_folders

log = logging.getLogger(__name__)

# processes a GPU run starts at once when `parallel` is 0 (all seeds at once up to it): the seed list is a run
# parameter, and the processes it may start must not grow with it
MAX_AT_ONCE = 8
RESULT_KEY = "result"  # the job member naming the file the seed's process writes its figures to


class SeedFailed(OneLineError, RuntimeError):
    """A seed's process exited with an error (it has printed why, above); the other seeds were stopped."""


def parallel_seeds(requested: int, n_seeds: int, cuda: bool) -> int:
    """How many seeds train at once: `requested` when > 0 (a server setting); else all of them on a GPU, up to
    MAX_AT_ONCE, and one per core on the CPU. The seed list (a run parameter) may be longer: the rest wait their
    turn, so that a run's seeds never decide how many processes it starts."""
    if requested > 0:
        return min(requested, n_seeds)
    if cuda:
        return min(n_seeds, MAX_AT_ONCE)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(n_seeds, cores)


def seed_folder(checkpoint_dir: str | Path, seed: int) -> Path:
    """Where a seed's resumable state, figures and weights live while its stage runs."""
    return Path(checkpoint_dir) / f"seed-{seed}"


def drop_seed_folders(checkpoint_dir: str | Path, seeds: Sequence[int]) -> None:
    """A finished stage's cleanup: the listed seeds' folders go, and `checkpoint_dir` when nothing else is left in
    it. A seed dropped from the list before it ended is another run's resumable work, and stays."""
    for seed in seeds:
        shutil.rmtree(seed_folder(checkpoint_dir, seed), ignore_errors=True)
    with contextlib.suppress(OSError):
        Path(checkpoint_dir).rmdir()


def describe_device(device: str) -> str:
    """What a lineage and a results file name as the device that trained: the GPU's name, or the CPU and threads."""
    import platform

    import torch

    if device.startswith("cuda"):
        return f"cuda: {torch.cuda.get_device_name(torch.device(device))}"
    name = platform.machine()
    with contextlib.suppress(OSError):
        models = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")]
        name = models[0] if models else name
    return f"cpu: {name}, {torch.get_num_threads()} torch thread(s) per process"


def run_seeds(stage: str, module: str, jobs: dict[int, dict[str, Any]], parallel: int,
              env: dict[str, str] | None = None) -> dict[int, dict]:
    """Run `python -m MODULE --job JOB` once per seed (`jobs`: seed → JSON-serialisable job), at most `parallel` at
    a time; return each seed's figures (what its process wrote to `job[RESULT_KEY]`).

    Raises:
        SeedFailed: a seed's process failed; the seeds still running are stopped (SIGTERM, then SIGKILL).
    """
    remove_leftover_job_folders()
    running: dict[int, subprocess.Popen] = {}
    lock = threading.Lock()
    stopping = threading.Event()
    with tempfile.TemporaryDirectory(prefix=f"{JOB_PREFIX}{stage}-{os.getpid()}-") as tmp:
        def one(seed: int) -> dict:
            job_path, result_path = Path(tmp) / f"job-{seed}.json", Path(tmp) / f"result-{seed}.json"
            job_path.write_text(json.dumps({**jobs[seed], RESULT_KEY: str(result_path)}))
            command = [sys.executable, "-m", module, "--job", str(job_path)]
            with lock:
                if stopping.is_set():
                    raise SeedFailed(f"{stage}: seed {seed} not started (another seed failed)")
                # popen and wait in this thread: the kernel ties the child's death signal to the forking thread
                proc = lifeline.popen(command, env={**os.environ, **(env or {})})
                running[seed] = proc
            log.info("%s: seed %d started (pid %d)", stage, seed, proc.pid)
            code = proc.wait()
            with lock:
                running.pop(seed, None)
            if code:
                raise SeedFailed(f"{stage}: seed {seed} failed (exit code {code}; its log is above)")
            return json.loads(result_path.read_text())

        results: dict[int, dict] = {}
        pool = ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix=f"{stage}-seed")
        # each thread runs in a copy of this one's context, so that its log lines reach the run that logs here
        futures = {pool.submit(contextvars.copy_context().run, one, seed): seed for seed in jobs}
        try:
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = [f for f in done if f.exception() is not None]
            if failed:
                raise failed[0].exception()
            for future, seed in futures.items():
                results[seed] = future.result()
        except BaseException:
            stopping.set()
            for future in futures:
                future.cancel()
            with lock:
                procs = list(running.values())
            for proc in procs:
                lifeline.terminate(proc, 15.0)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    return dict(sorted(results.items()))


def seed_process(stage: str, params_type: type, train: Callable[[Any, dict], dict],
                 argv: list[str] | None = None) -> None:
    """The `__main__` of a seed's process: read `--job JOB`, build the stage's params block (named `stage` in the
    job) as `params_type`, train the seed (`train(params, job)`), write its figures where the job says. Its INFO
    lines (a screen's outcome, a resume) go to stderr as the `vrsflow` command's do, so they reach the stage's log."""
    import argparse

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    from stages.core.io import write_json
    from stages.core.typed_config import build

    parser = argparse.ArgumentParser(description=f"one seed of the {stage} stage")
    parser.add_argument("--job", type=Path, required=True, help=f"job file written by the {stage} stage")
    job = json.loads(parser.parse_args(argv).job.read_text())
    write_json(Path(job[RESULT_KEY]), train(build(params_type, job[stage], stage), job))


def best_seed(results: dict[int, dict], score: Callable[[dict], Sequence[float]]) -> int:
    """The seed whose figures score highest (`score` gives a tuple compared in order); the lowest seed of a tie."""
    if not results:
        raise ValueError("no seed has results to choose from")
    return max(sorted(results), key=lambda seed: (tuple(score(results[seed])), -seed))
