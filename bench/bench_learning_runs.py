"""What the default run gives a user, per training seed: base → SFT → GRPO J&F beside what a perfect, an empty and a
constant answer score, and what a swapped query scores — and a planted bug that the figures must show.

For each seed, a fresh throwaway git + DVC copy of the project (tests/pipeline_repo.py) with the training seeds set
(`tiny_models.seed`, `sft.seed`, `grpo.seed` = the seed; the data and its seeds stay params.yaml's, so every run
trains on the same data and is evaluated on the same pool; seed 0 is params.yaml as it is) runs the whole pipeline
as a user does (`vrsflow repro`, via bench_orchestration's `run_mode`, which times every stage). Then, in that
copy:

- the evaluate stage's own `evaluate` scores the base (`model.path`) and the SFT model on the eval pool, with the same
  settings as the stage scored the GRPO model (`metrics/eval.json`), so the three rows are comparable — each with its
  query-swap figure (`swap_JF_overall`: every expression answered with another expression's query of its video);
- the ceiling, the empty answer and the constant answer (the SFT traces' training prior given to every query) are
  the stage's own `ceiling_*`, `empty_*` and `constant_*` metrics;
- the SFT format rate, GRPO's reward per quarter of its steps (total and per component, `metrics/live/grpo`)
  and the benchmark table (`metrics/benchmarks.json`) are read from the run's files.

`--plant mirror-boxes` also trains, per seed, the same run with every SFT and GRPO target mirrored left-right
(`bench/plants.py`: the keyframes stage's training tables changed and committed to DVC before the rest runs), and
records its figures beside the correct run's: a pipeline whose model looks must score worse with the bug.

Runs one after another, so that each run's stage times are those of the 2-core machine alone. The targets are
issue 61's (`seed_targets`, `summarise`): per seed, GRPO J&F ≥ constant + 0.4 × (ceiling − constant), the ceiling
≥ 40, GRPO's keyframe box IoU ≥ 0.30, the query swap costs GRPO ≥ 5 J&F, answers parsed ≥ 95 % after SFT and after
GRPO, the run ≤ 600 s; over the seeds, mean SFT ≥ mean base + 2, mean GRPO ≥ mean SFT + 1, GRPO's mean reward over
its last quarter above its first; and with the plant, mean planted SFT ≥ 5 J&F below the correct runs'.

    python bench/bench_learning_runs.py --seeds 0 1 2 --plant mirror-boxes
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_orchestration import run_mode  # noqa: E402
from bench.plants import PLANTS, plant_mirror_boxes  # noqa: E402
from bench.results_io import write_result  # noqa: E402
from stages.core.live import read_live  # noqa: E402

TARGETS = {  # issue 61
    "ceiling_jf_min": 40.0,  # every seed
    "grpo_min_share_above_constant": 0.4,  # GRPO ≥ constant + this × (ceiling − constant), every seed
    "grpo_box_iou_min": 0.30,  # GRPO's keyframe box IoU, every seed
    "swap_drop_min": 5.0,  # GRPO's J&F minus its J&F on swapped queries, every seed
    "parse_rate_min": 0.95,  # after SFT and after GRPO, every seed
    "default_run_max_s": 600.0,  # every seed
    "sft_min_over_base": 2.0,  # mean over the seeds
    "grpo_min_over_sft": 1.0,  # mean over the seeds
    "planted_sft_min_below": 5.0,  # mean SFT of the correct runs minus that of the planted ones
}
KEYS = ("JF_overall", "J_overall", "F_overall", "JF_referring", "JF_reasoning", "parse_failure_rate",
        "n_answer_no_boxes", "n_answer_degenerate_boxes", "keyframe_area_ratio", "keyframe_box_iou", "n_expressions",
        "swap_JF_overall", "swap_own_JF_overall", "swap_n_expressions")


def score_model(repo: Path, model_path: Path, out: Path) -> dict:
    """The evaluate stage's function on the run's eval pool for another model (no ceiling: the stage has it)."""
    from stages.evaluate import evaluate
    from stages.params import load_params

    params = load_params(repo / "params.yaml")
    block = dataclasses.replace(params.evaluate, model_path=str(model_path), reference=False)
    sam2 = dataclasses.replace(params.sam2, checkpoint=str(repo / params.sam2.checkpoint),
                               config=str(repo / params.sam2.config))
    report = evaluate(block, params.model, sam2, params.keyframes.train_size, repo / params.data.root,
                      repo / "data/keyframes/eval.parquet", out, out / "eval.md",
                      index_dir=repo / params.data.index_dir)
    return {k: round(float(report.metrics[k]), 4) for k in KEYS if k in report.metrics}


PARSE_FAILURES = ("no <answer>...</answer>", "answer not JSON", "JSON not the answer's fields")


def parse_failure_kind(response: str) -> str:
    """Why an answer that the evaluation could not parse failed, from the answer format's definition (Veason-R1:
    `<answer>{"keyframe_timestamp": int, "bbox_2d_list": [[x1, y1, x2, y2], ...]}</answer>`): no closed answer
    tags; a payload that is not JSON; or JSON that is not those fields (a wrong key or value shape)."""
    start = response.find("<answer>")
    end = response.find("</answer>", start + len("<answer>")) if start >= 0 else -1
    if end < 0:
        return PARSE_FAILURES[0]
    try:
        json.loads(response[start + len("<answer>"):end])
    except ValueError:
        return PARSE_FAILURES[1]
    return PARSE_FAILURES[2]


def answer_statuses(answers_path: Path) -> dict:
    """The evaluation's answer statuses (answers.parquet) counted, and its parse failures by kind."""
    answers = pd.read_parquet(answers_path, columns=["status", "response"])
    failed = answers.loc[answers["status"] == "parse_failure", "response"]
    kinds = failed.map(parse_failure_kind).value_counts()
    return {"statuses": {k: int(v) for k, v in answers["status"].value_counts().sort_index().items()},
            "parse_failures": {kind: int(kinds.get(kind, 0)) for kind in PARSE_FAILURES}}


