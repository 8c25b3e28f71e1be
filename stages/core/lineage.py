"""`lineage.json` beside every stage output: what made it, from what, with which params.

The record holds no timestamps (DVC's run-cache wants deterministic outputs); the code version is
the git commit plus a content hash of the code files the stage depends on, so an uncommitted
change is still visible.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from stages.core.typed_config import to_dict

LINEAGE_FILE = "lineage.json"


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of one file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_tree(path: Path) -> str:
    """Hex sha256 of a file, or of a folder as the sorted (relative path, file hash) pairs.

    `lineage.json` files inside the folder are skipped so that a folder's hash only depends on data.
    """
    path = Path(path)
    if path.is_file():
        return sha256_file(path)
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file() and p.name != LINEAGE_FILE):
        digest.update(file.relative_to(path).as_posix().encode())
        digest.update(b"\0")
        digest.update(sha256_file(file).encode())
    return digest.hexdigest()


def git_commit(cwd: Path | None = None) -> str:
    """`git describe --always --dirty` of the project, or "unknown" outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=12"],
            cwd=cwd, capture_output=True, text=True, timeout=10, check=True,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def code_hash(modules: Iterable[str]) -> str:
    """Content hash of the source files of the given importable module names."""
    import importlib.util

    digest = hashlib.sha256()
    for name in sorted(set(modules)):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        origin = Path(spec.origin)
        files = sorted(origin.parent.rglob("*.py")) if origin.name == "__init__.py" else [origin]
        for file in files:
            digest.update(file.name.encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()


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
        # the input's own lineage: in the folder itself, or in the stage folder holding it
        # (data/keyframes/eval.parquet, models/sft/merged)
        candidates = ([path / LINEAGE_FILE] if path.is_dir() else []) + [path.parent / LINEAGE_FILE]
        upstream_file = next((c for c in candidates if c.is_file()), candidates[0])
        record: dict[str, Any] = {"path": path.as_posix(), "sha256": sha256_tree(path)}
        if upstream_file.is_file() and upstream_file.parent.resolve() != out_dir.resolve():
            upstream = json.loads(upstream_file.read_text())
            record["upstream"] = {"stage": upstream.get("stage"), "lineage": upstream}
        input_records[name] = record
    lineage = {
        "stage": stage,
        "code_version": {"git": git_commit(), "sha256": code_hash(code_modules)},
        "params": to_dict(params),
        "seed": seed,
        "inputs": input_records,
        "counts": dict(sorted((counts or {}).items())),
        **({"extra": to_dict(dict(extra))} if extra else {}),
    }
    (out_dir / LINEAGE_FILE).write_text(json.dumps(lineage, indent=1, sort_keys=True, default=str) + "\n")
    return lineage
