"""`vrsflow stage shard` whose writer finds the disk full, for tests/flows/test_disk_full.py: the shard stage's
function is replaced by one that writes a first shard through the project's own writers and then a table whose
writer fails as the library fails on a full disk (`--how`): pyarrow's OSError (errno unset, the C library's text,
no file name), or Python's own write with EDQUOT and the file name. Run from a project folder (params.yaml,
dvc.yaml); exits with the command's code."""

import argparse
import errno
import sys
from pathlib import Path

import pandas as pd

import flows.shard
from flows.cli import main
from schemas.masks import MasksSchema
from stages.core.io import write_json, write_table
from stages.core.report import StageReport

parser = argparse.ArgumentParser()
parser.add_argument("--how", choices=["pyarrow", "quota"], required=True)
how = parser.parse_args().how


def full_disk_to_parquet(self: pd.DataFrame, path, **kwargs) -> None:
    with open(path, "wb") as handle:  # what a writer leaves: the first bytes of the file
        handle.write(b"PAR1" + b"\0" * 64)
    if how == "pyarrow":
        raise OSError("Error writing bytes to file. Detail: [errno 28] No space left on device")
    raise OSError(errno.EDQUOT, "Disk quota exceeded", str(path))


def write_shards(*args, **kwargs) -> StageReport:
    out = Path("data/shards")
    write_json(out / "sft" / "manifest.json", {"shards": 1})
    (out / "sft" / "sft-000000.tar").write_bytes(b"\0" * 1024)
    pd.DataFrame.to_parquet = full_disk_to_parquet
    table = pd.DataFrame({"anno_id": [1], "frame_idx": [0], "height": [4], "width": [4], "counts": [None]})
    write_table(table, MasksSchema, out / "grpo" / "index.parquet")
    raise AssertionError("unreachable: the writer above fails")


flows.shard.write_shards = write_shards
sys.exit(main(["stage", "shard"]))
