"""bench/bench_learning_runs.py's targets (issue 61) per seed and overall, and their row in bench/README.md's table."""

from __future__ import annotations

import copy

from bench import summary
from bench.bench_learning_runs import TARGETS, summarise


def run(sft: float, grpo: float, *, base: float = 25.0, constant: float = 24.0, ceiling: float = 47.0,
        box_iou: float = 0.35, swap: float = 20.0, sft_parse: float = 0.0, grpo_parse: float = 0.0,
        run_s: float = 500.0, reward: tuple[float, float] = (1.0, 1.2)) -> dict:
    """One seed's record as `run_seed` writes it (only the fields the targets read)."""
    def row(jf: float, failures: float = 0.0) -> dict:
        return {"JF_overall": jf, "parse_failure_rate": failures, "keyframe_box_iou": box_iou,
                "swap_JF_overall": swap}

    return {"eval": {"base": row(base), "sft": row(sft, sft_parse), "grpo": row(grpo, grpo_parse)},
            "ceiling": {"JF_overall": ceiling}, "empty": {"JF_overall": 6.72}, "constant": {"JF_overall": constant},
            "run_s": run_s, "segmenter": "sam2", "grpo_reward_by_quarter": {"reward": [reward[0], 1.1, 1.1, reward[1]]}}


# every target met in every seed, each with some margin (the GRPO bar: 24 + 0.4 × (47 − 24) = 33.2)
MET = {"0": run(33.0, 35.0), "1": run(31.0, 34.0, sft_parse=0.04), "2": run(32.0, 33.5, run_s=600.0)}
PER_SEED = {"ceiling_jf", "grpo_above_constant", "grpo_box_iou", "grpo_swap_drop", "sft_parse_rate",
            "grpo_parse_rate", "default_run_s"}
OVER_SEEDS = {"sft_above_base", "grpo_above_sft", "grpo_reward_rises"}


def test_the_targets_are_issue_61s() -> None:
    assert TARGETS == {"ceiling_jf_min": 40.0, "grpo_min_share_above_constant": 0.4, "grpo_box_iou_min": 0.30,
                       "swap_drop_min": 5.0, "parse_rate_min": 0.95, "default_run_max_s": 600.0,
                       "sft_min_over_base": 2.0, "grpo_min_over_sft": 1.0, "planted_sft_min_below": 5.0}


def test_every_target_met_in_every_seed() -> None:
    out = summarise(MET)
    assert set(out["targets_met"]) == PER_SEED | OVER_SEEDS and all(out["targets_met"].values())
    assert all(all(t.values()) for t in out["targets_by_seed"].values())
    assert out["constant_JF"] == [24.0] and out["ceiling_JF"] == [47.0] and out["run_s_max"] == 600.0
    assert out["sft_JF_mean"] == 32.0 and out["grpo_JF_spread"] == 1.5


def test_a_target_failed_in_one_seed_fails_overall_and_only_that_one() -> None:
    """Each case breaks one per-seed target in seed 1 (just past its bar) and leaves the others met."""
    cases = {
        "ceiling_jf": {"ceiling": 39.9, "grpo": 37.0},  # GRPO's bar 24 + 0.4 × 15.9 = 30.36 stays met
        "grpo_above_constant": {"grpo": 33.1, "sft": 30.0},  # < 33.2; GRPO ≥ SFT + 1 over the seeds stays met
        "grpo_box_iou": {"box_iou": 0.299},
        "grpo_swap_drop": {"swap": 29.01},  # 34 − 29.01 < 5
        "sft_parse_rate": {"sft_parse": 0.051},
        "grpo_parse_rate": {"grpo_parse": 0.06},
        "default_run_s": {"run_s": 600.5},
    }
    for name, change in cases.items():
        runs = copy.deepcopy(MET)
        seed = runs["1"]
        for key, value in change.items():
            if key == "ceiling":
                seed["ceiling"] = {"JF_overall": value}
            elif key in ("sft", "grpo"):
                seed["eval"][key]["JF_overall"] = value
            elif key.endswith("_parse"):
                seed["eval"][key.removesuffix("_parse")]["parse_failure_rate"] = value
            elif key == "box_iou":
                seed["eval"]["grpo"]["keyframe_box_iou"] = value
            elif key == "swap":
                seed["eval"]["grpo"]["swap_JF_overall"] = value
            else:
                seed[key] = value
        out = summarise(runs)
        assert {k for k, v in out["targets_met"].items() if not v} == {name}, name
        assert {k for k, v in out["targets_by_seed"]["1"].items() if not v} == {name}, name
        assert all(all(out["targets_by_seed"][s].values()) for s in ("0", "2")), name


