"""Persistent, content-addressed response cache: one JSON file per request key, written atomically.

A response is stored the moment it arrives, so a run killed half-way loses nothing already paid for,
and a rerun (or the resumed run) finds it instead of sending the request again. Failed requests are
not stored: a rerun retries them. The folder is a DVC output with `persist: true`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from stages.core.io import atomic_write_text


def request_key(payload: Any) -> str:
    """sha256 of the canonical JSON of everything that determines an answer."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class ResponseCache:
    """Key → stored response record (a JSON object)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        """The stored record, or None (also for a file cut short by a crash before the rename)."""
        path = self._path(key)
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            return None

    def put(self, key: str, record: dict) -> None:
        """Store a record (atomically: a reader never sees half a file)."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(record, sort_keys=True))

    def __len__(self) -> int:
        return sum(1 for _ in self.folder.glob("*/*.json"))
