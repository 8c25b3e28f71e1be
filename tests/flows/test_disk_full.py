"""A full disk (or quota) while a stage writes: one line naming the stage, the path and the free space, exit 1,
no traceback (Prefect's logs included), the run's partial files removed and older ones kept, no lineage, the
flow run Failed. The stage is `vrsflow stage shard` in its own process, its writer patched to fail as the
libraries fail (tests/disk_full_stage.py)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stages.core.disk import DiskFull, disk_full, human_bytes, no_space_error, remove_partial, stage_outs


@pytest.mark.parametrize(("how", "what", "path"), [
    ("pyarrow", "no space left on device", None),  # no file name: the stage's output on the fullest filesystem
    pytest.param("quota", "disk quota exceeded", "data/shards/grpo/index.parquet", marks=pytest.mark.slow),
])
def test_a_full_disk_is_one_line_and_leaves_nothing_of_the_run(how: str, what: str, path: str | None,
                                                             tmp_path: Path, project_root: Path, prefect_api: str
                                                             ) -> None:
    """~10 s each (a stage process): the quota case, whose line differs only in words and path, runs with slow."""
    for name in ("params.yaml", "dvc.yaml"):
        shutil.copy(project_root / name, tmp_path / name)
    old = tmp_path / "data" / "shards" / "old.txt"  # from before this run: not this run's to remove
    old.parent.mkdir(parents=True)
    old.write_text("older")
    os.utime(old, (time.time() - 60, time.time() - 60))
    env = {**os.environ, "PYTHONPATH": str(project_root), "PREFECT_API_URL": prefect_api}
    proc = subprocess.run([sys.executable, "-m", "tests.disk_full_stage", "--how", how],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    assert "Traceback" not in output, output
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, output
    shown = path or "data/shards"  # as dvc.yaml names it
    assert errors[0].startswith(f"error: shard: {what} writing {shown} (") and " free there)" in errors[0], errors[0]
    # the run's files are gone (the shard, the manifest, the half-written table, their folders); the old one stays
    assert sorted(p.relative_to(tmp_path).as_posix() for p in (tmp_path / "data").rglob("*")) == [
        "data/shards", "data/shards/old.txt"]
    assert not (tmp_path / "metrics" / "shard.json").exists() and not list(tmp_path.rglob("lineage.json"))
    from prefect import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName
    from prefect.client.schemas.sorting import FlowRunSort

    with get_client(sync_client=True) as client:
        run = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["dvc-shard"])),
                                    sort=FlowRunSort.START_TIME_DESC, limit=1)[0]
    assert run.state.is_failed() and what in run.state.message


@pytest.mark.parametrize(("err", "found"), [
    (OSError(errno.ENOSPC, "No space left on device"), True),
    (OSError(errno.EDQUOT, "Disk quota exceeded", "/x"), True),
    (OSError("Error writing bytes to file. Detail: [errno 28] No space left on device"), True),  # pyarrow
    (RuntimeError("safetensors: IoError(Os { code: 28, kind: StorageFull, message: \"No space left on device\" })"),
     True),
    (OSError(errno.ENOENT, "No such file or directory"), False),
    (ValueError("bad value"), False),
])
def test_full_disk_is_recognised_also_when_wrapped(err: BaseException, found: bool) -> None:
    try:
        try:
            raise err
        except BaseException as inner:
            raise RuntimeError("the writer failed") from inner
    except RuntimeError as outer:
        assert (no_space_error(outer) is err) is found


def test_the_line_names_stage_path_and_free_space(tmp_path: Path) -> None:
    line = str(disk_full("sft", OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "a" / "b.bin"))))
    free = human_bytes(shutil.disk_usage(tmp_path).free)
    assert line.startswith(f"sft: no space left on device writing {tmp_path}/a/b.bin ({free} free there); ")
    quota = disk_full("sft", OSError(errno.EDQUOT, "Disk quota exceeded", "models/sft/merged/model.safetensors"))
    assert isinstance(quota, DiskFull) and quota.errno == errno.EDQUOT and "\n" not in line
    assert str(quota).startswith("sft: disk quota exceeded writing models/sft/merged/model.safetensors (")
    assert (human_bytes(0), human_bytes(1536), human_bytes(3 * 2**30)) == ("0 B", "1.5 KiB", "3.0 GiB")


def test_remove_partial_keeps_what_the_run_did_not_write(tmp_path: Path) -> None:
    keep = tmp_path / "out" / "old" / "a.txt"
    keep.parent.mkdir(parents=True)
    keep.write_text("old")
    os.utime(keep, (1, 1))
    started = time.time_ns()
    (tmp_path / "out" / "new" / "deep").mkdir(parents=True)
    (tmp_path / "out" / "new" / "deep" / "b.bin").write_bytes(b"1")
    (tmp_path / "out" / "old" / "c.bin").write_bytes(b"2")
    (tmp_path / "m.json").write_text("{}")
    assert remove_partial([tmp_path / "out", tmp_path / "m.json", tmp_path / "absent"], started) == 3
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["out", "out/old",
                                                                                     "out/old/a.txt"]


def test_stage_outs_skip_persistent_ones_and_read_foreach_items(project_root: Path) -> None:
    cot = [p.as_posix() for p in stage_outs("cot", project_dir=project_root)]
    assert cot and all("cache" not in p for p in cot)  # the response cache is `persist: true`: never removed
    bench = [p.as_posix() for p in stage_outs("bench", "mevis", project_dir=project_root)]
    assert any(p.endswith("mevis.json") for p in bench) and not any("${" in p for p in bench)
    assert stage_outs("no_such_stage", project_dir=project_root) == []
