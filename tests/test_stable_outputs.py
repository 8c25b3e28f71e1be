"""Stable bytes through real DVC: committing dvc.lock and metrics (DVC autostages dvc.lock) and then forcing a
stage whose results come out equal (ingest) leaves everything downstream (sample) up to date."""

from __future__ import annotations

from pathlib import Path

import pytest

from stages.core.lineage import sha256_tree
from tests.pipeline_repo import dvc, make_repo, sh


def test_forced_stage_with_equal_outputs_leaves_downstream_up_to_date(
        tmp_path: Path, project_root: Path, prefect_api: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = make_repo(project_root, tmp_path / "repo")
    dvc(repo, "config", "core.autostage", "true")  # as in the project's .dvc/config
    dvc(repo, "repro", "sample")
    assert "dvc.lock" in sh(["git", "diff", "--cached", "--name-only"], repo)  # autostaged: checkout dirty
    sh(["git", "add", "metrics"], repo)
    sh(["git", "commit", "-qm", "results"], repo)  # HEAD moves; only dvc.lock and metrics changed
    before = {stage: sha256_tree(repo / "data" / stage) for stage in ("index", "sample")}
    lineage = (repo / "data" / "index" / "lineage.json").read_text()

    output = dvc(repo, "repro", "--force", "--single-item", "ingest")  # re-hashes the raw frames (cached)
    assert "Running stage 'ingest'" in output
    assert (repo / "data" / "index" / "lineage.json").read_text() == lineage
    assert sha256_tree(repo / "data" / "index") == before["index"]
    assert "Data and pipelines are up to date." in dvc(repo, "status", "sample")
    output = dvc(repo, "repro", "sample")
    assert "Stage 'sample' didn't change, skipping" in output and "Running stage" not in output
    assert sha256_tree(repo / "data" / "sample") == before["sample"]
    assert '"JPEGImages"' in lineage  # the raw frames are part of the chain

    # `vrsflow lineage` on a file inside an output: a tree down to the raw frames, params against the defaults
    from flows.cli import main

    monkeypatch.chdir(repo)
    assert main(["lineage", "data/sample/grpo.parquet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "data/sample/grpo.parquet  (lineage: data/sample/lineage.json)"
    assert lines[1].startswith("sample  code ") and lines[1].endswith("seed 0")
    assert lines[2].startswith("│  params: defaults (") and lines[2].endswith(" values)")
    frames = next(i for i, line in enumerate(lines) if "─ JPEGImages  data/raw/synth/JPEGImages  sha256 " in line)
    assert lines[frames + 1].lstrip("│ ").startswith("└─ synth  code ")
