"""How much SFT data the pre-trained tiny base needs to keep the answer format: SFT variants scored on the eval pool.

The default run's SFT taught the committed pre-trained base (`models/pretrain`) the teacher's ~550-character
reasoning and broke its answers: 27–40 % of the eval pool's answers did not parse after SFT
(`bench/results/learning-runs.json` before the change). This bench asks whether that is the number of passes, the
learning rate, LoRA, or the number of distinct traces. Each variant is a set of params overrides (the data's:
`synth.default.n_videos_train`, `cot.traces_per_sample`; SFT's: `sft.epochs`, `sft.learning_rate`, `sft.lora_r`,
…). For each distinct data setting a fresh git + DVC copy of the project (tests/pipeline_repo.py) runs the
pipeline up to the SFT shards as a user does (`vrsflow repro -- shard`); each variant then trains with the SFT
stage's own entry point (`python -m stages.sft --params`, its usual two processes) and is scored by the evaluate
stage's own `evaluate` on the eval pool (bench_learning_runs' `score_model`: J&F, the share of answers that do not
parse, and why they do not). The eval pool is the same in every variant: the synth generator seeds each video by
its key, so more training videos leave the validation videos as they are.

    python research/issue47/bench_sft_data.py \\
        --variant 8v-8ep synth.default.n_videos_train=8 sft.epochs=8 \\
        --variant 48v-2ep synth.default.n_videos_train=48 sft.epochs=2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.bench_learning_runs import answer_statuses, score_model  # noqa: E402
from bench.results_io import write_result  # noqa: E402
from tests.pipeline_repo import env_with_venv, make_repo, override_params  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"  # this study's results, beside it


def parse_variant(items: list[str]) -> tuple[str, dict[str, object]]:
    """`NAME KEY=VALUE ...` → (name, overrides); values are read as YAML (2 → int, 1e-3 → str: write 0.001)."""
    name, *pairs = items
    overrides: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--variant {name}: {pair!r} is not KEY=VALUE")
        overrides[key] = yaml.safe_load(value)
    return name, overrides


def data_overrides(overrides: dict[str, object]) -> dict[str, object]:
    """The overrides a variant's data copy is made with: all but SFT's own block (variants that differ only in
    `sft.*` share one copy; any other key may change the shards, so it gets a copy of its own)."""
    return {k: v for k, v in overrides.items() if k.split(".")[0] != "sft"}


def bench_env() -> dict[str, str]:
    """The project's venv, offline, and a Prefect of the copy's own (no server the caller set)."""
    env = env_with_venv()
    env.pop("PREFECT_API_URL", None)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1")
    return env


def data_repo(work: Path, overrides: dict[str, object], cache: dict[str, Path]) -> Path:
    """A project copy with the data overrides applied and `vrsflow repro -- shard` run; one per data setting."""
    data = data_overrides(overrides)
    key = json.dumps(data, sort_keys=True)
    if key not in cache:
        repo = make_repo(ROOT, work / f"data{len(cache)}" / "repo", params_overrides=data)
        env = bench_env()
        env["PREFECT_HOME"] = str(repo.parent / "prefect-home")
        subprocess.run([sys.executable, "-m", "flows.prefect_api", "init-db"], cwd=ROOT, env=env, check=True,
                       stdout=subprocess.DEVNULL)
        proc = subprocess.run([sys.executable, "-m", "flows.cli", "repro", "--", "shard"], cwd=repo, env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"vrsflow repro -- shard ({key}) failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
        cache[key] = repo
    return cache[key]


def run_variant(name: str, overrides: dict[str, object], work: Path, repos: dict[str, Path]) -> dict:
    """Train SFT with the variant's overrides in its data copy (own out_dir), then score it on the eval pool."""
    repo = data_repo(work, overrides, repos)
    params = override_params(yaml.safe_load((repo / "params.yaml").read_text()), overrides)
    params["sft"]["out_dir"] = f"models/variants/{name}"
    params["sft"]["checkpoint_dir"] = f"models/checkpoints/variants-{name}"
    params_file = repo / f"params-{name}.yaml"
    params_file.write_text(yaml.safe_dump(params, sort_keys=False))
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "stages.sft", "--params", str(params_file)], cwd=repo, env=bench_env(),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{name}: SFT failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    train_s = round(time.perf_counter() - started, 1)
    sft = json.loads((repo / "metrics" / "sft.json").read_text())
    scored = work / f"eval-{name}"
    evaluation = score_model(repo, repo / params["sft"]["out_dir"] / "merged", scored)
    return {"overrides": overrides, "sft_s": train_s,
            "sft": {k: sft[k] for k in ("train_samples", "steps", "final_loss", "format_rate_before",
                                        "format_rate_after", "held_out_samples")},
            "eval": evaluation, "answers": answer_statuses(scored / "answers.parquet")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", nargs="+", action="append", required=True, metavar="NAME KEY=VALUE",
                        help="a variant: its name, then params overrides")
    parser.add_argument("--out", type=Path, help="results file; default research/issue47/results/sft-data.json")
    args = parser.parse_args()
    variants = dict(parse_variant(items) for items in args.variant)
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-sft-data-") as tmp:
        repos: dict[str, Path] = {}
        for name, overrides in variants.items():
            results[name] = run_variant(name, overrides, Path(tmp), repos)
            print(json.dumps({name: results[name]}), flush=True)
    out = args.out or RESULTS / "sft-data.json"
    first = next(iter(variants))  # the file's keys are sorted: name the baseline
    write_result(out.stem, {"variants": results}, f"the first variant given ({first}; the default before the change)",
                 out=out)


if __name__ == "__main__":
    main()
