"""Study (issue 61): score a model folder on a project folder's eval pool with the evaluate stage's own function.

    python research/issue61/score_model.py DIR MODEL OUT [ref]

DIR: a project folder whose synth, ingest, sample and keyframes stages have run (its params.yaml is read); MODEL: a
Qwen2.5-VL folder; OUT: the evaluation's output folder (its README.md model card holds every metric); `ref` also
scores the ceiling, the empty answer and, when DIR has the SFT traces, the constant answer.
"""

import dataclasses
import json
import sys
import time
from pathlib import Path

from stages.evaluate import evaluate
from stages.params import load_params

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    repo, model, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    params = load_params(repo / "params.yaml")
    block = dataclasses.replace(params.evaluate, model_path=model, reference=sys.argv[4:] == ["ref"])
    sam2 = dataclasses.replace(params.sam2, checkpoint=str(ROOT / params.sam2.checkpoint),
                               config=str(ROOT / params.sam2.config))
    traces = (repo / "data/filter/accepted.parquet", repo / "data/keyframes/sft.parquet")
    started = time.time()
    report = evaluate(block, params.model, sam2, params.keyframes.train_size, repo / params.data.root,
                      repo / "data/keyframes/eval.parquet", out, out / "eval.md",
                      index_dir=repo / params.data.index_dir, traces=traces if traces[0].exists() else None)
    wanted = ("JF_overall", "ceiling_JF", "empty_JF", "constant_JF", "swap_JF")
    keys = [k for k in report.metrics if k.startswith(wanted) or k in ("keyframe_box_iou", "parse_failure_rate")]
    print(json.dumps({k: round(report.metrics[k], 4) for k in keys}), f"{time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
