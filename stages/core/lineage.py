"""`lineage.json` beside every stage output: what made it, from what, with which params.

The record holds only things that follow from the stage's inputs, so that forcing a stage whose results
come out equal rewrites the same bytes and DVC leaves everything downstream up to date:

- no timestamps;
- the code version is a content hash of the source files the stage imports, plus the git commit that
  last changed *those files* (`git log -1 -- <files>`) and whether they carry uncommitted edits. The
  commit of the checkout itself (`git describe --dirty`) is deliberately not recorded: it moves whenever
  dvc.lock or a metrics file is committed or staged (DVC autostages dvc.lock), which says nothing
  about how the output was made;
- inputs by content hash. Folders (e.g. ReVOS's `JPEGImages/`, tens of GB) are hashed file by file with
  a cache keyed by (path, size, mtime, inode) — the same idea as DVC's state database — so a folder is
  read once and later runs only `stat` it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from stages.core.typed_config import to_dict

LINEAGE_FILE = "lineage.json"
HASH_CACHE_ENV = "VRSFLOW_HASH_CACHE"  # path of the file-hash cache (sqlite); "off" disables it
# a file modified less than this long before it is hashed is not cached: a rewrite of the same size within the
# file system's timestamp granularity would keep its (size, mtime, inode) key (git's "racy" entries)
RACY_NS = 2_000_000_000
UPSTREAM_LEVELS = 2  # parent folders searched for an input's lineage.json


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of one file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def hash_cache_path() -> Path | None:
    """Where file hashes are cached: $VRSFLOW_HASH_CACHE, else $XDG_CACHE_HOME (~/.cache)/vrsflow/sha256.sqlite."""
    configured = os.environ.get(HASH_CACHE_ENV, "")
    if configured.lower() == "off":
        return None
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vrsflow" / "sha256.sqlite"


class _HashCache:
    """sha256 of files keyed by (absolute path, size, mtime_ns, inode); silently off when unusable."""

    def __init__(self, path: Path | None) -> None:
        self.db: sqlite3.Connection | None = None
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(path, timeout=30)
            self.db.execute("CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, size INTEGER, "
                            "mtime_ns INTEGER, inode INTEGER, sha256 TEXT)")
        except (OSError, sqlite3.Error):
            self.db = None

    def lookup(self, prefix: str) -> dict[str, tuple[int, int, int, str]]:
        if self.db is None:
            return {}
        try:
            rows = self.db.execute("SELECT path, size, mtime_ns, inode, sha256 FROM files WHERE path >= ? AND "
                                   "path < ?", (prefix, prefix + "\uffff")).fetchall()
        except sqlite3.Error:
            return {}
        return {row[0]: tuple(row[1:]) for row in rows}

    def store(self, rows: list[tuple[str, int, int, int, str]]) -> None:
        if self.db is None or not rows:
            return
        try:
            with self.db:
                self.db.executemany("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?)", rows)
        except sqlite3.Error:
            pass

    def close(self) -> None:
        if self.db is not None:
            self.db.close()


def sha256_tree(path: Path, cache: bool = True) -> str:
    """Hex sha256 of a file, or of a folder as the sorted (relative path, file hash) pairs.

    `lineage.json` files inside the folder are skipped so that a folder's hash only depends on data.
    File hashes come from the cache (`hash_cache_path`) when the file's size, mtime and inode are
    unchanged since it was last hashed.
    """
    path = Path(path)
    if path.is_file():
        return sha256_file(path)
    store = _HashCache(hash_cache_path() if cache else None)
    try:
        root = str(path.resolve())
        known = store.lookup(root + os.sep)
        digest = hashlib.sha256()
        fresh = []
        for file in sorted(p for p in path.rglob("*") if p.is_file() and p.name != LINEAGE_FILE):
            stat = file.stat()
            key = str(file.resolve())
            hit = known.get(key)
            if hit is not None and hit[:3] == (stat.st_size, stat.st_mtime_ns, stat.st_ino):
                file_hash = hit[3]
            else:
                file_hash = sha256_file(file)
                if time.time_ns() - stat.st_mtime_ns > RACY_NS:
                    fresh.append((key, stat.st_size, stat.st_mtime_ns, stat.st_ino, file_hash))
            digest.update(file.relative_to(path).as_posix().encode())
            digest.update(b"\0")
            digest.update(file_hash.encode())
        store.store(fresh)
    finally:
        store.close()
    return digest.hexdigest()


def _module_files(modules: Iterable[str]) -> list[Path]:
    import importlib.util

    files: list[Path] = []
    for name in sorted(set(modules)):
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.has_location:  # built-in, frozen or a namespace package: no source file to hash
            continue
        origin = Path(spec.origin)
        files += sorted(origin.parent.rglob("*.py")) if origin.name == "__init__.py" else [origin]
    return files


def code_hash(modules: Iterable[str]) -> str:
    """Content hash of the source files of the given importable module names."""
    digest = hashlib.sha256()
    for file in _module_files(modules):
        digest.update(file.name.encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


def git_code_commit(files: Iterable[Path]) -> str:
    """The commit that last changed `files` (12 hex digits), "+modified" when they differ from it;
    "unknown" outside a git checkout. Commits and staged changes of other files never change it."""
    files = [Path(f).resolve() for f in files]
    if not files:
        return "unknown"
    cwd = Path(os.path.commonpath([f.parent for f in files]))
    try:
        def git(*args: str) -> str:
            return subprocess.run(["git", *args, "--", *map(str, files)], cwd=cwd, capture_output=True, text=True,
                                  timeout=30, check=True).stdout.strip()

        commit = git("log", "-1", "--format=%H")[:12]
        modified = bool(git("status", "--porcelain", "--untracked-files=all"))
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if not commit:
        return "uncommitted"
    return commit + ("+modified" if modified else "")


def git_commit(cwd: Path | None = None) -> str:
    """`git describe --always --dirty` of a checkout, or "unknown" outside one (for reports, not lineage)."""
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=12"],
            cwd=cwd, capture_output=True, text=True, timeout=10, check=True,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def write_lineage(
    out_dir: Path,
    stage: str,
    params: Any,
    inputs: Mapping[str, Path] | None = None,
    seed: int | None = None,
    counts: Mapping[str, int] | None = None,
    code_modules: Iterable[str] = (),
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write `out_dir/lineage.json` and return the record.

    Args:
        out_dir: the stage's output folder.
        stage: stage name (= dvc stage = params block).
        params: the params objects the stage used (dataclasses or a mapping of them).
        inputs: name → path of every input; each is hashed, and an input's own lineage.json (if any)
            is embedded as `upstream`, so the chain back to the raw data can be read from any output.
        seed: the seed the stage used.
        counts: row counts of the outputs.
        code_modules: importable module names whose source hash identifies the code version.
        extra: anything else worth recording (teacher model, template counts, shard checksums).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    input_records = {}
    for name, path in sorted((inputs or {}).items()):
        path = Path(path)
        # the input's own lineage: in the folder itself, or in the stage folder holding it, one or two levels
        # up (data/keyframes/eval.parquet, models/sft/merged, models/tiny/sam2/model.pt)
        candidates = ([path / LINEAGE_FILE] if path.is_dir() else []) + [
            folder / LINEAGE_FILE for folder in list(path.parents)[:UPSTREAM_LEVELS]]
        upstream_file = next((c for c in candidates if c.is_file()), None)
        record: dict[str, Any] = {"path": path.as_posix(), "sha256": sha256_tree(path)}
        if upstream_file is not None and upstream_file.parent.resolve() != out_dir.resolve():
            upstream = json.loads(upstream_file.read_text())
            record["upstream"] = {"stage": upstream.get("stage"), "lineage": upstream}
        input_records[name] = record
    code_modules = list(code_modules)
    lineage = {
        "stage": stage,
        "code_version": {"git": git_code_commit(_module_files(code_modules)), "sha256": code_hash(code_modules)},
        "params": to_dict(params),
        "seed": seed,
        "inputs": input_records,
        "counts": dict(sorted((counts or {}).items())),
        **({"extra": to_dict(dict(extra))} if extra else {}),
    }
    text = json.dumps(lineage, indent=1, sort_keys=True, default=str) + "\n"
    target = out_dir / LINEAGE_FILE
    if not target.is_file() or target.read_text() != text:  # equal bytes: leave the file (and its mtime) alone
        target.write_text(text)
    return lineage
