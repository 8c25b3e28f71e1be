"""lineage.json pinned for the mutation run (scripts/mutation.sh lineage, docs/testing.md): where the hash cache
lives, its schema and when it is used or bypassed, which files make a module's code version, what git says (and
what it says when git cannot answer), and the exact bytes of a lineage record."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import types
from pathlib import Path

import pytest

from stages.core import lineage as lineage_module
from stages.core.lineage import (
    HASH_CACHE_ENV,
    LINEAGE_FILE,
    RACY_NS,
    code_hash,
    git_code_commit,
    git_commit,
    hash_cache_path,
    sha256_file,
    sha256_tree,
    write_lineage,
)

EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"  # sha256 of no bytes
OLD_NS = 1_000_000_000  # an mtime (1 s after the epoch) old enough for the cache


@pytest.fixture(autouse=True)
def _own_hash_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HASH_CACHE_ENV, str(tmp_path / "hash-cache.sqlite"))


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t.invalid"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def _repo(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "first")
    return root


def _fake_git(folder: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    """A `git` first on PATH (before any earlier fake) that runs `script` (sh) instead of git."""
    folder.mkdir()
    (folder / "git").write_text("#!/bin/sh\n" + script + "\n")
    (folder / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


def _cached_rows(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT path, size, mtime_ns, inode, sha256 FROM files ORDER BY path").fetchall()


# ---------------------------------------------------------------- sha256_file


def test_sha256_file_reads_in_chunks_of_at_most_chunk_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = bytes(range(256)) * 40  # 10240 bytes
    (tmp_path / "f.bin").write_bytes(data)
    sizes: list[int | None] = []

    class Recording:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def read(self, size=-1):
            sizes.append(size)
            return self.handle.read(size)

    monkeypatch.setattr(lineage_module, "open", lambda p, mode: Recording(open(p, mode)), raising=False)
    assert sha256_file(tmp_path / "f.bin", chunk=4096) == hashlib.sha256(data).hexdigest()
    assert sizes == [4096, 4096, 4096, 4096]  # 4096 + 4096 + 2048 + the empty read that ends the loop


# ---------------------------------------------------------------- hash_cache_path


def test_hash_cache_path_from_env_xdg_or_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HASH_CACHE_ENV, str(tmp_path / "mine.sqlite"))
    assert hash_cache_path() == tmp_path / "mine.sqlite"
    for off in ("off", "OFF", "Off"):
        monkeypatch.setenv(HASH_CACHE_ENV, off)
        assert hash_cache_path() is None
    monkeypatch.setenv(HASH_CACHE_ENV, "")  # empty: as if unset
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hash_cache_path() == tmp_path / "xdg" / "vrsflow" / "sha256.sqlite"
    monkeypatch.delenv(HASH_CACHE_ENV)
    assert hash_cache_path() == tmp_path / "xdg" / "vrsflow" / "sha256.sqlite"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert hash_cache_path() == tmp_path / "home" / ".cache" / "vrsflow" / "sha256.sqlite"
    monkeypatch.setenv("XDG_CACHE_HOME", "")  # empty: as if unset (XDG base directory spec)
    assert hash_cache_path() == tmp_path / "home" / ".cache" / "vrsflow" / "sha256.sqlite"


# ---------------------------------------------------------------- the cache itself


def _old_files(folder: Path, contents: dict[str, bytes]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in contents.items():
        (folder / name).write_bytes(data)
        os.utime(folder / name, ns=(OLD_NS, OLD_NS))


def _tree_oracle(folder: Path, contents: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for name in sorted(contents):
        digest.update(name.encode() + b"\0" + hashlib.sha256(contents[name]).hexdigest().encode())
    return digest.hexdigest()


def test_cache_file_made_in_new_folders_with_its_schema_and_busy_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache (~/.cache/vrsflow/sha256.sqlite, shared by every checkout and version) is created with its
    folders, holds table files(path PK, size, mtime_ns, inode, sha256), waits 30 s for another writer's lock."""
    db = tmp_path / "new" / "deeper" / "sha256.sqlite"
    monkeypatch.setenv(HASH_CACHE_ENV, str(db))
    contents = {"a.bin": b"alpha", "b.bin": b"beta"}
    _old_files(tmp_path / "data", contents)
    assert sha256_tree(tmp_path / "data") == _tree_oracle(tmp_path / "data", contents)
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA table_info(files)").fetchall() == [
            (0, "path", "TEXT", 0, None, 1), (1, "size", "INTEGER", 0, None, 0),
            (2, "mtime_ns", "INTEGER", 0, None, 0), (3, "inode", "INTEGER", 0, None, 0),
            (4, "sha256", "TEXT", 0, None, 0)]
    data = (tmp_path / "data").resolve()
    assert _cached_rows(db) == [
        (str(data / name), len(contents[name]), OLD_NS, (data / name).stat().st_ino,
         hashlib.sha256(contents[name]).hexdigest()) for name in sorted(contents)]
    cache = lineage_module._HashCache(db)
    try:
        assert cache.db.execute("PRAGMA busy_timeout").fetchone() == (30_000,)
        # lookup answers exactly the rows under the prefix
        assert cache.lookup(str(data) + os.sep) == {
            str(data / name): (len(contents[name]), OLD_NS, (data / name).stat().st_ino,
                               hashlib.sha256(contents[name]).hexdigest()) for name in contents}
        assert cache.lookup(str(tmp_path / "elsewhere") + os.sep) == {}
    finally:
        cache.close()


def test_unusable_cache_location_is_silently_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv(HASH_CACHE_ENV, str(tmp_path / "a-file" / "sha256.sqlite"))  # its parent cannot be made
    contents = {"x.bin": b"x"}
    _old_files(tmp_path / "data", contents)
    assert sha256_tree(tmp_path / "data") == _tree_oracle(tmp_path / "data", contents)
    cache = lineage_module._HashCache(tmp_path / "a-file" / "sha256.sqlite")
    assert cache.db is None and cache.lookup("/") == {}
    cache.store([("/x", 1, 2, 3, "h")])
    cache.close()


def test_cache_false_neither_reads_nor_writes_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "hash-cache.sqlite"
    contents = {"x.bin": b"one"}
    _old_files(tmp_path / "data", contents)
    assert sha256_tree(tmp_path / "data", cache=False) == _tree_oracle(tmp_path / "data", contents)
    assert not db.exists()  # not written
    sha256_tree(tmp_path / "data")  # now cached ...
    with open(tmp_path / "data" / "x.bin", "r+b") as handle:  # ... and rewritten under the same key
        handle.write(b"two")
    os.utime(tmp_path / "data" / "x.bin", ns=(OLD_NS, OLD_NS))
    assert sha256_tree(tmp_path / "data") == _tree_oracle(tmp_path / "data", contents)  # the cache answers
    assert sha256_tree(tmp_path / "data", cache=False) == _tree_oracle(tmp_path / "data", {"x.bin": b"two"})


def test_a_file_is_cached_only_when_older_than_racy_ns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Modified exactly RACY_NS before it is hashed: not cached; one nanosecond earlier: cached."""
    db = tmp_path / "hash-cache.sqlite"
    _old_files(tmp_path / "data", {"x.bin": b"x"})
    monkeypatch.setattr(lineage_module, "time", types.SimpleNamespace(time_ns=lambda: OLD_NS + RACY_NS))
    sha256_tree(tmp_path / "data")
    assert _cached_rows(db) == []
    monkeypatch.setattr(lineage_module, "time", types.SimpleNamespace(time_ns=lambda: OLD_NS + RACY_NS + 1))
    sha256_tree(tmp_path / "data")
    assert [row[0] for row in _cached_rows(db)] == [str((tmp_path / "data" / "x.bin").resolve())]


# ---------------------------------------------------------------- which files are the code


def test_module_files_of_packages_modules_and_missing_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "lin_probe_pkg"
    (pkg / "sub").mkdir(parents=True)
    for name in ("__init__.py", "b.py", "a.py", "sub/c.py", "notes.txt", "sub/data.json"):
        (pkg / name).write_text(f"# {name}\n")
    (tmp_path / "lin_probe_mod.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    files = lineage_module._module_files(["lin_probe_mod", "aaa_no_such_module", "lin_probe_pkg", "lin_probe_mod"])
    # sorted unique names; a package is every .py below its folder (sorted); a missing name is skipped
    assert files == [tmp_path / "lin_probe_mod.py", pkg / "__init__.py", pkg / "a.py", pkg / "b.py",
                     pkg / "sub" / "c.py"]
    assert lineage_module._module_files(["aaa_no_such_module"]) == []
    expected = hashlib.sha256()
    for file in files:
        expected.update(file.name.encode() + file.read_bytes())
    assert code_hash(["lin_probe_pkg", "lin_probe_mod", "aaa_no_such_module"]) == expected.hexdigest()
    assert code_hash([]) == EMPTY_SHA256


# ---------------------------------------------------------------- git_code_commit


def test_git_code_commit_states(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _repo(tmp_path / "repo", {"pkg/__init__.py": "", "pkg/m.py": "X = 1\n"})
    head = _git(repo, "rev-parse", "HEAD").strip()
    monkeypatch.chdir(tmp_path)  # not a checkout: git must run where the files are
    files = [repo / "pkg" / "__init__.py", repo / "pkg" / "m.py"]
    assert git_code_commit(files) == head[:12]
    assert git_code_commit([]) == "unknown"
    # an untracked file of the code counts as a modification, even where git hides untracked files by default
    _git(repo, "config", "status.showUntrackedFiles", "no")
    (repo / "pkg" / "new.py").write_text("Y = 1\n")
    assert git_code_commit([*files, repo / "pkg" / "new.py"]) == head[:12] + "+modified"
    assert git_code_commit([repo / "pkg" / "new.py"]) == "uncommitted"  # never committed
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "m.py").write_text("X = 1\n")
    assert git_code_commit([tmp_path / "plain" / "m.py"]) == "unknown"  # outside a checkout


def test_git_code_commit_is_the_last_commit_of_those_files(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo", {"m.py": "X = 1\n", "other.txt": "a\n"})
    (repo / "m.py").write_text("X = 2\n")
    _git(repo, "commit", "-qam", "second")
    second = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "other.txt").write_text("b\n")
    _git(repo, "commit", "-qam", "third")
    assert git_code_commit([repo / "m.py"]) == second[:12]


def test_git_calls_are_checked_and_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _repo(tmp_path / "repo", {"m.py": "X = 1\n"})
    seen: list[tuple[list[str], dict]] = []
    real_run = subprocess.run

    def spy(cmd, **kwargs):
        seen.append((list(cmd), kwargs))
        return real_run(cmd, **kwargs)

    monkeypatch.setattr(lineage_module.subprocess, "run", spy)
    git_code_commit([repo / "m.py"])
    git_commit(repo)
    assert [(cmd[:2], kw["timeout"], kw["check"]) for cmd, kw in seen] == [
        (["git", "log"], 30, True), (["git", "status"], 30, True), (["git", "describe"], 10, True)]

    def hanging(cmd, **kwargs):
        raise subprocess.TimeoutExpired(cmd, kwargs.get("timeout"))

    monkeypatch.setattr(lineage_module.subprocess, "run", hanging)
    assert git_code_commit([repo / "m.py"]) == "unknown"
    assert git_commit(repo) == "unknown"


# ---------------------------------------------------------------- git_commit


def test_git_commit_describes_the_given_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _repo(tmp_path / "repo", {"m.py": "X = 1\n"})
    head = _git(repo, "rev-parse", "HEAD").strip()
    monkeypatch.chdir(tmp_path)  # not a checkout
    assert git_commit(repo) == head[:12]
    (repo / "m.py").write_text("X = 2\n")
    assert git_commit(repo) == head[:12] + "-dirty"
    _git(repo, "tag", "-a", "v1.0", "-m", "v1.0")  # describe names annotated tags
    assert git_commit(repo) == "v1.0-dirty"
    assert git_commit(tmp_path) == "unknown"  # outside a checkout
    assert git_commit() == "unknown"  # the working folder (tmp_path)
    monkeypatch.chdir(repo)
    assert git_commit() == "v1.0-dirty"
    _git(repo, "init", "-q", str(tmp_path / "empty"))
    assert git_commit(tmp_path / "empty") == "unknown"  # no commit yet


def test_git_commit_when_git_misbehaves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A git that fails is "unknown" whatever it printed; one that prints nothing names nothing: "unknown"."""
    _fake_git(tmp_path / "bin-fails", monkeypatch, "echo abc123; exit 1")
    assert git_commit(tmp_path) == "unknown"
    _fake_git(tmp_path / "bin-silent", monkeypatch, "exit 0")
    assert git_commit(tmp_path) == "unknown"
    _fake_git(tmp_path / "bin-says", monkeypatch, "echo ' v2-3-gabc '")
    assert git_commit(tmp_path) == "v2-3-gabc"


