"""A worker for tests/stages/test_launch.py, run under torchrun by `stages.models.launch.run_launched`:
records its pid, joins a gloo group and sums a tensor over it (as training does), marks itself ready, optionally
sleeps, and on rank 0 writes the result the stage reads back."""

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--job", type=Path, required=True)
job = json.loads(parser.parse_args().job.read_text())
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
(Path(job["pids"]) / f"{rank}.pid").write_text(str(os.getpid()))
dist.init_process_group("gloo")
value = torch.tensor([rank + 1.0])
dist.all_reduce(value)
(Path(job["pids"]) / f"{rank}.ready").touch()  # past the group set-up: a test may stop the stage now
time.sleep(job.get("sleep", 0))
if rank == 0:
    Path(job["result"]).write_text(json.dumps({"world_size": world, "sum": value.item()}))
dist.destroy_process_group()
