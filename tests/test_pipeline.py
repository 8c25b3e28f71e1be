"""End to end through real DVC and a real Prefect server, in a throwaway git repository:
`dvc repro` of the data stages, determinism, experiments that rerun exactly what is downstream,
push / pull through a local remote, and lineage from the outputs.

The tests of this module share one repository and run in file order.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest

from stages.core.lineage import sha256_tree
from tests.pipeline_repo import dvc, make_repo, sh

DATA_STAGES = ["synth", "ingest"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, project_root: Path, prefect_api: str) -> Path:
    """A fresh git + DVC copy of the project with `dvc repro ingest` done."""
    dest = make_repo(project_root, tmp_path_factory.mktemp("pipeline") / "repo")
    dvc(dest, "repro", "ingest")
    return dest


def test_repro_builds_validated_index(repo: Path) -> None:
    from schemas.index import ExpressionsSchema, TracksSchema, VideosSchema
    from stages.core.io import read_table

    index = repo / "data" / "index"
    videos = read_table(index / "videos.parquet", VideosSchema)
    expressions = read_table(index / "expressions.parquet", ExpressionsSchema)
    tracks = read_table(index / "tracks.parquet", TracksSchema)
    assert set(videos["split"]) == {"train", "valid"}
    assert set(expressions["type"]) == {"referring", "reasoning", "no_target"}
    assert len(tracks) > 0 and (tracks["area"] > 0).any()
    metrics = json.loads((repo / "metrics" / "ingest.json").read_text())
    assert metrics  # DVC metric written
    assert "Stage 'ingest' didn't change" in dvc(repo, "repro", "ingest")


def test_repro_is_deterministic(repo: Path, tmp_path: Path, project_root: Path) -> None:
    other = make_repo(project_root, tmp_path / "again")
    dvc(other, "repro", "ingest")
    for table in ["videos", "expressions", "tracks", "quarantine"]:
        a = pd.read_parquet(repo / "data" / "index" / f"{table}.parquet")
        b = pd.read_parquet(other / "data" / "index" / f"{table}.parquet")
        pd.testing.assert_frame_equal(a, b)
    # byte-identical outputs; lineage.json differs only in the git commit of the two throwaway repos
    for folder in ["data/raw/synth", "data/index"]:
        assert sha256_tree(repo / folder) == sha256_tree(other / folder)
        a, b = (re.sub(r'"git": "[^"]*"', "", (r / folder / "lineage.json").read_text()) for r in (repo, other))
        assert a == b


def test_lineage_cli_reaches_raw_data(repo: Path) -> None:
    out = sh([sys.executable, "-m", "flows.cli", "lineage", "data/index/tracks.parquet"], repo)
    assert out.index("ingest") < out.index("synth")


def test_experiment_reruns_exactly_downstream(repo: Path) -> None:
    output = dvc(repo, "exp", "run", "-S", "ingest.check_jpeg=header", "ingest")
    assert "Stage 'synth' didn't change, skipping" in output
    assert "Running stage 'ingest'" in output
    shown = dvc(repo, "exp", "show", "--json")
    assert "check_jpeg" in shown
    diff = dvc(repo, "params", "diff", "--all")
    assert "ingest.check_jpeg" in diff


def test_push_pull_round_trip(repo: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    remote.mkdir()
    dvc(repo, "repro", "ingest")
    dvc(repo, "remote", "add", "-d", "-f", "storage", str(remote))
    sh(["git", "add", "-A"], repo)
    sh(["git", "commit", "-qm", "results", "--allow-empty"], repo)
    dvc(repo, "push")
    clone = tmp_path / "clone"
    sh(["git", "clone", "-q", str(repo), str(clone)], tmp_path)
    dvc(clone, "pull", "--with-deps", "ingest")  # the stages run so far (the rest of the DAG has no lock entry yet)
    tracks = pd.read_parquet(clone / "data" / "index" / "tracks.parquet")
    pd.testing.assert_frame_equal(tracks, pd.read_parquet(repo / "data" / "index" / "tracks.parquet"))
    status = dvc(clone, "status", "--with-deps", "ingest")
    assert "up to date" in status, status
    assert "didn't change" in dvc(clone, "repro", "ingest")
