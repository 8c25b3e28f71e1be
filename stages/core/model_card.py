"""Model cards and the lineage chain: from any output back to the raw data.

`lineage.json` files embed their inputs' lineage (see `stages.core.lineage`), so the chain of any
output can be read from the output alone. `format_chain` renders it as a tree (params as differences
from the defaults the caller gives: `stages.params.default_params()`; the core cannot import the stages' blocks
itself); `write_model_card` puts it, with the metrics and the raw data
at the roots of the chain, into a checkpoint folder's README.md. `find_lineage` answers for any file a
stage wrote, including outputs outside a folder with a lineage.json (e.g. `reports/eval.md`), through the
stage's outs in dvc.yaml.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from stages.core.io import atomic_write_text
from stages.core.lineage import LINEAGE_FILE
from stages.core.report import is_timing, summary_line

VALUE_CHARS = 60  # longest value printed in a params difference or an extra field
COUNTS_CHARS = 90  # longest counts line (then "(+n more)")


class LineageNotFound(FileNotFoundError):
    """No lineage.json describes the given path."""


def find_lineage(path: Path, project_dir: Path | None = None) -> Path:
    """The lineage.json describing `path`.

    Looked for in order: the file itself; the folder or a parent folder; else the stage that lists `path`
    (or a folder holding it) among its outs, metrics or plots in `dvc.yaml` (`project_dir`, default: the
    nearest folder above `path` or the working directory that has one) — its lineage.json is the one in its
    output folders.

    Raises:
        LineageNotFound: when none of these exists.
    """
    path = Path(path).resolve()
    if path.name == LINEAGE_FILE and path.is_file():
        return path
    for folder in [path, *path.parents] if path.is_dir() else list(path.parents):
        candidate = folder / LINEAGE_FILE
        if candidate.is_file():
            return candidate
    found = _lineage_from_dvc_yaml(path, project_dir)
    if found is not None:
        return found
    raise LineageNotFound(f"{path}: no {LINEAGE_FILE} here or in a parent folder, and no dvc.yaml stage lists it "
                          f"as an output (was it made by a vrsflow stage, and has the stage run?)")


def _project_dir(path: Path, project_dir: Path | None) -> Path | None:
    if project_dir is not None:
        return Path(project_dir).resolve()
    for folder in [*path.parents, Path.cwd(), *Path.cwd().parents]:
        if (folder / "dvc.yaml").is_file():
            return folder
    return None


def interpolate(text: str, params: Mapping[str, Any]) -> str:
    """`${a.b}` in dvc.yaml text replaced by params["a"]["b"] (left as is when params lack it)."""
    def value(match: re.Match[str]) -> str:
        node: Any = params
        for key in match.group(1).strip().split("."):
            node = node.get(key) if isinstance(node, Mapping) else None
        return str(node) if node is not None else match.group(0)

    return re.sub(r"\$\{([^}]+)\}", value, text)


def stage_outputs(project_dir: Path) -> dict[str, list[str]]:
    """stage name → the outs, metrics and plots paths of that stage in `project_dir/dvc.yaml` (params
    interpolated from params.yaml), relative to the project."""
    dvc_yaml = yaml.safe_load((project_dir / "dvc.yaml").read_text()) or {}
    params_file = project_dir / "params.yaml"
    params = (yaml.safe_load(params_file.read_text()) or {}) if params_file.is_file() else {}
    result: dict[str, list[str]] = {}
    for name, stage in (dvc_yaml.get("stages") or {}).items():
        paths = []
        for section in ("outs", "metrics", "plots"):
            for entry in stage.get(section) or []:
                entry = next(iter(entry)) if isinstance(entry, Mapping) else entry
                paths.append(interpolate(str(entry), params).rstrip("/"))
        result[name] = paths
    return result


def _lineage_from_dvc_yaml(path: Path, project_dir: Path | None) -> Path | None:
    project = _project_dir(path, project_dir)
    if project is None:
        return None
    try:
        outputs = stage_outputs(project)
    except (OSError, yaml.YAMLError, AttributeError):
        return None
    for stage, paths in outputs.items():
        owned = any(path == (project / p).resolve() or (project / p).resolve() in path.parents for p in paths)
        if not owned:
            continue
        for p in paths:
            out = (project / p).resolve()
            for candidate in (out / LINEAGE_FILE, out.parent / LINEAGE_FILE):
                if candidate.is_file() and _stage_of(candidate) == stage:
                    return candidate
    return None


def _stage_of(lineage_file: Path) -> str | None:
    try:
        return json.loads(lineage_file.read_text()).get("stage")
    except (OSError, ValueError):
        return None


def _fingerprint(record: Mapping[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, default=str)


def _upstream(item: Mapping[str, Any]) -> Mapping[str, Any] | None:
    upstream = item.get("upstream")
    return upstream.get("lineage") if upstream and upstream.get("lineage") else None


def walk_chain(lineage: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Flatten a lineage record into a list of stages, depth-first from the given output to the raw data.

    Each entry: stage, depth, code version, params, seed, counts, and the inputs (name, path, sha256).
    A stage reached through several inputs is listed once (first occurrence).
    """
    chain: list[dict[str, Any]] = []
    seen: set[str] = set()

    def visit(record: Mapping[str, Any], depth: int) -> None:
        fingerprint = _fingerprint(record)
        if fingerprint in seen:
            return
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
        for _, item in sorted(inputs.items()):
            upstream = _upstream(item)
            if upstream is not None:
                visit(upstream, depth + 1)

    visit(lineage, 0)
    return chain


