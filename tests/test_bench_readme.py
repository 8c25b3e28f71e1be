"""bench/README.md quotes only what the committed bench/results/*.json files hold."""

from __future__ import annotations

import json
from pathlib import Path

from bench import summary

ROOT = Path(__file__).resolve().parents[1]


def test_readme_table_is_generated_from_the_results_files() -> None:
    readme = (ROOT / "bench" / "README.md").read_text()
    block = readme.split(summary.BEGIN, 1)[1].split(summary.END, 1)[0].strip()
    assert block == summary.table(), "bench/README.md is stale: run python bench/summary.py --write"


def test_results_files_name_their_baseline_commit_and_machine() -> None:
    files = sorted((ROOT / "bench" / "results").glob("*.json"))
    for path in files:
        record = json.loads(path.read_text())
        assert record["name"] == path.stem
        assert record["baseline"] and record["figures"]
        assert len(record["commit"]["sha"]) == 40 and record["machine"]["cpus"] >= 1