def quarters(curve: pd.DataFrame) -> dict:
    """Mean of every reward column over each quarter of GRPO's steps."""
    parts = np.array_split(np.arange(len(curve)), 4)
    return {col: [round(float(curve[col].iloc[idx].mean()), 4) for idx in parts]
            for col in curve.columns if col.startswith("reward")}


def plant_before_training(plant: str):
    """`run_mode`'s `prepare` for a planted run: the pipeline up to the keyframes stage, the plant applied to its
    outputs, and the changed outputs committed to DVC (`dvc commit`), so the timed repro trains on them."""
    def prepare(repo: Path, env: dict) -> None:
        proc = subprocess.run([sys.executable, "-m", "flows.cli", "repro", "--", "keyframes"], cwd=repo, env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"plant {plant}: repro keyframes failed:\n{(proc.stdout + proc.stderr)[-4000:]}")
        print(json.dumps({"plant": plant, "mirrored": plant_mirror_boxes(repo / "data" / "keyframes")}), flush=True)
        subprocess.run([sys.executable, "-m", "dvc", "commit", "-f", "keyframes"], cwd=repo, env=env, check=True,
                       capture_output=True)
    return prepare


def run_seed(seed: int, work: Path, profile: str | None = None, plant: str | None = None) -> dict:
    overrides = {"tiny_models.seed": seed, "sft.seed": seed, "grpo.seed": seed}
    started = time.perf_counter()
    # vrsflow repro in a fresh copy, stage by stage
    timed = run_mode("after", profile, work, overrides, prepare=plant_before_training(plant) if plant else None)
    repo = work / "after" / "repo"
    metrics = timed["pipeline_metrics"]  # sft, grpo, eval, benchmarks: read by run_mode
    from stages.params import load_params

    params = load_params(repo / "params.yaml")
    # the base SFT trains from: model.path (the committed pre-trained one since issue 47; the random tiny one before)
    evals = {"base": score_model(repo, repo / params.model.path, work / "eval-base"),
             "sft": score_model(repo, repo / params.sft.out_dir / "merged", work / "eval-sft"),
             "grpo": {k: round(float(metrics["eval"][k]), 4) for k in KEYS if k in metrics["eval"]}}
    answers = {"base": answer_statuses(work / "eval-base" / "answers.parquet"),
               "sft": answer_statuses(work / "eval-sft" / "answers.parquet"),
               "grpo": answer_statuses(repo / "data" / "evaluate" / "answers.parquet")}
    ceiling, empty, constant = ({k.removeprefix(prefix): round(float(v), 4) for k, v in metrics["eval"].items()
                                 if k.startswith(prefix)} for prefix in ("ceiling_", "empty_", "constant_"))
    return {"overrides": overrides, "plant": plant, "segmenter": params.evaluate.segmenter,
            "reward_components": list(params.reward.components),
            "eval": evals, "answers": answers, "ceiling": ceiling, "empty": empty, "constant": constant,
            "sft_format_rate": {k: metrics["sft"][k] for k in ("format_rate_before", "format_rate_after")},
            "grpo_reward_by_quarter": quarters(pd.DataFrame(read_live(repo / "metrics" / "live" / "grpo"))),
            "benchmarks": metrics["benchmarks"],
            "run_s": timed["total_s"], "stages_s": {k: v["wall_s"] for k, v in timed["stages"].items()},
            "load_avg_1m_start_end": timed["load_avg_1m_start_end"],
            "wall_s_with_scoring": round(time.perf_counter() - started, 1)}


