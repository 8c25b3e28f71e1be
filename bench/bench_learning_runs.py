"""What the default run gives a user, per training seed: base → SFT → GRPO J&F beside the evaluation's ceiling.

For each seed, a fresh throwaway git + DVC copy of the project (tests/pipeline_repo.py) with the training seeds set
(`tiny_models.seed`, `sft.seed`, `grpo.seed` = the seed; the data and its seeds stay params.yaml's, so every run
trains on the same data and is evaluated on the same pool; seed 0 is params.yaml as it is) runs the whole pipeline
as a user does (`vrsflow repro`, via bench_orchestration's `run_mode`, which times every stage). Then, in that
copy:

- the evaluate stage's own `evaluate` scores the tiny base and the SFT model on the eval pool, with the same
  settings as the stage scored the GRPO model (`metrics/eval.json`), so the three rows are comparable;
- the ceiling is the stage's own `ceiling_*` metrics (the ground-truth answers through the same segmenter);
- the SFT format rate, GRPO's reward per quarter of its steps (total and per component, `metrics/grpo_curve.csv`)
  and the benchmark table (`metrics/benchmarks.json`) are read from the run's files.

Runs one seed after another, so that each run's stage times are those of the 2-core machine alone.

    python bench/bench_learning_runs.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_orchestration import run_mode  # noqa: E402
from bench.results_io import write_result  # noqa: E402

TARGETS = {"sft_jf_min": 40.0, "sft_jf_min_share_of_ceiling": 0.5, "sft_parse_rate_min": 0.95,
           "default_run_max_s": 600.0}  # issue 24
KEYS = ("JF_overall", "J_overall", "F_overall", "JF_referring", "JF_reasoning", "parse_failure_rate",
        "n_answer_no_boxes", "n_answer_degenerate_boxes", "keyframe_area_ratio", "keyframe_box_iou", "n_expressions")


def score_model(repo: Path, model_path: Path, out: Path) -> dict:
    """The evaluate stage's function on the run's eval pool for another model (no ceiling: the stage has it)."""
    from stages.core.params import load_params
    from stages.evaluate import evaluate

    params = load_params(repo / "params.yaml")
    block = dataclasses.replace(params.evaluate, model_path=str(model_path), reference=False)
    sam2 = dataclasses.replace(params.sam2, checkpoint=str(repo / params.sam2.checkpoint),
                               config=str(repo / params.sam2.config))
    report = evaluate(block, params.model, sam2, params.keyframes.train_size, repo / params.data.root,
                      repo / "data/keyframes/eval.parquet", out, out / "eval.md",
                      index_dir=repo / params.data.index_dir)
    return {k: round(float(report.metrics[k]), 4) for k in KEYS if k in report.metrics}


def quarters(curve: pd.DataFrame) -> dict:
    """Mean of every reward column over each quarter of GRPO's steps."""
    parts = np.array_split(np.arange(len(curve)), 4)
    return {col: [round(float(curve[col].iloc[idx].mean()), 4) for idx in parts]
            for col in curve.columns if col.startswith("reward")}


def run_seed(seed: int, work: Path, profile: str | None = None) -> dict:
    overrides = {"tiny_models.seed": seed, "sft.seed": seed, "grpo.seed": seed}
    started = time.perf_counter()
    timed = run_mode("after", profile, work, overrides)  # vrsflow repro in a fresh copy, stage by stage
    repo = work / "after" / "repo"
    metrics = timed["pipeline_metrics"]  # sft, grpo, eval, benchmarks: read by run_mode
    from stages.core.params import load_params

    params = load_params(repo / "params.yaml")
    evals = {"base": score_model(repo, repo / params.tiny_models.out_dir / "qwen25vl", work / "eval-base"),
             "sft": score_model(repo, repo / params.sft.out_dir / "merged", work / "eval-sft"),
             "grpo": {k: round(float(metrics["eval"][k]), 4) for k in KEYS if k in metrics["eval"]}}
    ceiling = {k.removeprefix("ceiling_"): round(float(v), 4) for k, v in metrics["eval"].items()
               if k.startswith("ceiling_")}
    return {"overrides": overrides, "segmenter": params.evaluate.segmenter,
            "reward_components": list(params.reward.components),
            "eval": evals, "ceiling": ceiling,
            "sft_format_rate": {k: metrics["sft"][k] for k in ("format_rate_before", "format_rate_after")},
            "grpo_reward_by_quarter": quarters(pd.read_csv(repo / "metrics" / "grpo_curve.csv")),
            "benchmarks": metrics["benchmarks"],
            "run_s": timed["total_s"], "stages_s": {k: v["wall_s"] for k, v in timed["stages"].items()},
            "load_avg_1m_start_end": timed["load_avg_1m_start_end"],
            "wall_s_with_scoring": round(time.perf_counter() - started, 1)}


def summarise(runs: dict) -> dict:
    out: dict = {}
    for model in ("base", "sft", "grpo"):
        values = [r["eval"][model]["JF_overall"] for r in runs.values()]
        out[f"{model}_JF_mean"], out[f"{model}_JF_spread"] = round(float(np.mean(values)), 2), round(
            float(np.ptp(values)), 2)
    ceilings = [r["ceiling"]["JF_overall"] for r in runs.values()]
    out["ceiling_JF"] = sorted(set(ceilings))  # the same data and segmenter in every run: one value expected
    out["run_s_max"] = max(r["run_s"] for r in runs.values())
    sft = [r["eval"]["sft"] for r in runs.values()]
    out["targets_met"] = {
        "sft_jf": all(s["JF_overall"] >= TARGETS["sft_jf_min"] for s in sft),
        "sft_jf_half_ceiling": all(s["JF_overall"] >= TARGETS["sft_jf_min_share_of_ceiling"] * c
                                   for s, c in zip(sft, ceilings, strict=True)),
        "sft_parse_rate": all(1 - s["parse_failure_rate"] >= TARGETS["sft_parse_rate_min"] for s in sft),
        "default_run_s": out["run_s_max"] <= TARGETS["default_run_max_s"]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, help="results file; default bench/results/learning-runs.json")
    parser.add_argument("--profile", help="a params profile applied first (ci: a quick check of this script)")
    args = parser.parse_args()
    runs: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-learning-runs-") as tmp:
        for seed in args.seeds:
            runs[str(seed)] = run_seed(seed, Path(tmp) / f"seed{seed}", args.profile)
            print(json.dumps({seed: {k: v for k, v in runs[str(seed)].items() if k != "benchmarks"}}), flush=True)
    figures = {"runs": runs, "summary": summarise(runs), "targets": TARGETS, "profile": args.profile or "default"}
    out = args.out or ROOT / "bench" / "results" / "learning-runs.json"
    write_result(out.stem, figures, "the tiny random base (row base): the model before SFT, same evaluation; the "
                 "ceiling: the ground-truth answers through the same segmenter (the evaluate stage's ceiling_*)",
                 out=out)


if __name__ == "__main__":
    main()
