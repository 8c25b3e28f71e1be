"""bench/bench_learning_runs.py's targets (issue 47) per seed and overall, and their row in bench/README.md's table."""

from __future__ import annotations

import copy

from bench import summary
from bench.bench_learning_runs import TARGETS, summarise


def run(sft: float, grpo: float, *, empty: float = 6.72, ceiling: float = 50.0, sft_parse: float = 0.0,
        grpo_parse: float = 0.0, run_s: float = 500.0) -> dict:
    """One seed's record as `run_seed` writes it (only the fields the targets read, and the base row)."""
    def row(jf: float, failures: float) -> dict:
        return {"JF_overall": jf, "parse_failure_rate": failures}

    return {"eval": {"base": row(empty, 0.0), "sft": row(sft, sft_parse), "grpo": row(grpo, grpo_parse)},
            "ceiling": {"JF_overall": ceiling}, "empty": {"JF_overall": empty}, "run_s": run_s,
            "segmenter": "sam2"}


# every target met in every seed, each with some margin (the bars: 2 × 6.72 = 13.44, 0.4 × 50 = 20, ceiling 40)
MET = {"0": run(30.0, 31.0), "1": run(25.0, 24.5, sft_parse=0.04), "2": run(21.0, 22.0, run_s=600.0)}
NAMES = {"ceiling_jf", "sft_jf_twice_empty", "sft_jf_share_of_ceiling", "grpo_jf_twice_empty",
         "grpo_jf_share_of_ceiling", "grpo_not_below_sft", "sft_parse_rate", "grpo_parse_rate", "default_run_s"}


def test_the_targets_are_issue_47s() -> None:
    assert TARGETS == {"ceiling_jf_min": 40.0, "jf_min_times_empty": 2.0, "jf_min_share_of_ceiling": 0.4,
                       "grpo_min_minus_sft": -1.0, "parse_rate_min": 0.95, "default_run_max_s": 600.0}


def test_every_target_met_in_every_seed() -> None:
    out = summarise(MET)
    assert set(out["targets_met"]) == NAMES and all(out["targets_met"].values())
    assert all(all(t.values()) for t in out["targets_by_seed"].values())
    assert out["empty_JF"] == [6.72] and out["ceiling_JF"] == [50.0] and out["run_s_max"] == 600.0
    assert out["sft_JF_mean"] == 25.33 and out["grpo_JF_spread"] == 9.0


def test_a_target_failed_in_one_seed_fails_overall_and_only_that_one() -> None:
    """Each case breaks one target in seed 1 (just past its bar) and leaves the others met."""
    cases = {
        "ceiling_jf": {"ceiling": {"JF_overall": 39.9}},  # the SFT / GRPO shares of the ceiling stay met (≥ 15.96)
        "sft_jf_twice_empty": {"empty": {"JF_overall": 12.6}, "grpo": 25.6},  # SFT 25 < 25.2, GRPO above it
        "sft_jf_share_of_ceiling": {"ceiling": {"JF_overall": 62.6}, "grpo": 25.5},  # SFT 25 < 25.04, GRPO above
        "grpo_jf_twice_empty": {"empty": {"JF_overall": 12.5}, "grpo": 24.9},  # < 25 = 2 × 12.5; SFT 25 meets it
        "grpo_not_below_sft": {"grpo": 23.9},  # < 25 − 1
        "sft_parse_rate": {"sft_parse": 0.051},
        "grpo_parse_rate": {"grpo_parse": 0.06},
        "default_run_s": {"run_s": 600.5},
    }
    for name, change in cases.items():
        runs = copy.deepcopy(MET)
        seed = runs["1"]
        for key, value in change.items():
            if key in ("ceiling", "empty"):
                seed[key] = value
            elif key in ("sft", "grpo"):
                seed["eval"][key]["JF_overall"] = value
            elif key.endswith("_parse"):
                seed["eval"][key.removesuffix("_parse")]["parse_failure_rate"] = value
            else:
                seed[key] = value
        out = summarise(runs)
        assert {k for k, v in out["targets_met"].items() if not v} == {name}, name
        assert {k for k, v in out["targets_by_seed"]["1"].items() if not v} == {name}, name
        assert all(all(out["targets_by_seed"][s].values()) for s in ("0", "2")), name


