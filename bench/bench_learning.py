"""Does the default run's model learn to localise? Pre-training per seed, and the evaluation's ceiling.

Per seed (`--seeds`): the `pretrain` stage's own function on the tiny random Qwen2.5-VL built by the `tiny_models`
code (params from params.yaml, `--set pretrain.KEY=VALUE` overrides; one seed per run, in this process), timed, with
its grounding check on held-out generated scenes (parse rate, keyframe hits, box IoU, the share of landed boxes on
the asked target, beside the constant mean box) and the loss curve's start, plateau and end. With `--repo DIR` (a
copy of the project where `dvc repro keyframes tiny_models` has run), also the ceiling of the default evaluation:
the evaluate stage's own code on the eval pool with the ground-truth answer as the policy (keyframe = the shown frame
where the target is largest, its boxes there at the train size), once per segmenter (`box`: the keyframe boxes on
every frame; `sam2`: the SAM2 that sam2.checkpoint names).

    python bench/bench_learning.py --seeds 0 1 2 --repo /tmp/scratch-repo
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results_io import write_result  # noqa: E402
from stages.evaluate import evaluate  # noqa: E402
from stages.evaluate.infer import Reply  # noqa: E402
from stages.params import apply_overrides, load_params, read_params_file  # noqa: E402
from stages.params.model import ModelParams  # noqa: E402
from stages.pretrain import pretrain  # noqa: E402
from stages.tiny_models.tiny_qwen import build_tiny_qwen  # noqa: E402


def pretrain_seed(params, seed: int, tmp: Path) -> dict:
    """One pre-training run from a freshly built tiny model (tiny_models seed = pretrain seed = `seed`)."""
    tiny = dataclasses.replace(params.tiny_models, seed=seed)
    base = tmp / f"tiny-{seed}"
    build_tiny_qwen(tiny, base)
    out = tmp / f"pretrain-{seed}"
    block = dataclasses.replace(params.pretrain, seeds=(seed,), parallel=1, base=str(base), out_dir=str(out),
                                checkpoint_dir=str(tmp / f"state-{seed}"))
    started = time.perf_counter()
    report = pretrain(block, ModelParams(path=str(out)), params.keyframes.train_size, out, tmp / f"metrics-{seed}")
    wall = time.perf_counter() - started
    losses = [float(line.split("\t")[1]) for line in
              (tmp / f"metrics-{seed}" / "pretrain_curve.tsv").read_text().splitlines()[1:]]
    tenth = max(1, len(losses) // 10)
    return {**report.metrics, "wall_s": round(wall, 1), "loss_first_tenth": round(float(np.mean(losses[:tenth])), 4),
            "loss_mid_tenth": round(float(np.mean(losses[len(losses) // 2:len(losses) // 2 + tenth])), 4),
            "loss_last_tenth": round(float(np.mean(losses[-tenth:])), 4)}


def ceiling(params, repo: Path, segmenter: str, tmp: Path) -> dict:
    """The evaluation of the eval pool with the ground-truth answer as the policy and `segmenter`: the evaluate
    stage's own ceiling (`evaluate.reference`, its `ceiling_*` metrics). The model's pass is a policy that answers
    nothing, so no model is loaded."""
    block = dataclasses.replace(params.evaluate, segmenter=segmenter, reference=True,
                                model_path=str(repo / params.model.path))
    sam2 = dataclasses.replace(params.sam2, checkpoint=str(repo / params.sam2.checkpoint),
                               config=str(repo / params.sam2.config))
    started = time.perf_counter()
    out = tmp / f"ceiling-{segmenter}"
    report = evaluate(block, params.model, sam2, params.keyframes.train_size, repo / params.data.root,
                      repo / "data/keyframes/eval.parquet", out, out / "eval.md",
                      policy=lambda queries: [Reply("", None) for _ in queries], index_dir=repo / params.data.index_dir)
    keep_keys = ("JF_overall", "JF_referring", "JF_reasoning", "J_overall", "F_overall")
    return {**{k: round(float(report.metrics[f"ceiling_{k}"]), 2) for k in keep_keys},
            **{k: round(float(report.metrics[k]), 2) for k in ("n_scored", "n_expressions")},
            "wall_s": round(time.perf_counter() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2], help="pretrain seeds; none: ceilings only")
    parser.add_argument("--repo", type=Path, help="project copy with data/keyframes and models/tiny (for ceilings)")
    parser.add_argument("--set", action="append", default=[], help="override KEY=VALUE, e.g. pretrain.videos=20")
    parser.add_argument("--out", type=Path, help="results file (its name is the record's name); default learning.json")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    raw = read_params_file(Path(__file__).resolve().parents[1] / "params.yaml")
    params, _ = apply_overrides(raw, dict(item.split("=", 1) for item in args.set))
    figures: dict = {"pretrain": {}, "ceiling": {}, "overrides": args.set,
                     "pretrain_params": dataclasses.asdict(params.pretrain)}
    with tempfile.TemporaryDirectory(prefix="bench-learning-") as tmp:
        tmp = Path(tmp)
        for seed in args.seeds:
            figures["pretrain"][str(seed)] = pretrain_seed(params, seed, tmp)
            print(json.dumps({seed: figures["pretrain"][str(seed)]}), flush=True)
        if args.repo:
            repo_params = load_params(args.repo / "params.yaml")
            for segmenter in ("box", "sam2"):
                figures["ceiling"][segmenter] = ceiling(repo_params, args.repo.resolve(), segmenter, tmp)
                print(json.dumps({segmenter: figures["ceiling"][segmenter]}), flush=True)
    after = [f["box_iou"] for f in figures["pretrain"].values()]
    if after:
        figures["summary"] = {"box_iou_mean": round(float(np.mean(after)), 4),
                              "box_iou_spread": round(float(np.ptp(after)), 4)}
    name = args.out.stem if args.out else "learning"  # the record names the file it is in
    write_result(name, figures, "one constant box for every held-out sample (the grounding check's mean_box_iou); "
                 "the ceiling: ground-truth answers through the same evaluation", out=args.out)


if __name__ == "__main__":
    main()
