"""The code hash in lineage records: it follows a module's source bytes, and a built-in module (no source file)
adds nothing instead of failing."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from stages.core.lineage import code_hash


def test_code_hash_is_the_sha256_of_the_names_and_bytes_and_follows_an_edit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = tmp_path / "vrsflow_probe_module.py"
    module.write_text("ANSWER = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    expected = hashlib.sha256(b"vrsflow_probe_module.py" + b"ANSWER = 1\n").hexdigest()  # from the definition
    assert code_hash(["vrsflow_probe_module"]) == expected
    module.write_text("ANSWER = 2\n")
    assert code_hash(["vrsflow_probe_module"]) != expected


def test_a_built_in_or_frozen_module_adds_nothing() -> None:
    assert "sys" in sys.builtin_module_names
    assert code_hash(["sys"]) == hashlib.sha256().hexdigest()
    assert code_hash(["sys", "json"]) == code_hash(["json"])
