"""Small shared I/O helpers: validated parquet tables, deterministic JSON, per-row seeds, reports."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import pandera.pandas as pa


def write_table(df: pd.DataFrame, schema: type[pa.DataFrameModel], path: Path) -> pd.DataFrame:
    """Validate `df` with `schema` (lazily: every violation at once), then write it as parquet.

    Raises:
        pandera.errors.SchemaErrors: listing every violation.
    """
    validated = schema.validate(df, lazy=True)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    validated.reset_index(drop=True).to_parquet(path, index=False)
    return validated


def read_table(path: Path, schema: type[pa.DataFrameModel]) -> pd.DataFrame:
    """Read a parquet table and validate it against `schema`."""
    return schema.validate(pd.read_parquet(path), lazy=True)


def write_json(path: Path, obj: Any) -> None:
    """Write JSON with sorted keys (DVC's run-cache wants byte-stable outputs), atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(obj, indent=1, sort_keys=True, default=_json_default) + "\n"
    atomic_write_text(path, text)


def atomic_write_text(path: Path, text: str) -> None:
    """Write text through a temporary file + rename, so a killed process never leaves half a file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the file the usual permissions
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def derive_seed(seed: int, *parts: object) -> int:
    """A 63-bit seed from a base seed and identifying parts (stage, sample id, ...).

    Results then depend on what a row is, not on the order rows are processed in.
    """
    digest = hashlib.sha256(repr((seed, *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def markdown_table(df: pd.DataFrame) -> str:
    """A GitHub-flavoured markdown table of `df` (no tabulate dependency)."""
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")
