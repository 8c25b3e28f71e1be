"""lineage.json: deterministic, hashes inputs, embeds the upstream chain."""

from __future__ import annotations

import json
from pathlib import Path

from stages.core.lineage import LINEAGE_FILE, sha256_tree, write_lineage
from stages.core.params import IngestParams


def test_lineage_chains_upstream_and_is_deterministic(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.txt").write_text("hello")
    write_lineage(raw, "synth", {"seed": 1}, seed=1, counts={"videos": 2})
    out = tmp_path / "index"
    first = write_lineage(out, "ingest", IngestParams(), inputs={"root": raw}, counts={"rows": 5},
                          code_modules=["stages.core.lineage"])
    text = (out / LINEAGE_FILE).read_text()
    second = write_lineage(out, "ingest", IngestParams(), inputs={"root": raw}, counts={"rows": 5},
                           code_modules=["stages.core.lineage"])
    assert first == second and (out / LINEAGE_FILE).read_text() == text
    record = json.loads(text)
    assert record["params"] == {"strict": True, "check_jpeg": "decode", "foreground_tolerance": 0.0}
    assert record["inputs"]["root"]["upstream"]["stage"] == "synth"
    assert record["inputs"]["root"]["upstream"]["lineage"]["counts"] == {"videos": 2}
    assert len(record["code_version"]["sha256"]) == 64


def test_tree_hash_ignores_lineage_and_sees_content(tmp_path: Path) -> None:
    (tmp_path / "x.bin").write_bytes(b"1")
    before = sha256_tree(tmp_path)
    (tmp_path / LINEAGE_FILE).write_text("{}")
    assert sha256_tree(tmp_path) == before
    (tmp_path / "x.bin").write_bytes(b"2")
    assert sha256_tree(tmp_path) != before
