"""metrics/summary.json: the headline figures first, and the README recipe that compares experiments on them
(`dvc exp show` through DVC itself on the project's dvc.yaml)."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

from stages.summary import HEADLINE, summarize
from tests.pipeline_repo import dvc, sh

EVAL = {"F_overall": 40.0, "J_overall": 30.0, "JF_overall": 35.0, "ceiling_JF_overall": 61.25, "empty_JF_overall": 6.72,
        "constant_JF_overall": 24.5, "swap_JF_overall": 20.25, "JF_reasoning": 33.3333333, "JF_referring": 36.0,
        "R_visa_overall": 12.5, "n_expressions": 62, "seconds_per_video": 1.5, "JF_no_target": float("nan")}


def _metrics(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "eval.json").write_text(json.dumps(EVAL))
    (folder / "grpo.json").write_text(json.dumps({"reward_first": 1.25, "reward_last": 1.75, "reward_gain": 0.5}))
    (folder / "sft.json").write_text(json.dumps({"final_loss": 0.12345678, "format_rate_after": 0.9,
                                                 "format_rate_before": 0.0}))
    # filter.json missing: its figures are left out
    # keys that share prefixes with the summary's names in other files (sample / shard style)
    (folder / "sample.json").write_text(json.dumps({"sft.referring/single": 3, "eval.reasoning/multi": 2}))
    return folder


def test_summary_in_headline_order(tmp_path: Path) -> None:
    report = summarize(_metrics(tmp_path / "metrics"), tmp_path / "metrics" / "summary.json")
    text = (tmp_path / "metrics" / "summary.json").read_text()
    expected = {"summary.JF": 35.0, "summary.ceiling_JF": 61.25, "summary.empty_JF": 6.72,
                "summary.constant_JF": 24.5, "summary.swap_JF": 20.25,
                "summary.J": 30.0, "summary.F": 40.0, "summary.JF_referring": 36.0,
                "summary.JF_reasoning": 33.3333, "summary.R": 12.5, "summary.expressions": 62,
                "summary.grpo_reward_first": 1.25, "summary.grpo_reward_last": 1.75, "summary.grpo_reward_gain": 0.5,
                "summary.sft_format_rate_before": 0.0, "summary.sft_format_rate_after": 0.9,
                "summary.sft_final_loss": 0.1235}
    assert list(json.loads(text).items()) == list(expected.items())  # order kept, not sorted
    assert report.metrics == expected
    assert [k for k, _, _ in HEADLINE][: len(expected)] == list(expected)


def test_readme_recipe_shows_exactly_the_summary(tmp_path: Path, project_root: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(project_root / name, repo / name)
    sh(["git", "init", "-q", "-b", "main"], repo)
    dvc(repo, "init", "-q")
    summarize(_metrics(repo / "metrics"), repo / "metrics" / "summary.json")
    sh(["git", "add", "-A"], repo)
    sh(["git", "commit", "-qm", "run"], repo)
    readme = (project_root / "README.md").read_text()
    recipe = "dvc exp show --drop '.*' --keep 'Experiment|Created|^summary\\.'"
    assert recipe in readme
    out = dvc(repo, "exp", "show", "--csv", "--drop", ".*", "--keep", "Experiment|Created|^summary\\.")
    rows = list(csv.reader(io.StringIO(out)))
    summary_columns = [c for c in rows[0] if c not in ("Experiment", "rev", "typ", "Created", "parent")]
    assert summary_columns == list(json.loads((repo / "metrics" / "summary.json").read_text()))
    assert rows[1][rows[0].index("summary.JF")] == "35.0"