# -- params as differences from the defaults ----------------------------------------------------------------


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: value}


def _short(value: Any) -> str:
    text = value if isinstance(value, str) and value and value.strip() == value else json.dumps(value, default=str)
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 1] + "…"


def params_diff(stage: str | None, params: Mapping[str, Any], defaults: Mapping[str, Any]
                ) -> tuple[list[str], int] | None:
    """Lines `block.key: default → value` (and `block.key: value (no default)`) for what differs from the
    defaults (`stages.params.default_params()`), and the number of params compared; None when the record's params
    match no params block."""
    if not params:
        return [], 0
    if stage in defaults and isinstance(defaults[stage], Mapping) and set(params) <= set(defaults[stage]):
        used, base = {stage: dict(params)}, {stage: defaults[stage]}
    elif all(key in defaults and isinstance(value, Mapping) for key, value in params.items()):
        used, base = dict(params), {key: defaults[key] for key in params}
    else:
        return None
    flat_used, flat_base = _flatten(used), _flatten(base)
    lines = []
    for key, value in flat_used.items():
        if key not in flat_base:
            lines.append(f"{key}: {_short(value)} (no default)")
        elif value != flat_base[key]:
            lines.append(f"{key}: {_short(flat_base[key])} → {_short(value)}")
    return lines, len(flat_used)


def _values(n: int) -> str:
    return f"{n} value" + ("" if n == 1 else "s")


def _params_lines(stage: str | None, params: Mapping[str, Any], defaults: Mapping[str, Any]) -> list[str]:
    diff = params_diff(stage, params, defaults)
    if diff is None:  # not a params block: print the values themselves
        flat = _flatten(dict(params))
        return [f"params: {_values(len(flat))}"] + [f"  {k}: {_short(v)}" for k, v in flat.items()]
    lines, n = diff
    if not n:
        return []
    if not lines:
        return [f"params: defaults ({_values(n)})"]
    return [f"params: defaults ({_values(n)}) except"] + [f"  {line}" for line in lines]


# -- the tree ------------------------------------------------------------------------------------------------


def _stage_line(record: Mapping[str, Any]) -> str:
    code = record.get("code_version", {})
    parts = [str(record.get("stage")), f"code {str(code.get('sha256', '?'))[:12]} (git {code.get('git', '?')})"]
    if record.get("seed") is not None:
        parts.append(f"seed {record['seed']}")
    return "  ".join(parts)


def _detail_lines(record: Mapping[str, Any], defaults: Mapping[str, Any]) -> list[str]:
    lines = _params_lines(record.get("stage"), record.get("params", {}), defaults)
    counts = record.get("counts", {})
    if counts:
        lines.append(summary_line("counts", counts, limit=COUNTS_CHARS))
    for key, value in (record.get("extra") or {}).items():
        lines.append(f"{key}: {_short(value)}")
    return lines


