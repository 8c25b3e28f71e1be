"""The default run's model stages on whatever device torch finds (a GPU where there is one), timed per stage: the
stages' own functions — `build_tiny_models`, `train_sft`, `run_grpo` (engine trl) — on a project copy's shards,
in that order, each from the one before it, with params.yaml as it is plus `--set` overrides.

The copy needs params.yaml and data/shards (`dvc repro shard` has run there); models/, checkpoints and metrics are
written under it. A stage that fails is recorded with its error's last line and the stages after it are skipped.

    python bench/bench_gpu_stages.py --repo /tmp/copy [--set grpo.processes=1 ...] [--out bench/results/x.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results_io import write_result  # noqa: E402
from stages.params import apply_overrides, read_params_file  # noqa: E402

# one process per stage: one GPU (or the CPU's cores, as the stage is told)
ONE_DEVICE = {"sft.processes": "1", "grpo.processes": "1"}
GRPO_KEYS = ("reward_first", "reward_last", "reward_gain", "reward_format_last", "reward_spatial_first",
             "reward_spatial_last", "reward_consistency_last", "kl_last", "steps", "reward_s")


def numbers(metrics: dict, keys: tuple[str, ...] | None = None) -> dict:
    return {k: round(float(v), 4) for k, v in metrics.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and (keys is None or k in keys)}


def run_stages(repo: Path, overrides: dict[str, str]) -> dict:
    import torch

    from stages.grpo import run_grpo
    from stages.sft import train_sft
    from stages.tiny_models import build_tiny_models

    params = apply_overrides(read_params_file(repo / "params.yaml"), {**ONE_DEVICE, **overrides})[0]
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    stages = {}
    steps = [
        ("tiny_models", lambda: build_tiny_models(params.tiny_models, Path(params.tiny_models.out_dir)), None),
        ("sft", lambda: train_sft(params.sft, params.model, Path("data/shards"), Path(params.sft.out_dir),
                                  Path(params.sft.checkpoint_dir), Path("metrics")), None),
        ("grpo", lambda: run_grpo(params.grpo, params.reward, params.sam2, Path("metrics/live/grpo"),
                                  repo / "params.yaml"), GRPO_KEYS),
    ]
    for name, run, keys in steps:
        started = time.perf_counter()
        try:
            report = run()
        except Exception as error:  # recorded, not raised: the stages before it keep their figures
            traceback.print_exc()
            stages[name] = {"error": f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[-1]}",
                            "wall_s": round(time.perf_counter() - started, 1)}
            print(json.dumps({name: stages[name]}), flush=True)
            break
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        stages[name] = {"wall_s": round(time.perf_counter() - started, 1), **numbers(report.metrics, keys)}
        print(json.dumps({name: stages[name]}), flush=True)
    return {"device": device, "overrides": {**ONE_DEVICE, **overrides}, "stages": stages}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True, help="project copy with params.yaml and data/shards")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="params overrides")
    parser.add_argument("--out", type=Path, help="results file, named as its record; default gpu-stages.json")
    args = parser.parse_args()
    bad = [item for item in args.set if "=" not in item]
    if bad:
        raise SystemExit(f"--set: '{bad[0]}' is not KEY=VALUE")
    repo = args.repo.resolve()
    out = args.out.resolve() if args.out else None  # before the chdir below: relative to where it was run
    os.chdir(repo)  # the stages read and write by the params' relative paths
    figures = run_stages(repo, dict(item.split("=", 1) for item in args.set))
    name = out.stem if out else "gpu-stages"  # the record names the file it is in
    write_result(name, figures, "none (absolute stage times; the CPU default's are in orchestration-default.json)",
                 out=out)
    if any("error" in stage for stage in figures["stages"].values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