def test_the_readme_row_states_issue_47s_targets_and_which_are_met() -> None:
    runs = copy.deepcopy(MET)
    runs["2"]["eval"]["grpo"]["parse_failure_rate"] = 0.1
    figures = {"runs": runs, "summary": summarise(runs), "targets": TARGETS, "profile": "default"}
    text = summary._learning_runs(figures)
    assert "empty answer (no boxes) 6.72/6.72/6.72, ceiling (ground-truth answers) 50.00/50.00/50.00" in text
    assert "parse rate SFT 1.00/0.96/1.00, GRPO 1.00/1.00/0.90" in text
    assert "ceiling ≥ 40 met; SFT, GRPO ≥ 2× the empty answer met, met; ≥ 0.4 of the ceiling met, met" in text
    assert "GRPO ≥ SFT − 1 met; parse ≥ 95 % met, not met; run ≤ 600 s met" in text
    assert "issue 47" in summary.KNOWN["learning-runs"][1]


def test_the_readme_first_screen_shows_the_committed_learning_runs() -> None:
    """The README's table quotes bench/results/learning-runs.json as committed: J&F per seed (2 decimals) and
    answers parsed (whole per cent) for the pre-trained base, SFT and GRPO, with the empty-answer and ceiling rows."""
    import json
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    runs = json.loads((root / "bench" / "results" / "learning-runs.json").read_text())["figures"]["runs"]
    seeds = sorted(runs, key=int)
    rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:-1]]
            for line in (root / "README.md").read_text().splitlines()
            if re.match(r"\| (after|empty|ground|pre-trained base)", line)}

    def jf(values: list[float]) -> str:
        return " / ".join(f"{v:.2f}" for v in values)

    assert rows["pre-trained base (`models/pretrain`, before SFT)"] == [
        jf([runs[s]["eval"]["base"]["JF_overall"] for s in seeds]),
        " / ".join(f"{100 * (1 - runs[s]['eval']['base']['parse_failure_rate']):.0f}" for s in seeds) + " %"]
    for stage in ("sft", "grpo"):
        assert rows[f"after {stage.upper()}"] == [
            jf([runs[s]["eval"][stage]["JF_overall"] for s in seeds]),
            " / ".join(f"{100 * (1 - runs[s]['eval'][stage]['parse_failure_rate']):.0f}" for s in seeds) + " %"]
    assert rows["empty answer (no boxes: empty masks)"][0] == jf([runs[s]["empty"]["JF_overall"] for s in seeds])
    assert rows["ground-truth answers (the ceiling)"][0] == jf(sorted({runs[s]["ceiling"]["JF_overall"]
                                                                        for s in seeds}))


def test_parse_failures_are_told_apart_by_where_the_answer_breaks(tmp_path) -> None:
    import pandas as pd

    from bench.bench_learning_runs import answer_statuses, parse_failure_kind

    think = "<think>the red one</think>"
    assert parse_failure_kind(think) == "no <answer>...</answer>"
    assert parse_failure_kind(think + '<answer>{"keyframe_timestamp": 1') == "no <answer>...</answer>"
    assert parse_failure_kind(think + '<answer>{"keyframe_timestamp": 4, "bbox_2d_list": [[84, 63, 97,]]}</answer>'
                              ) == "answer not JSON"
    assert parse_failure_kind(think + '<answer>{"keyframe": 4, "bbox_2d_list": []}</answer>'
                              ) == "JSON not the answer's fields"
    rows = [("ok", think + '<answer>{"keyframe_timestamp": 0, "bbox_2d_list": [[1, 2, 3, 4]]}</answer>'),
            ("parse_failure", think), ("parse_failure", think + "<answer>{,}</answer>"),
            ("parse_failure", think + "<answer>[]</answer>"), ("keyframe_not_shown", think)]
    pd.DataFrame(rows, columns=["status", "response"]).to_parquet(tmp_path / "answers.parquet")
    assert answer_statuses(tmp_path / "answers.parquet") == {
        "statuses": {"keyframe_not_shown": 1, "ok": 1, "parse_failure": 3},
        "parse_failures": {"no <answer>...</answer>": 1, "answer not JSON": 1, "JSON not the answer's fields": 1}}
