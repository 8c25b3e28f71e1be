"""Benchmark: padding-free packing in the SFT stage (`sft.packing`) against right-padded micro-batches, on the CPU.

The whole `train_sft` of the current tree, each run in a fresh process on a pipeline copy's data/shards and tiny
model, with the copy's params.yaml (the default) and, per setting, `sft.batch_size` set to each of `--batches`
(1 = the default: one sample per micro-batch and process) with `sft.packing` false then true. Reported per run:
the share of padding tokens in the micro-batches as padded rows would hold it and as the model was fed (the
stage's `padding_share_padded` / `padding_share`, the main process's batches), samples/s (the Trainer's), wall
seconds, the held-out format rate after, and the loss curve; per batch size the largest difference between the
two curves (packing changes the layout, not the arithmetic: the curves agree to float rounding).

    python bench/bench_sft_packing.py --pipeline /path/to/pipeline-copy [--batches 1 4]   # → sft-packing.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.results_io import write_result  # noqa: E402

RUN_SNIPPET = """
import dataclasses, json, sys, time
from pathlib import Path
from stages.params import load_params
from stages.sft import train_sft
out, batch, packing = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "true"
params = load_params(Path("params.yaml"))
sft = dataclasses.replace(params.sft, batch_size=batch, packing=packing)
started = time.perf_counter()
report = train_sft(sft, params.model, Path("data/shards"), out / "sft", out / "ckpt", out / "metrics")
curve = [line.split("\\t") for line in (out / "metrics/live/sft/plots/metrics/loss.tsv").read_text().splitlines()[1:]]
print(json.dumps({"wall_s": round(time.perf_counter() - started, 2), "processes": sft.processes,
                  "grad_accum": sft.grad_accum, "epochs": sft.epochs, **report.metrics,
                  "loss_curve": [float(loss) for _, loss in curve]}))
"""


def run(cwd: Path, out: Path, batch: int, packing: bool, script: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, str(script), str(out), str(batch), "true" if packing else "false"],
                          cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"train_sft (batch {batch}, packing {packing}) failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


KEEP = ("wall_s", "samples_per_s", "tokens_per_s", "steps", "final_loss", "format_rate_before", "format_rate_after",
        "padding_share_padded", "padding_share", "processes", "grad_accum", "epochs", "train_samples", "loss_curve")


def bench(pipeline: Path, batches: list[int]) -> dict:
    settings: dict = {}
    with tempfile.TemporaryDirectory(prefix="vrsflow-bench-packing-") as tmp:
        script = Path(tmp) / "run_sft.py"  # a file, not `-c`: `-c` would put the pipeline folder first on sys.path
        script.write_text(RUN_SNIPPET)
        # the runs' folder: the copy's data, models and params, not its code (the launched workers put their folder
        # first on sys.path, so a folder holding the copy's stages/ would run those)
        cwd = Path(tmp) / "cwd"
        cwd.mkdir()
        for name in ("data", "models", "params.yaml"):
            (cwd / name).symlink_to(pipeline / name)
        for batch in batches:
            runs = {}
            for packing in (False, True):
                key = "packed" if packing else "padded"
                result = run(cwd, Path(tmp) / f"{batch}-{key}", batch, packing, script)
                runs[key] = {k: result[k] for k in KEEP if k in result}
                sys.stderr.write(json.dumps({"batch_size": batch, key: {k: v for k, v in runs[key].items()
                                                                        if k != "loss_curve"}}) + "\n")
            a, b = runs["padded"]["loss_curve"], runs["packed"]["loss_curve"]
            settings[f"batch_{batch}"] = {
                "batch_size": batch, **runs,
                "curve_max_abs_diff": round(max(abs(x - y) for x, y in zip(a, b, strict=True)), 6),
                "curve_max_rel_diff": round(max(abs(x - y) / abs(x) for x, y in zip(a, b, strict=True)), 6),
                "samples_per_s_ratio": round(runs["packed"]["samples_per_s"] / runs["padded"]["samples_per_s"], 3)}
    return {"pipeline": "default params.yaml (dvc repro shard tiny_models in a fresh copy)", "settings": settings}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipeline", type=Path, required=True, help="pipeline copy: data/shards, tiny model")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4], help="sft.batch_size settings (1: default)")
    parser.add_argument("--out", type=Path, default=None, help="default: bench/results/sft-packing.json")
    args = parser.parse_args()
    figures = bench(args.pipeline.resolve(), args.batches)
    name = args.out.stem if args.out else "sft-packing"
    write_result(name, figures, "right-padded micro-batches (sft.packing: false), same params, data and order",
                 code=("stages/sft", "stages/models", "bench/bench_sft_packing.py"), out=args.out)


if __name__ == "__main__":
    main()
