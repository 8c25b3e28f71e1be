"""Held-out grounding of a `pretrain` run while it trains: each seed's saved state (`checkpoint_dir/seed-<k>/state.pt`)
scored on held-out samples of every curriculum phase, so a run that takes hours across several sittings shows
whether it binds before it ends.

The stage itself checks only at the end, on its last phase. Here each phase gets its own held-out stream,
`derive_seed(0, "pretrain", "progress", phase, i)` (apart from the training and the stage's check streams), with
the colours that phase asks for at the state's step (`colours_at`, what the seed has been shown so far). The
figures are the stage's own (`grounding_check`: parse rate, box IoU, boxes landed and the share on the asked
target), next to the mean box's IoU: a model that has learned only where things usually are scores that.
Each call adds one row per seed and step to `--out` (rows already there are kept), so the file is the run's
learning curve on held-out samples.

    python research/issue47/pretrain_progress.py --params run.yaml \
        --out research/issue47/results/pretrain-progress-cpu.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.results_io import write_result  # noqa: E402
from stages.core.io import derive_seed  # noqa: E402
from stages.params import load_params  # noqa: E402
from stages.params.synth import SynthScale  # noqa: E402
from stages.pretrain import STATE, fresh_model, grounding_check  # noqa: E402
from stages.pretrain.stream import colours_at, draw_sample, phase_at  # noqa: E402


def progress_samples(params, phase_index: int, step: int, n: int, size: int) -> tuple[list, tuple[str, ...]]:
    """(`n` held-out samples of curriculum phase `phase_index`, the colours they ask): the colours that phase has
    grown to by optimizer step `step` (all of them once the run is past the phase)."""
    phase = params.curriculum[phase_index]
    start = sum(p.steps for p in params.curriculum[:phase_index])
    within = min(max(step - start, 0), phase.steps - 1)
    colours = colours_at(phase, within)
    return [draw_sample(np.random.default_rng(derive_seed(0, "pretrain", "progress", phase_index, i)),
                        f"progress/{phase_index}/{i}", phase, colours, size, SynthScale()) for i in range(n)], colours


def load_seed(params, state_path: Path):
    """(model, processor, step) from a seed's saved state, in the stage's own model (`fresh_model`)."""
    model, processor = fresh_model(params)
    state = torch.load(state_path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    return model, processor, int(state["step"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=Path("params.yaml"), help="the run's params file")
    parser.add_argument("--samples", type=int, default=48, help="held-out samples per phase")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the run keeps the others)")
    parser.add_argument("--out", type=Path, required=True, help="results file; rows are added to it")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_params(args.params)
    params, size = loaded.pretrain, loaded.keyframes.train_size
    seed_dirs = sorted(Path(params.checkpoint_dir).glob("seed-*"))
    states = [d / STATE for d in seed_dirs if (d / STATE).is_file()]
    if not states:
        sys.exit(f"pretrain_progress: no saved state under {params.checkpoint_dir} (pretrain.checkpoint_dir of "
                 f"{args.params})")
    previous = json.loads(args.out.read_text())["figures"]["rows"] if args.out.is_file() else []
    rows = {(r["seed"], r["step"], r["phase"]): r for r in previous}
    for state_path in states:
        seed = int(state_path.parent.name.removeprefix("seed-"))
        model, processor, step = load_seed(params, state_path)
        current, _ = phase_at(params.curriculum, step)
        for k in range(len(params.curriculum)):
            samples, colours = progress_samples(params, k, step, args.samples, size)
            figures = grounding_check(model, processor, samples, params.max_new_tokens)
            row = {"seed": seed, "step": step, "phase": k, "in_phase": params.curriculum[k] is current,
                   "colours": list(colours),
                   **{key: figures[key] for key in ("parse_rate", "keyframe_hit_rate", "box_iou", "box_iou_plain",
                                                    "box_iou_synth", "landed", "on_target", "mean_box_iou",
                                                    "check_loss")}}
            rows[(seed, step, k)] = row
            print(json.dumps(row, sort_keys=True), flush=True)
    figures = {"params": str(args.params), "samples_per_phase": args.samples,
               "rows": [rows[key] for key in sorted(rows)]}
    write_result(args.out.stem, figures, "the mean box (mean_box_iou): where things usually are, whatever is asked",
                 out=args.out)


if __name__ == "__main__":
    main()