def seed_targets(run: dict) -> dict[str, bool]:
    """Issue 61's per-seed targets for one run (a `run_seed` record): each True when met."""
    ev, ceiling, constant = run["eval"], run["ceiling"]["JF_overall"], run["constant"]["JF_overall"]
    grpo = ev["grpo"]
    return {
        "ceiling_jf": ceiling >= TARGETS["ceiling_jf_min"],
        "grpo_above_constant": grpo["JF_overall"] >= constant + TARGETS["grpo_min_share_above_constant"] * (
            ceiling - constant),
        "grpo_box_iou": grpo["keyframe_box_iou"] >= TARGETS["grpo_box_iou_min"],
        "grpo_swap_drop": grpo["JF_overall"] - grpo["swap_JF_overall"] >= TARGETS["swap_drop_min"],
        **{f"{model}_parse_rate": 1 - ev[model]["parse_failure_rate"] >= TARGETS["parse_rate_min"]
           for model in ("sft", "grpo")},
        "default_run_s": run["run_s"] <= TARGETS["default_run_max_s"],
    }


def mean_of(runs: dict, model: str, key: str = "JF_overall") -> float:
    return round(float(np.mean([r["eval"][model][key] for r in runs.values()])), 2)


def summarise(runs: dict, planted: dict | None = None) -> dict:
    """Means and spreads over the seeds; issue 61's targets per seed (`targets_by_seed`), over the seeds
    (`targets_over_seeds`) and overall (`targets_met`: a per-seed target is met when it is met in every seed)."""
    out: dict = {}
    for model in ("base", "sft", "grpo"):
        values = [r["eval"][model]["JF_overall"] for r in runs.values()]
        out[f"{model}_JF_mean"], out[f"{model}_JF_spread"] = round(float(np.mean(values)), 2), round(
            float(np.ptp(values)), 2)
        out[f"{model}_swap_JF_mean"] = mean_of(runs, model, "swap_JF_overall")
        out[f"{model}_box_iou_mean"] = mean_of(runs, model, "keyframe_box_iou")
    # the same data and segmenter in every run: one value of each expected
    for row in ("ceiling", "empty", "constant"):
        out[f"{row}_JF"] = sorted({r[row]["JF_overall"] for r in runs.values()})
    out["run_s_max"] = max(r["run_s"] for r in runs.values())
    rewards = [r["grpo_reward_by_quarter"]["reward"] for r in runs.values()]
    out["grpo_reward_first_quarter_mean"] = round(float(np.mean([q[0] for q in rewards])), 4)
    out["grpo_reward_last_quarter_mean"] = round(float(np.mean([q[-1] for q in rewards])), 4)
    out["targets_by_seed"] = {seed: seed_targets(r) for seed, r in runs.items()}
    over = {"sft_above_base": out["sft_JF_mean"] >= out["base_JF_mean"] + TARGETS["sft_min_over_base"],
            "grpo_above_sft": out["grpo_JF_mean"] >= out["sft_JF_mean"] + TARGETS["grpo_min_over_sft"],
            "grpo_reward_rises": out["grpo_reward_last_quarter_mean"] > out["grpo_reward_first_quarter_mean"]}
    if planted:
        out["planted_sft_JF_mean"] = mean_of(planted, "sft")
        out["planted_grpo_JF_mean"] = mean_of(planted, "grpo")
        over["planted_bug_shows"] = out["planted_sft_JF_mean"] <= out["sft_JF_mean"] - TARGETS["planted_sft_min_below"]
    out["targets_over_seeds"] = over
    names = next(iter(out["targets_by_seed"].values()))
    out["targets_met"] = {**{name: all(t[name] for t in out["targets_by_seed"].values()) for name in names}, **over}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, help="results file; default bench/results/learning-runs.json")
    parser.add_argument("--profile", help="a params profile applied first (ci: a quick check of this script)")
    parser.add_argument("--plant", choices=PLANTS, help="also train each seed with this bug planted (bench/plants.py)")
    args = parser.parse_args()
    runs: dict = {}
    planted: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-learning-runs-") as tmp:
        for seed in args.seeds:
            runs[str(seed)] = run_seed(seed, Path(tmp) / f"seed{seed}", args.profile)
            print(json.dumps({seed: {k: v for k, v in runs[str(seed)].items() if k != "benchmarks"}}), flush=True)
        for seed in args.seeds if args.plant else []:
            planted[str(seed)] = run_seed(seed, Path(tmp) / f"planted{seed}", args.profile, args.plant)
            print(json.dumps({f"planted {seed}": {k: v for k, v in planted[str(seed)].items() if k != "benchmarks"}}),
                  flush=True)
    figures = {"runs": runs, **({"planted": planted} if planted else {}), "summary": summarise(runs, planted),
               "targets": TARGETS, "profile": args.profile or "default", "plant": args.plant}
    out = args.out or ROOT / "bench" / "results" / "learning-runs.json"
    write_result(out.stem, figures, "the base (row base): the model before SFT, same evaluation; the empty answer: "
                 "no boxes, empty masks (the evaluate stage's empty_*); the ceiling: the ground-truth answers through "
                 "the same segmenter (the evaluate stage's ceiling_*); the constant answer: the SFT traces' training "
                 "prior given to every query (the evaluate stage's constant_*)", out=out)


if __name__ == "__main__":
    main()
