"""A seed process for tests/stages/test_seed_runs.py: `python -m tests.seed_worker --job JOB`.

It records its pid and the times it ran in the job's `log` folder, sleeps `sleep_s`, and writes
{"seed": seed, "square": seed²}; a seed listed in `fail` exits with code 3 after `fail_after_s` instead."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", type=Path, required=True)
    job = json.loads(parser.parse_args().job.read_text())
    seed, log = int(job["seed"]), Path(job["log"])
    (log / f"pid-{seed}").write_text(str(os.getpid()))
    started = time.time()
    if seed in job.get("fail", []):
        time.sleep(float(job.get("fail_after_s", 0)))  # the other seeds have started by then
        sys.exit(3)
    time.sleep(float(job["sleep_s"]))
    (log / f"ran-{seed}").write_text(json.dumps([started, time.time()]))
    Path(job["result"]).write_text(json.dumps({"seed": seed, "square": seed * seed}))


if __name__ == "__main__":
    main()