def format_chain(lineage: Mapping[str, Any], defaults: Mapping[str, Any], title: str = "") -> str:
    """The chain as a tree: each stage with its code version, seed, params (differences from the defaults),
    counts and extras, then its inputs (name, path, sha256), each followed by the stage that made it.
    A stage already printed is referred to as `(see above)`; an input no stage made is marked `raw data`."""
    seen: set[str] = set()
    lines = [title] if title else []

    def stage(record: Mapping[str, Any], prefix: str, connector: str, child_prefix: str) -> None:
        fingerprint = _fingerprint(record)
        if fingerprint in seen:
            lines.append(f"{prefix}{connector}{record.get('stage')} (see above)")
            return
        seen.add(fingerprint)
        lines.append(f"{prefix}{connector}{_stage_line(record)}")
        inputs = sorted((record.get("inputs") or {}).items())
        body = prefix + child_prefix
        for line in _detail_lines(record, defaults):
            lines.append(f"{body}{'│  ' if inputs else '   '}{line}")
        for i, (name, item) in enumerate(inputs):
            last = i == len(inputs) - 1
            upstream = _upstream(item)
            tag = "" if upstream is not None else "  raw data"
            lines.append(f"{body}{'└─ ' if last else '├─ '}{name}  {item.get('path')}  "
                         f"sha256 {str(item.get('sha256'))[:12]}{tag}")
            if upstream is not None:
                stage(upstream, body + ("   " if last else "│  "), "└─ ", "   ")

    stage(lineage, "", "", "")
    return "\n".join(lines)


# -- raw data and the card -----------------------------------------------------------------------------------


def _records(lineage: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield lineage
    for item in lineage.get("inputs", {}).values():
        upstream = _upstream(item)
        if upstream is not None:
            yield from _records(upstream)


def raw_data(lineage: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The data at the roots of the chain, sorted by path: inputs no stage made (a ReVOS folder, a downloaded
    checkpoint), and inputs made by a stage that itself reads nothing (a generator: synth, tiny_models).
    Each: name, path, sha256, generated_by (stage or None), seed (the generator's)."""
    found: dict[str, dict[str, Any]] = {}
    for record in _records(lineage):
        for name, item in record.get("inputs", {}).items():
            upstream = _upstream(item)
            if upstream is not None and upstream.get("inputs"):
                continue
            if item.get("sha256") and item.get("path") not in found:
                found[item["path"]] = {
                    "name": name, "path": item["path"], "sha256": item["sha256"],
                    "generated_by": upstream.get("stage") if upstream is not None else None,
                    "seed": upstream.get("seed") if upstream is not None else None,
                }
    return [found[p] for p in sorted(found)]


def raw_data_hashes(lineage: Mapping[str, Any]) -> dict[str, str]:
    """path → sha256 of the raw data at the roots of the chain (see `raw_data`)."""
    return {entry["path"]: entry["sha256"] for entry in raw_data(lineage)}


def _is_timing(key: str) -> bool:
    """Wall-clock figures (throughput, seconds) differ on every run: they stay in metrics/, out of the card, so
    that the same training gives the same bytes (DVC hashes the card with the checkpoint)."""
    return is_timing(key)


def write_model_card(model_dir: Path, title: str, defaults: Mapping[str, Any],
                     metrics: Mapping[str, Any] | None = None) -> Path:
    """Write `model_dir/README.md`: what the model is, the raw data it comes from, its metrics and the lineage
    tree (params as differences from `defaults`: `stages.params.default_params()`).

    Reads `model_dir/lineage.json` (write it first with `write_lineage`).
    """
    model_dir = Path(model_dir)
    lineage = json.loads((model_dir / LINEAGE_FILE).read_text())
    parts = [
        f"# {title}",
        "",
        "Produced by vrsflow. Everything below is read from `lineage.json` in this folder; "
        "`vrsflow lineage <this folder>` prints the same tree.",
        "",
        "## Raw data",
        "",
        "| input | path | sha256 | origin |",
        "|---|---|---|---|",
    ]
    for entry in raw_data(lineage):
        origin = (f"generated by stage `{entry['generated_by']}` (seed {entry['seed']})" if entry["generated_by"]
                  else "external")
        parts.append(f"| {entry['name']} | `{entry['path']}` | `{entry['sha256']}` | {origin} |")
    if metrics:
        parts += ["", "## Metrics", "", "| metric | value |", "|---|---|"]
        parts += [f"| {k} | {v} |" for k, v in sorted(_flatten(dict(metrics)).items()) if not _is_timing(k)]
    parts += ["", "## Lineage (this model first, raw data last; params: differences from the defaults)", "",
              "```text", format_chain(lineage, defaults), "```", ""]
    card = model_dir / "README.md"
    atomic_write_text(card, "\n".join(parts))
    return card
