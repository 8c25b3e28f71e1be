"""lineage.json: deterministic, hashes inputs (cached), embeds the upstream chain, and does not move with the
git state of files the stage does not depend on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stages.core import lineage as lineage_module
from stages.core.lineage import LINEAGE_FILE, sha256_tree, write_lineage
from stages.params.ingest import IngestParams


@pytest.fixture(autouse=True)
def _own_hash_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(lineage_module.HASH_CACHE_ENV, str(tmp_path / "hash-cache.sqlite"))


def test_lineage_chains_upstream_and_is_deterministic(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.txt").write_text("hello")
    write_lineage(raw, "synth", {"seed": 1}, seed=1, counts={"videos": 2})
    out = tmp_path / "index"
    first = write_lineage(out, "ingest", IngestParams(), inputs={"root": raw}, counts={"rows": 5},
                          code_modules=["stages.core.lineage"])
    text = (out / LINEAGE_FILE).read_text()
    mtime = (out / LINEAGE_FILE).stat().st_mtime_ns
    second = write_lineage(out, "ingest", IngestParams(), inputs={"root": raw}, counts={"rows": 5},
                           code_modules=["stages.core.lineage"])
    assert first == second and (out / LINEAGE_FILE).read_text() == text
    assert (out / LINEAGE_FILE).stat().st_mtime_ns == mtime  # equal bytes are not rewritten
    record = json.loads(text)
    assert record["params"] == {"strict": True, "check_jpeg": "header", "foreground_tolerance": 0.0}
    assert record["inputs"]["root"]["upstream"]["stage"] == "synth"
    assert record["inputs"]["root"]["upstream"]["lineage"]["counts"] == {"videos": 2}
    # the folder hash: sha256 over "relative path \0 file sha256" (lineage.json excluded), known for one file
    import hashlib

    expected = hashlib.sha256(b"a.txt\0" + hashlib.sha256(b"hello").hexdigest().encode()).hexdigest()
    assert record["inputs"]["root"]["sha256"] == expected
    source = Path(lineage_module.__file__).read_bytes()
    assert record["code_version"]["sha256"] == hashlib.sha256(b"lineage.py" + source).hexdigest()


def test_tree_hash_ignores_lineage_and_sees_content(tmp_path: Path) -> None:
    (tmp_path / "x.bin").write_bytes(b"1")
    before = sha256_tree(tmp_path)
    (tmp_path / LINEAGE_FILE).write_text("{}")
    assert sha256_tree(tmp_path) == before
    (tmp_path / "x.bin").write_bytes(b"2")
    assert sha256_tree(tmp_path) != before


def test_tree_hash_is_cached_by_size_mtime_inode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    frames = tmp_path / "JPEGImages" / "v1"
    frames.mkdir(parents=True)
    for i in range(3):
        (frames / f"{i:05d}.jpg").write_bytes(bytes([i]) * 100)
        os.utime(frames / f"{i:05d}.jpg", ns=(1_000_000_000, 1_000_000_000))  # old enough to be cached
    first = sha256_tree(tmp_path / "JPEGImages")
    calls: list[Path] = []
    real = lineage_module.sha256_file
    monkeypatch.setattr(lineage_module, "sha256_file", lambda p, *a: calls.append(Path(p)) or real(p, *a))
    assert sha256_tree(tmp_path / "JPEGImages") == first and calls == []  # all three from the cache
    # same size, same inode, same mtime, other bytes: the cache answers (that is what a cache does) ...
    with open(frames / "00001.jpg", "r+b") as handle:
        handle.write(b"\xff")
    os.utime(frames / "00001.jpg", ns=(1_000_000_000, 1_000_000_000))
    assert sha256_tree(tmp_path / "JPEGImages") == first and calls == []
    # ... and a new mtime makes it hash that one file again
    os.utime(frames / "00001.jpg", ns=(2_000_000_000, 2_000_000_000))
    assert sha256_tree(tmp_path / "JPEGImages") != first and calls == [frames / "00001.jpg"]
    assert sha256_tree(tmp_path / "JPEGImages", cache=False) != first


def test_fresh_files_are_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.bin").write_bytes(b"1")  # mtime = now: a same-size rewrite could keep the key
    sha256_tree(tmp_path / "d")
    (tmp_path / "d" / "x.bin").write_bytes(b"2")
    assert sha256_tree(tmp_path / "d") == sha256_tree(tmp_path / "d", cache=False)


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t.invalid"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def test_code_version_ignores_git_state_of_other_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DVC autostages dvc.lock and users commit metrics: neither may change a stage's lineage bytes."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "lineage_probe_mod.py").write_text("X = 1\n")
    (repo / "dvc.lock").write_text("a\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "code")
    code_commit = _git(repo, "rev-parse", "HEAD").strip()[:12]
    monkeypatch.syspath_prepend(str(repo))
    monkeypatch.chdir(repo)
    sys.modules.pop("lineage_probe_mod", None)
    out = tmp_path / "out"

    def lineage_text() -> str:
        write_lineage(out, "probe", {"k": 1}, code_modules=["lineage_probe_mod"])
        return (out / LINEAGE_FILE).read_text()

    before = lineage_text()
    assert json.loads(before)["code_version"]["git"] == code_commit
    (repo / "dvc.lock").write_text("b\n")
    _git(repo, "add", "dvc.lock")  # what DVC's autostage does after a repro: the checkout is now dirty
    assert lineage_text() == before
    (repo / "metrics.json").write_text("{}")
    _git(repo, "add", "metrics.json")
    _git(repo, "commit", "-qm", "lock and metrics")  # HEAD moves
    assert lineage_text() == before
    (repo / "lineage_probe_mod.py").write_text("X = 2\n")  # the stage's own code: visible
    changed = json.loads(lineage_text())["code_version"]
    assert changed["git"] == f"{code_commit}+modified"
    assert changed["sha256"] != json.loads(before)["code_version"]["sha256"]


def test_upstream_found_two_levels_up(tmp_path: Path) -> None:
    """A checkpoint file inside a stage's output folder (models/tiny/sam2/model.pt) chains to that stage."""
    models = tmp_path / "models" / "tiny"
    (models / "sam2").mkdir(parents=True)
    (models / "sam2" / "model.pt").write_bytes(b"weights")
    write_lineage(models, "tiny_models", {"seed": 0}, seed=0)
    record = write_lineage(tmp_path / "eval", "evaluate", {}, inputs={"sam2": models / "sam2" / "model.pt",
                                                                       "alone": tmp_path / "models"})
    assert record["inputs"]["sam2"]["upstream"]["stage"] == "tiny_models"
    assert "upstream" not in record["inputs"]["alone"]  # three levels above nothing: raw data
