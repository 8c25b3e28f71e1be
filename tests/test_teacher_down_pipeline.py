"""Through DVC: with `teacher.base_url` at a closed port, `vrsflow repro` stops at `cot` within 30 s with one line
naming the URL, and dvc.lock has no `cot` entry; `vrsflow stage sft` on an empty shard folder is one line naming
the shard stage, from the parent process (sft.processes: 2, so no rank starts). The fast equivalents are in
tests/stages/test_teacher_down.py (the stage functions, the same lines)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.pipeline_repo import env_with_venv, make_repo

pytestmark = pytest.mark.slow  # a pipeline copy, then synth → keyframes through dvc: ~1 min on 2 cores


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env={**env_with_venv(), **(env or {})}, capture_output=True, text=True,
                          timeout=900)


def test_repro_stops_at_cot_in_one_line_with_nothing_recorded(tmp_path: Path, project_root: Path,
                                                              prefect_api: str) -> None:
    url = closed_port_url()
    repo = make_repo(project_root, tmp_path / "repo", {
        "teacher.backend": "openai", "teacher.base_url": url, "teacher.api_key_required": False,
        "teacher.max_retries": 2, "sft.processes": 2}, profile="ci")
    timings = tmp_path / "timings.jsonl"
    proc = run([sys.executable, "-m", "flows.cli", "repro", "cot"], repo, {"VRSFLOW_TIMINGS": str(timings)})
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, output
    assert errors[0].startswith(f"error: cot: teacher.base_url {url} is unreachable ("), errors[0]
    [cot] = [r for r in map(json.loads, timings.read_text().splitlines()) if r.get("name") == "cot"]
    assert cot["command_end"] - cot["command_start"] < 30
    stages = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
    assert "keyframes" in stages and "cot" not in stages
    assert not (repo / "data" / "cot" / "generations.parquet").exists()

    (repo / "data" / "shards" / "sft").mkdir(parents=True)
    proc = run([sys.executable, "-m", "flows.cli", "stage", "sft"], repo)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in output and "ChildFailedError" not in output, output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert errors == ["error: sft: data/shards/sft holds no training samples: the shard stage wrote none (it shards "
                      "the traces the filter accepted: see metrics/shard.json, metrics/filter.json and "
                      "metrics/cot.json); nothing to fine-tune on"], output
