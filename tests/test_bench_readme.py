"""bench/README.md quotes only what the committed bench/results/*.json files hold."""

from __future__ import annotations

import json
from pathlib import Path

from bench import summary

ROOT = Path(__file__).resolve().parents[1]


def test_readme_quotes_only_what_the_results_files_hold() -> None:
    """Every row of the README's table is the row bench/summary.py makes from the results file today (a
    results file without a row yet is allowed; a stale figure is not)."""
    readme = (ROOT / "bench" / "README.md").read_text()
    block = readme.split(summary.BEGIN, 1)[1].split(summary.END, 1)[0].strip().splitlines()
    current = set(summary.table(tracked_only=True).splitlines())
    stale = [row for row in block if row not in current]
    assert block and not stale, f"bench/README.md is stale (run python bench/summary.py --write): {stale[:2]}"


def test_results_files_name_their_baseline_commit_and_machine() -> None:
    files = sorted((ROOT / "bench" / "results").glob("*.json"))
    for path in files:
        record = json.loads(path.read_text())
        assert record["name"] == path.stem
        assert record["baseline"] and record["figures"]
        assert len(record["commit"]["sha"]) == 40 and record["machine"]["cpus"] >= 1
