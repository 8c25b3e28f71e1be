"""Model cards and the lineage chain: from any output back to the raw data.

`lineage.json` files embed their inputs' lineage (see `stages.core.lineage`), so the chain of any
output can be read from the output alone. `format_chain` renders it; `write_model_card` puts it, with
the metrics, into a checkpoint folder's README.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stages.core.io import atomic_write_text
from stages.core.lineage import LINEAGE_FILE


class LineageNotFound(FileNotFoundError):
    """No lineage.json at or above the given path (inside the project)."""


def find_lineage(path: Path) -> Path:
    """The lineage.json describing `path`: the file itself, the one in the folder, or in a parent folder.

    Raises:
        LineageNotFound: when none exists up to the filesystem root.
    """
    path = Path(path).resolve()
    if path.name == LINEAGE_FILE and path.is_file():
        return path
    for folder in [path, *path.parents] if path.is_dir() else list(path.parents):
        candidate = folder / LINEAGE_FILE
        if candidate.is_file():
            return candidate
    raise LineageNotFound(f"{path}: no {LINEAGE_FILE} here or in a parent folder (was it made by a vrsflow stage?)")


def walk_chain(lineage: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Flatten a lineage record into a list of stages, from the given output back to the raw data.

    Each entry: stage, depth, code version, params, seed, counts, and the inputs (name, path, sha256).
    A stage reached through several inputs is listed once (first, shallowest occurrence).
    """
    chain: list[dict[str, Any]] = []
    seen: set[str] = set()
    frontier: list[tuple[Mapping[str, Any], int]] = [(lineage, 0)]
    while frontier:
        record, depth = frontier.pop(0)
        fingerprint = json.dumps(record, sort_keys=True, default=str)
        if fingerprint in seen:
            continue
        seen.add(fingerprint)
        inputs = record.get("inputs", {})
        chain.append({
            "stage": record.get("stage"),
            "depth": depth,
            "code_version": record.get("code_version", {}),
            "params": record.get("params", {}),
            "seed": record.get("seed"),
            "counts": record.get("counts", {}),
            "extra": record.get("extra", {}),
            "inputs": {name: {"path": item.get("path"), "sha256": item.get("sha256")} for name, item in inputs.items()},
        })
        for item in inputs.values():
            upstream = item.get("upstream")
            if upstream and upstream.get("lineage"):
                frontier.append((upstream["lineage"], depth + 1))
    return chain


def format_chain(lineage: Mapping[str, Any]) -> str:
    """Human-readable chain: one block per stage, indented by distance from the output."""
    lines = []
    for entry in walk_chain(lineage):
        pad = "  " * entry["depth"]
        code = entry["code_version"]
        short_hash = str(code.get("sha256", "?"))[:12]
        lines.append(f"{pad}{entry['stage']}  (code {code.get('git', '?')}, sha256 {short_hash})")
        if entry["seed"] is not None:
            lines.append(f"{pad}  seed: {entry['seed']}")
        if entry["params"]:
            lines.append(f"{pad}  params: {json.dumps(entry['params'], sort_keys=True)}")
        for name, item in sorted(entry["inputs"].items()):
            lines.append(f"{pad}  input {name}: {item['path']} sha256 {str(item['sha256'])[:16]}")
        if entry["counts"]:
            lines.append(f"{pad}  counts: {json.dumps(entry['counts'], sort_keys=True)}")
        if entry["extra"]:
            lines.append(f"{pad}  extra: {json.dumps(entry['extra'], sort_keys=True)[:2000]}")
    return "\n".join(lines)


def raw_data_hashes(lineage: Mapping[str, Any]) -> dict[str, str]:
    """sha256 of every input that has no upstream lineage — the raw data at the root of the chain."""
    hashes: dict[str, str] = {}
    for entry_record in _records(lineage):
        for item in entry_record.get("inputs", {}).values():
            if not item.get("upstream") and item.get("sha256"):
                hashes[item["path"]] = item["sha256"]
    return dict(sorted(hashes.items()))


def _records(lineage: Mapping[str, Any]):
    yield lineage
    for item in lineage.get("inputs", {}).values():
        upstream = item.get("upstream")
        if upstream and upstream.get("lineage"):
            yield from _records(upstream["lineage"])


def write_model_card(model_dir: Path, title: str, metrics: Mapping[str, Any] | None = None) -> Path:
    """Write `model_dir/README.md`: what the model is, its metrics and the lineage chain to the raw data.

    Reads `model_dir/lineage.json` (write it first with `write_lineage`).
    """
    model_dir = Path(model_dir)
    lineage = json.loads((model_dir / LINEAGE_FILE).read_text())
    chain = walk_chain(lineage)
    parts = [
        f"# {title}",
        "",
        "Produced by vrsflow. Everything below is read from `lineage.json` in this folder; "
        "`vrsflow lineage <this folder>` prints the same chain.",
        "",
        "## Raw data",
        "",
    ]
    parts += [f"- `{path}`: sha256 `{digest}`" for path, digest in raw_data_hashes(lineage).items()] or ["- (none)"]
    if metrics:
        parts += ["", "## Metrics", "", "| metric | value |", "|---|---|"]
        parts += [f"| {k} | {v} |" for k, v in sorted(_flatten(metrics).items())]
    parts += ["", "## Stages (this model first, raw data last)", ""]
    for entry in chain:
        code = entry["code_version"]
        parts.append(f"### {entry['stage']}")
        parts.append("")
        parts.append(f"- code: git `{code.get('git', '?')}`, sha256 `{code.get('sha256', '?')}`")
        if entry["seed"] is not None:
            parts.append(f"- seed: {entry['seed']}")
        parts.append(f"- params: `{json.dumps(entry['params'], sort_keys=True)}`")
        for name, item in sorted(entry["inputs"].items()):
            parts.append(f"- input `{name}`: `{item['path']}` sha256 `{item['sha256']}`")
        if entry["counts"]:
            parts.append(f"- counts: `{json.dumps(entry['counts'], sort_keys=True)}`")
        if entry["extra"]:
            parts.append(f"- details: `{json.dumps(entry['extra'], sort_keys=True)}`")
        parts.append("")
    card = model_dir / "README.md"
    atomic_write_text(card, "\n".join(parts) + "\n")
    return card


def _flatten(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat
