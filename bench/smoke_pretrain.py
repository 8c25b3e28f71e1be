"""Smoke and throughput of the `pretrain` stage at a chosen size: the stage's own function on the tiny random
Qwen2.5-VL the `tiny_models` code builds, with params.yaml's `pretrain` block and `--set pretrain.KEY=VALUE`
overrides (a short run shortens the curriculum to fit: `--steps N` gives one phase of N steps, the last phase's
scenes; `--phases 0 1` one run per phase's scenes). Prints the stage's metrics (samples/s, device, each seed's
held-out figures) as JSON; with `--out FILE` also writes them as a results file.

    python bench/smoke_pretrain.py --steps 20 --set pretrain.batch_size=8 --set pretrain.seeds=[0]
    python bench/smoke_pretrain.py --steps 200 --set pretrain.batch_size=128 --set pretrain.loader_workers=4  # GPU
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results_io import write_result  # noqa: E402
from stages.params import apply_overrides, read_params_file  # noqa: E402
from stages.params.model import ModelParams  # noqa: E402
from stages.pretrain import pretrain  # noqa: E402
from stages.tiny_models.tiny_qwen import build_tiny_qwen  # noqa: E402


def run(params, block, phase: int | None, steps: int) -> dict:
    """The stage on a freshly built tiny base; with `steps`, one phase of that many steps (the scenes of
    curriculum phase `phase`). Returns the stage's metrics and seeds.json."""
    if steps:
        chosen = block.curriculum[phase if phase is not None else -1]
        block = dataclasses.replace(block, steps=steps, curriculum=(dataclasses.replace(chosen, steps=steps),))
    with tempfile.TemporaryDirectory(prefix="smoke-pretrain-") as tmp:
        base, out = Path(tmp) / "tiny", Path(tmp) / "pretrain"
        build_tiny_qwen(params.tiny_models, base)
        block = dataclasses.replace(block, base=str(base), out_dir=str(out), checkpoint_dir=str(Path(tmp) / "ckpt"))
        report = pretrain(block, ModelParams(path=str(out)), params.keyframes.train_size, out, Path(tmp) / "metrics")
        return {"metrics": report.metrics, "seeds": json.loads((out / "seeds.json").read_text())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=0, help="one phase of N steps (the last phase's scenes)")
    parser.add_argument("--phases", type=int, nargs="+", help="with --steps: one run per curriculum phase index")
    parser.add_argument("--set", action="append", default=[], help="override KEY=VALUE, e.g. pretrain.batch_size=8")
    parser.add_argument("--out", type=Path, help="also write the figures as a results file (bench/results_io)")
    args = parser.parse_args()
    raw = read_params_file(Path(__file__).resolve().parents[1] / "params.yaml")
    params, _ = apply_overrides(raw, dict(item.split("=", 1) for item in args.set))
    runs = {}
    for phase in args.phases or [None]:
        runs[str(phase)] = run(params, params.pretrain, phase, args.steps)
        print(json.dumps(runs[str(phase)], indent=1, sort_keys=True), flush=True)  # bench/gpu_pretrain.py reads it
    figures = {"overrides": args.set, "steps": args.steps, "runs": runs}
    if args.out:
        write_result(args.out.stem, figures, "none: the stage's throughput (samples/s) on this machine", out=args.out)


if __name__ == "__main__":
    main()
