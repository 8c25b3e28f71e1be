"""Does the tiny SAM2 learn to segment and track what a box points at? The `pretrain_sam2` stage per seed, and the
evaluation's ceiling with the SAM2 it trains.

Per seed (`--seeds`): the stage's own function on the tiny random SAM2 built by the `tiny_models` code (params from
params.yaml, `--set pretrain_sam2.KEY=VALUE` overrides), timed, with its tracking check on held-out generated videos
before and after (mean per-frame IoU of each object tracked from its box where it is largest, and the IoU on that
prompted frame) and the loss curve's first and last tenth. With `--repo DIR` (a copy of the project where
`dvc repro keyframes tiny_models` has run), also the ceiling of the default evaluation — the evaluate stage's own
code on the eval pool with the ground-truth answer as the policy (bench_learning.py's `ceiling`) — once with the
SAM2 the copy's params name (the committed pre-trained one) and once per trained seed. `--keep DIR` keeps each
seed's trained folder; `--architecture ++KEY=VALUE` changes the tiny SAM2 trained (a Hydra override after
tiny_models' own, recorded with the figures). With `--init DIR` (fine-tune a trained SAM2) an `--architecture`
override is added to the copied folder's config instead: one that changes how the model runs
(`++model.multimask_output_for_tracking=false`), since one that changes a weight's shape fails where SAM2's builder
loads the checkpoint.

    python bench/bench_sam2_pretrain.py --seeds 0 1 2 --jobs 3 --repo /tmp/scratch-repo
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_learning import ceiling  # noqa: E402
from bench.results_io import write_result  # noqa: E402
from stages.core.lifeline import process_pool  # noqa: E402
from stages.params import apply_overrides, load_params, read_params_file  # noqa: E402
from stages.params.sam2 import Sam2Params  # noqa: E402
from stages.pretrain_sam2 import CHECKPOINT, CONFIG, CURVE, pretrain_sam2  # noqa: E402
from stages.tiny_models.tiny_sam2 import build_tiny_sam2  # noqa: E402

BASELINE = "the tiny random SAM2 (tracking check _before figures)"
BASELINE_INIT = "the SAM2 that --init names, before fine-tuning (tracking check _before figures)"
BASELINE_CEILING = "the ceiling through the SAM2 the repo's params name"


def read_params(raw: dict, overrides: list[str]):
    """The params of `raw` (params.yaml as read once, at the start) with `--set KEY=VALUE` overrides."""
    return apply_overrides(raw, dict(item.split("=", 1) for item in overrides))[0]


def pretrain_seed(raw: dict, overrides: list[str], seed: int, tmp: Path,
                  architecture: tuple[str, ...] = (), init: Path | None = None) -> tuple[dict, Path]:
    """One stage run from a freshly built tiny SAM2 (tiny_models seed = stage seed = `seed`), or from the SAM2 folder
    `init` (model.pt + config.yaml: a trained one, fine-tuned further); (figures, out dir).
    Takes params.yaml as read by the parent and the overrides, not the params (the params objects do not pickle into
    a worker process), so what the record says trained is what trained, whatever happens to params.yaml meanwhile."""
    params = read_params(raw, overrides)
    base = tmp / f"tiny-sam2-{seed}"
    if init is None:
        build_tiny_sam2(base, params.tiny_models.sam2_image_size, seed, architecture,
                        params.tiny_models.sam2_encoder_width)
    else:
        shutil.copytree(init, base)
        if architecture:  # after the folder's own overrides, as tiny_models puts its own after the base config's
            config = yaml.safe_load((base / CONFIG).read_text())
            config["overrides"] = [*config.get("overrides", []), *architecture]
            (base / CONFIG).write_text(yaml.safe_dump(config, sort_keys=False))
    out = tmp / f"pretrain-sam2-{seed}"
    block = dataclasses.replace(params.pretrain_sam2, seeds=(seed,), parallel=1, base=str(base), out_dir=str(out),
                                checkpoint_dir=str(tmp / f"state-{seed}"))
    sam2 = Sam2Params(checkpoint=str(out / CHECKPOINT), config=str(out / CONFIG))
    started = time.perf_counter()
    report = pretrain_sam2(block, sam2, out, tmp / f"metrics-{seed}")
    wall = time.perf_counter() - started
    losses = [float(line.split("\t")[1]) for line in (tmp / f"metrics-{seed}" / CURVE).read_text().splitlines()[1:]]
    tenth = max(1, len(losses) // 10)
    return ({**report.metrics, "wall_s": round(wall, 1), "loss_first_tenth": round(float(np.mean(losses[:tenth])), 4),
             "loss_last_tenth": round(float(np.mean(losses[-tenth:])), 4)}, out)


def _init_record(init: Path | None) -> dict | None:
    """What `--init` started from: the folder and its checkpoint's sha256 (None: a fresh tiny SAM2 per seed)."""
    if init is None:
        return None
    import hashlib

    return {"folder": str(init), "sha256": hashlib.sha256((init / CHECKPOINT).read_bytes()).hexdigest()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2], help="stage seeds")
    parser.add_argument("--repo", type=Path, help="project copy with data/keyframes and models/tiny (for ceilings)")
    parser.add_argument("--jobs", type=int, default=1, help="seeds trained at once, one process each")
    parser.add_argument("--set", action="append", default=[], help="override KEY=VALUE, e.g. pretrain_sam2.steps=300")
    parser.add_argument("--out", type=Path, help="results file, named as its record; default sam2_pretrain.json")
    parser.add_argument("--keep", type=Path, help="copy each seed's trained folder here (<keep>/seed-<k>)")
    parser.add_argument("--architecture", action="append", default=[],
                        help="a Hydra override of the tiny SAM2 trained, after tiny_models' own, e.g. "
                             "++model.memory_attention.num_layers=4")
    parser.add_argument("--init", type=Path, help="start every seed from this SAM2 folder (model.pt + config.yaml, "
                        "e.g. models/pretrain_sam2: fine-tune the committed one) instead of a fresh tiny one; "
                        "--architecture then adds its overrides to that folder's config")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    raw = read_params_file(Path(__file__).resolve().parents[1] / "params.yaml")
    params = read_params(raw, args.set)
    figures: dict = {"pretrain_sam2": {}, "ceiling": {}, "overrides": args.set, "architecture": args.architecture,
                     "init": _init_record(args.init),
                     "pretrain_sam2_params": dataclasses.asdict(params.pretrain_sam2)}
    with tempfile.TemporaryDirectory(prefix="bench-sam2-pretrain-") as tmp:
        tmp = Path(tmp)
        trained = {}
        # seeds in parallel processes (--jobs): each trains on one torch thread, as the stage does
        with process_pool(args.jobs) as pool:
            runs = {seed: pool.submit(pretrain_seed, raw, args.set, seed, tmp, tuple(args.architecture), args.init)
                    for seed in args.seeds}
            for seed, run in runs.items():
                figures["pretrain_sam2"][str(seed)], trained[seed] = run.result()
                print(json.dumps({seed: figures["pretrain_sam2"][str(seed)]}), flush=True)
        if args.repo:
            repo = args.repo.resolve()
            repo_params = load_params(repo / "params.yaml")
            # the SAM2 the repo's params name (the committed pre-trained one since issue 47; the random tiny one before)
            figures["ceiling"][f"sam2 of the repo's params ({repo_params.sam2.checkpoint})"] = ceiling(
                repo_params, repo, "sam2", tmp)
            for seed, out in trained.items():
                # absolute paths: ceiling() joins them to the repo, and an absolute path stays itself
                with_trained = dataclasses.replace(repo_params, sam2=dataclasses.replace(
                    repo_params.sam2, checkpoint=str(out / CHECKPOINT), config=str(out / CONFIG)))
                figures["ceiling"][f"sam2 pretrained seed {seed}"] = ceiling(with_trained, repo, "sam2", tmp)
            for name, value in figures["ceiling"].items():
                print(json.dumps({name: value}), flush=True)
        for seed, out in trained.items() if args.keep else ():
            shutil.copytree(out, args.keep / f"seed-{seed}", dirs_exist_ok=True)
    runs = figures["pretrain_sam2"].values()
    if runs:
        figures["summary"] = {key: [r[key] for r in runs] for key in
                              ("track_iou_before", "track_iou_after", "prompt_iou_before", "prompt_iou_after",
                               "wall_s")}
    name = args.out.stem if args.out else "sam2_pretrain"  # the record names the file it is in
    write_result(name, figures, f"{BASELINE_INIT if args.init else BASELINE}; {BASELINE_CEILING}", out=args.out)


if __name__ == "__main__":
    main()