# ---------------------------------------------------------------- the record's bytes


def test_lineage_text_exactly(tmp_path: Path) -> None:
    """One-space indent, sorted keys, a final newline; inputs by path and hash; extra converted (dataclasses
    to dicts) with other values written as str; written into folders made on the way."""
    (tmp_path / "in.txt").write_text("hi")
    out = tmp_path / "new" / "stage" / "out"
    record = write_lineage(out, "probe", {"z": 1, "a": [1, 2]}, inputs={"src": tmp_path / "in.txt"}, seed=7,
                           counts={"rows": 3, "b": 1}, extra={"when": Path("x/y"), "n": 2})
    in_sha = hashlib.sha256(b"hi").hexdigest()
    expected = (
        '{\n'
        ' "code_version": {\n'
        '  "git": "unknown",\n'
        f'  "sha256": "{EMPTY_SHA256}"\n'
        ' },\n'
        ' "counts": {\n'
        '  "b": 1,\n'
        '  "rows": 3\n'
        ' },\n'
        ' "extra": {\n'
        '  "n": 2,\n'
        '  "when": "x/y"\n'
        ' },\n'
        ' "inputs": {\n'
        '  "src": {\n'
        f'   "path": "{(tmp_path / "in.txt").as_posix()}",\n'
        f'   "sha256": "{in_sha}"\n'
        '  }\n'
        ' },\n'
        ' "params": {\n'
        '  "a": [\n'
        '   1,\n'
        '   2\n'
        '  ],\n'
        '  "z": 1\n'
        ' },\n'
        ' "seed": 7,\n'
        ' "stage": "probe"\n'
        '}\n'
    )
    assert (out / LINEAGE_FILE).read_text() == expected
    assert record["seed"] == 7 and record["inputs"]["src"]["path"] == (tmp_path / "in.txt").as_posix()
    assert record["extra"] == {"when": Path("x/y"), "n": 2}
    write_lineage(tmp_path / "plain", "probe", {}, extra={})
    plain = json.loads((tmp_path / "plain" / LINEAGE_FILE).read_text())
    assert "extra" not in plain and plain["seed"] is None and plain["counts"] == {} and plain["inputs"] == {}