def test_the_targets_over_the_seeds_and_the_planted_bug() -> None:
    flat = {k: run(33.0, 35.0, base=31.5) for k in MET}  # SFT only 1.5 above the base
    assert {k for k, v in summarise(flat)["targets_met"].items() if not v} == {"sft_above_base"}
    close = {k: run(33.0, 33.9) for k in MET}
    assert {k for k, v in summarise(close)["targets_met"].items() if not v} == {"grpo_above_sft"}
    still = {k: run(33.0, 35.0, reward=(1.2, 1.2)) for k in MET}
    assert {k for k, v in summarise(still)["targets_met"].items() if not v} == {"grpo_reward_rises"}
    shows = summarise(MET, {k: run(27.0, 30.0) for k in MET})  # 32 − 27 = 5: the planted bug shows
    assert shows["targets_met"]["planted_bug_shows"] and shows["planted_sft_JF_mean"] == 27.0
    hidden = summarise(MET, {k: run(27.1, 30.0) for k in MET})
    assert {k for k, v in hidden["targets_met"].items() if not v} == {"planted_bug_shows"}


def test_the_readme_row_states_issue_61s_targets_and_which_are_met() -> None:
    runs = copy.deepcopy(MET)
    runs["2"]["eval"]["grpo"]["parse_failure_rate"] = 0.1
    planted = {k: run(20.0, 21.0) for k in MET}
    figures = {"runs": runs, "planted": planted, "summary": summarise(runs, planted), "targets": TARGETS,
               "profile": "default", "plant": "mirror-boxes"}
    text = summary._learning_runs(figures)
    assert "empty answer 6.72/6.72/6.72, constant answer (the SFT traces' prior) 24.00/24.00/24.00" in text
    assert "swapped queries SFT 20.00/20.00/20.00, GRPO 20.00/20.00/20.00; GRPO box IoU 0.350/0.350/0.350" in text
    assert "planted bug (mirror-boxes): SFT 20.00 against 32.00" in text
    assert "parse ≥ 95 % met, not met; run ≤ 600 s met" in text
    assert "planted SFT ≥ 5 below met" in text
    assert "issue 61" in summary.KNOWN["learning-runs"][1]


def test_the_readme_first_screen_shows_the_committed_learning_runs() -> None:
    """The README's table quotes bench/results/learning-runs.json as committed: per seed, J&F (2 decimals), J&F on
    swapped queries, keyframe box IoU (3 decimals) and answers parsed (whole per cent) for the pre-trained base, SFT
    and GRPO; the empty, constant and ceiling rows; and the planted run's SFT and GRPO."""
    import json
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    figures = json.loads((root / "bench" / "results" / "learning-runs.json").read_text())["figures"]
    runs, planted = figures["runs"], figures.get("planted", {})
    seeds = sorted(runs, key=int)
    lines = (root / "README.md").read_text().splitlines()[:80]  # the first screen
    rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:-1]]
            for line in lines if re.match(r"\| (after|empty|constant|ground|pre-trained base|planted)", line)}

    def per_seed(values: list[float], fmt: str = "{:.2f}") -> str:
        return " / ".join(fmt.format(v) for v in values)

    def model_row(record: dict, model: str) -> list[str]:
        ev = [record[s]["eval"][model] for s in seeds]
        return [per_seed([e["JF_overall"] for e in ev]), per_seed([e["swap_JF_overall"] for e in ev]),
                per_seed([e["keyframe_box_iou"] for e in ev], "{:.3f}"),
                per_seed([100 * (1 - e["parse_failure_rate"]) for e in ev], "{:.0f}") + " %"]

    assert rows["pre-trained base (`models/pretrain`, before SFT)"] == model_row(runs, "base")
    assert rows["after SFT"] == model_row(runs, "sft")
    assert rows["after GRPO"] == model_row(runs, "grpo")
    if planted:
        assert rows["planted bug: after SFT, every training box mirrored"] == model_row(planted, "sft")
        assert rows["planted bug: after GRPO, every training box mirrored"] == model_row(planted, "grpo")
    for label, key in (("empty answer (no boxes: empty masks)", "empty"), ("ground-truth answers (the ceiling)",
                                                                          "ceiling")):
        assert rows[label][0] == per_seed([runs[s][key]["JF_overall"] for s in seeds])
    constant = [label for label in rows if label.startswith("constant answer")]
    assert len(constant) == 1 and rows[constant[0]][0] == per_seed([runs[s]["constant"]["JF_overall"] for s in seeds])


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
