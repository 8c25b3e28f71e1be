"""bench/README.md quotes only what the committed bench/results/*.json files hold."""

from __future__ import annotations

import json
import re
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


def test_results_files_name_their_commit_and_machine() -> None:
    tracked = summary._tracked()
    for path in sorted((ROOT / "bench" / "results").glob("*.json")):
        if path.stem not in tracked:
            continue  # not committed yet
        record = json.loads(path.read_text())
        commit = record["commit"]
        sha = commit["sha"] if isinstance(commit, dict) else commit
        assert re.fullmatch(r"[0-9a-f]{40}", sha), path.name
        assert record["machine"], path.name
        if "figures" in record:  # written by bench/results_io.write_result
            assert record["name"] == path.stem and record["baseline"] and record["figures"]


def test_every_row_states_its_baseline_target_and_measurement() -> None:
    """Each committed results file has a one-line row naming its claim, and names a baseline and a headline built
    for that file (not the generic fallback: `python bench/summary.py NAME`); rows of figures not measured yet still
    state their claim."""
    rows = summary.table(tracked_only=True).splitlines()[2:]
    tracked = summary._tracked()
    assert {row.split("`")[1].removesuffix(".json") for row in rows} >= tracked
    for row in rows:
        cells = [cell.strip() for cell in row.strip().strip("|").split(" | ")]
        assert len(cells) == 4 and len(row) <= 320, row  # one line a row; the details are in the file
        name, _, target, _ = cells
        assert target, name
        name = name.split("`")[1].removesuffix(".json")
        if name not in tracked:
            continue
        _, _, baseline, _ = summary.row_facts(name)
        measured = summary.headline(name)
        assert baseline and baseline != "—", name
        assert measured and not measured.startswith("figures in the file"), name


def test_bench_holds_a_row_for_every_results_file_and_no_study() -> None:
    """bench/results holds only files a bench script writes (each named in KNOWN); studies live in research/."""
    assert {p.stem for p in (ROOT / "bench" / "results").glob("*.json")} <= set(summary.KNOWN)


def test_results_files_hold_no_path_of_this_machine() -> None:
    """A committed results file is read on other machines: no absolute path of the one that wrote it."""
    for path in sorted((ROOT / "bench" / "results").glob("*.json")):
        found = re.findall(r"(?<![\w<>.])/(?:tmp|work|root|home|Users)/[^\s\"]*", path.read_text())
        assert not found, f"{path.name}: {found[:3]}"


def test_recorded_command_keeps_project_paths_relative_and_hides_others() -> None:
    from bench.results_io import portable_command

    argv = [str(ROOT / "bench" / "bench_x.py"), "--work", "/tmp/scratch-7/run", f"--root={ROOT / 'data'}", "--n", "3"]
    assert portable_command(argv) == "python bench/bench_x.py --work <run> --root=data --n 3"
