"""Where the default run's time goes in GRPO, and what each way of spending less gives up: the grpo stage's own
function (`stages.grpo.run_grpo`, engine trl) on a project copy where `dvc repro sft` has run, once per variant.

A variant is a name and `KEY=VALUE` overrides of params.yaml (`--variant fewer grpo.max_steps=48`). Per variant:
the stage's wall time, its summary (reward over the first and last pass over the pool, per component, response
length), and the curve's mean reward per quarter of the run. The variants run one after another on the same
machine, each with the stage's own processes (grpo.processes), so their times compare.

    python research/issue24/bench_grpo.py --repo /tmp/copy --variant default \
        --variant ppo2 grpo.ppo_epochs=2 grpo.max_steps=48
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.results_io import write_result  # noqa: E402
from stages.core.live import read_live  # noqa: E402
from stages.params import apply_overrides, read_params_file  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"  # this study's results, beside it

SUMMARY_KEYS = ("reward_first", "reward_last", "reward_gain", "reward_format_first", "reward_format_last",
                "reward_keyframe_first", "reward_keyframe_last", "reward_spatial_first", "reward_spatial_last",
                "reward_consistency_first", "reward_consistency_last", "reward_parsed_first", "reward_parsed_last",
                "response_length_last", "kl_last", "steps", "window", "wall_s", "reward_s")


def run_variant(repo: Path, overrides: list[str], tmp: Path) -> dict:
    """The grpo stage on `repo`'s SFT model and shards with `overrides`; outputs go to `tmp`."""
    from stages.grpo import run_grpo

    raw = read_params_file(repo / "params.yaml")
    params = apply_overrides(raw, dict(item.split("=", 1) for item in overrides))[0]
    grpo = dataclasses.replace(params.grpo, out_dir=str(tmp / "grpo"), checkpoint_dir=str(tmp / "checkpoints"))
    live = tmp / "live" / "grpo"
    started = time.perf_counter()
    report = run_grpo(grpo, params.reward, params.sam2, live, repo / "params.yaml")
    wall = time.perf_counter() - started
    rewards = [row["reward"] for row in read_live(live)]
    quarters = [round(float(np.mean(part)), 4) for part in np.array_split(np.array(rewards), 4)]
    return {"stage_wall_s": round(wall, 1), "reward_by_quarter": quarters,
            "rollouts": grpo.batch_size * grpo.num_generations * grpo.max_steps,
            "optimizer_steps": grpo.max_steps * grpo.ppo_epochs,
            **{key: round(float(report.metrics[key]), 4) for key in SUMMARY_KEYS if key in report.metrics}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True, help="project copy where `dvc repro sft` has run")
    parser.add_argument("--variant", nargs="+", action="append", required=True, metavar="NAME [KEY=VALUE ...]",
                        help="a name and its overrides; repeat for more variants")
    parser.add_argument("--out", type=Path, help="results file, named as its record; default results/grpo.json here")
    args = parser.parse_args()
    repo = args.repo.resolve()
    out = args.out.resolve() if args.out else RESULTS / "grpo.json"  # before the chdir: relative to where it ran
    figures: dict = {"variants": {}}
    os.chdir(repo)  # the stage reads its shards and model by the params' relative paths
    for name, *overrides in args.variant:
        with tempfile.TemporaryDirectory(prefix=f"bench-grpo-{name}-") as tmp:
            figures["variants"][name] = {"overrides": overrides, **run_variant(repo, overrides, Path(tmp))}
        print(json.dumps({name: figures["variants"][name]}), flush=True)
    name = out.stem if out else "grpo"  # the record names the file it is in
    write_result(name, figures, "the first variant (params.yaml as it is, unless its overrides say otherwise)",
                 out=out)


if __name__ == "__main__":
    main()
