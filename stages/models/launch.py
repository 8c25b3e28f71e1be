"""Run one stage's training in several processes on this node, started by the stage itself.

SFT and TRL GRPO both work this way: the stage writes a job file (its params blocks and where to put the
result), starts `accelerate launch` with the configured accelerate config — or `torchrun --standalone`
(DDP) without one — on `-m <module> --job JOB`, waits, and reads back what the main process wrote. On a
CPU the processes use gloo; each keeps the thread count its params give it, so N processes use N cores
(the embedded default runs GRPO in 2 processes on 2 cores: generation and the forward/backward passes of a
round split between them).

Whatever ends the stage, nothing it started goes on: the launcher and each worker die with their parent
(`stages.core.lifeline`: the launcher is started through it, the workers run the module through it), and the
job folder is named after the stage's pid so that a later stage removes it when the stage was killed
(`remove_leftover_job_folders`).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from stages.core import lifeline
from stages.core.job_folders import JOB_PREFIX, remove_leftover_job_folders

log = logging.getLogger(__name__)

RESULT_KEY = "result"  # the job member naming the file the main process writes its result to


def launch_command(processes: int, accelerate_config: str, module: str, job: Path) -> list[str]:
    """`accelerate launch --config_file CONFIG --num_processes N -m MODULE --job JOB`, or torchrun (DDP) when
    `accelerate_config` is ""; each worker runs MODULE through `stages.core.lifeline` (dies with the launcher)."""
    if accelerate_config:
        head = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", accelerate_config,
                "--num_processes", str(processes)]
    else:
        head = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
    return [*head, "-m", "stages.core.lifeline", module, "--job", str(job)]


def run_launched(stage: str, processes: int, accelerate_config: str, module: str, job: dict[str, Any]) -> dict:
    """Run `module` in `processes` processes on `job` (JSON-serialisable); return the main process's result.

    Raises:
        ValueError: `accelerate_config` names no file.
        subprocess.CalledProcessError: the launched run failed (its processes have printed why).
    """
    if accelerate_config and not Path(accelerate_config).is_file():
        raise ValueError(f"{stage}.accelerate_config: {accelerate_config} is not a file")
    remove_leftover_job_folders()
    with tempfile.TemporaryDirectory(prefix=f"{JOB_PREFIX}{stage}-{os.getpid()}-") as tmp:
        job_path, result_path = Path(tmp) / "job.json", Path(tmp) / "result.json"
        job_path.write_text(json.dumps({**job, RESULT_KEY: str(result_path)}))
        command = launch_command(processes, accelerate_config, module, job_path)
        log.info("%s: %s", stage, " ".join(command))
        _run_to_end(command)
        return json.loads(result_path.read_text())


def _run_to_end(command: list[str], grace_s: float = 15.0) -> None:
    """Run the launcher; if this process is stopped (SIGTERM turned into an exception by the flow engine,
    Ctrl-C), stop the launcher with SIGTERM, which it passes on to its workers, so that none is left training
    (and writing checkpoints) after the stage has ended. `subprocess.run` would SIGKILL the launcher and
    orphan the workers. The launcher is started through `stages.core.lifeline` from the thread that waits for
    it, so that a SIGKILL of this process ends it (and it, its workers) too."""
    proc = lifeline.popen(command)
    try:
        code = proc.wait()
    except BaseException:
        lifeline.terminate(proc, grace_s)
        raise
    if code:
        raise subprocess.CalledProcessError(code, command)
