"""Benchmarks × models: run one benchmark split through inference and its own protocol, for every model.

`evaluate_benchmark` reads the split in its published layout (`stages.ingest.benchmarks`), writes the chosen
videos as a ReVOS-layout root (`to_revos`) so inference runs unchanged, writes predictions in the
benchmark's prediction layout (`<video key>/<exp_id>/<frame>.png`), then scores them with the benchmark's
protocol against the published files (`stages.bench.benchmarks`) — or, for a server split, writes the
submission archive. `run_benchmark` is the `bench` stage (one DVC stage per benchmark): every model of
`benchmarks.models`, one metrics file. The `bench_table` stage joins those files into the papers' table.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from schemas.evaluate import InferenceSchema
from stages.bench.benchmarks import make_submission, score_benchmark
from stages.core import revos
from stages.core.ids import expression_id
from stages.core.io import atomic_write_text, markdown_table, write_table
from stages.core.lineage import write_lineage
from stages.core.report import StageReport
from stages.evaluate import (
    Policy,
    Segmenter,
    _answer_metrics,
    empty_policy,
    evaluate_video,
    model_policy,
    reference_policy,
    segmenter,
)
from stages.evaluate.baselines import constant_policy, read_training_prior
from stages.evaluate.scorer import _exp_order, load_ground_truth
from stages.ingest.benchmarks import DEFAULT_SPLIT, SERVER_SPLITS, read_benchmark, to_revos
from stages.params.benchmarks import BenchmarksParams
from stages.params.evaluate import EvaluateParams
from stages.params.model import ModelParams
from stages.params.sam2 import Sam2Params
from stages.synth.layouts import write_layout

log = logging.getLogger(__name__)

REFERENCE = "ground_truth"  # the table's row of the ground-truth answers (`benchmarks.reference`)
REFERENCE_MD = ("`ground_truth`: the ground-truth answer (the keyframe where the target is largest, its boxes there) "
                "read by the same parser and segmented by the same segmenter: the ceiling, what a perfect answer "
                "scores with this segmenter (an empty answer can score more where the target is absent from many "
                "frames).")
EMPTY = "empty_answer"  # the table's row of the empty answers (`benchmarks.reference`)
EMPTY_MD = ("`empty_answer`: the empty answer (the first frame shown, no boxes) read by the same parser: empty masks "
            "on every frame, what answering nothing scores (J = 1 on each frame where the target is absent).")
CONSTANT = "constant_answer"  # the table's row of the training prior (`benchmarks.reference` with the SFT traces)
CONSTANT_MD = ("`constant_answer`: one fixed answer given to every query whatever the video — the SFT traces' mean "
               "box or their most common box, the stronger of the two on this benchmark, at the traces' most common "
               "keyframe position among the frames shown: a model that writes the traces' usual numbers without "
               "looking scores about this much.")
SUMMARY_KEYS = ("J", "F", "JF", "R_visa_overall", "R_binary_overall", "n_expressions", "n_scored", "pngs")
# the answers that made no mask, told apart: none boxed, or only boxes that cover no area (`select_prompt`)
NO_MASK_KEYS = ("n_answer_no_boxes", "n_answer_degenerate_boxes")
NO_MASK_MD = ("Answers that made no mask, per benchmark: `no boxes / degenerate boxes` — answers that parsed but hold "
              "no box, and answers whose boxes all cover no area inside the frame (inverted corners, zero width or "
              "height, outside the frame).")


def _revos_videos(root: Path, split: str) -> dict[str, list[str]]:
    """Each video's exp_ids, referring and reasoning interleaved (first of each type, second of each, …; no-target
    last), so that the first two expressions of a subset run already give ReVOS's overall score."""
    videos, _ = revos.load_meta(revos.meta_path(root, split))
    out = {}
    for video, entry in videos.items():
        seen: dict[int, int] = {}
        keys = []
        for exp_id in sorted(entry.get("expressions", {}), key=_exp_order):
            type_id = int(entry["expressions"][exp_id].get("type_id", 0))
            seen[type_id] = seen.get(type_id, -1) + 1
            keys.append((type_id == 2, seen[type_id], type_id, _exp_order(exp_id), exp_id))
        if keys:
            out[video] = [k[-1] for k in sorted(keys)]
    return out


def evaluate_benchmark(params: EvaluateParams, name: str, root: Path, split: str, out_dir: Path, size: int,
                       policy: Policy | None, segment: Segmenter, videos: int = 0, expressions: int = 0,
                       missing: str = "authors") -> tuple[dict[str, float], pd.DataFrame]:
    """Infer and score the first `videos` videos (sorted keys; 0 = all) of a benchmark split, and of those the
    first `expressions` expressions (0 = all; Ref-DAVIS17: whole objects, i.e. multiples of 4 per video, and only
    the kept objects are scored). `policy` None: the ground-truth answers (`reference_policy`), the ceiling.

    Returns:
        (summary: J, F, JF in percent and counts — for a server split the archive's counts —, answers table).
    """
    root, out_dir = Path(root), Path(out_dir)
    split = split or DEFAULT_SPLIT[name]
    if name == "revos":
        exps = _revos_videos(root, split)
        keys = sorted(exps)[: videos or None]
        exps = _first(name, {k: exps[k] for k in keys}, expressions)
        keys = [k for k in keys if exps.get(k)]
        canon, canon_split, bench = root, split, None
    else:
        bench = read_benchmark(name, root, split)
        keys = sorted(k for k, v in bench.videos.items() if v.expressions)[: videos or None]
        exps = _first(name, {k: sorted(bench.videos[k].expressions, key=_exp_order) for k in keys}, expressions)
        keys = [k for k in keys if exps.get(k)]
        bench = dataclasses.replace(bench, videos={k: dataclasses.replace(bench.videos[k], expressions={
            e: bench.videos[k].expressions[e] for e in exps[k]}) for k in keys})
        canon, canon_split = to_revos(bench, out_dir / "root"), "train" if split == "train" else "valid"
    ids = [expression_id(v, e) for v in keys for e in exps[v]]
    gt = load_ground_truth(canon, canon_split, ids)
    if policy is None:
        policy = reference_policy(gt, {expression_id(v, e): (v, e) for v in keys for e in exps[v]}, size)
    pred_dir = out_dir / "predictions"
    shutil.rmtree(pred_dir, ignore_errors=True)
    pred_dir.mkdir(parents=True)
    answers: list[dict] = []
    for video in keys:
        rows = [{"sample_id": expression_id(video, e), "expression_id": expression_id(video, e), "exp_id": e,
                 "text": gt.videos[video]["expressions"][e]["exp"], "video": video} for e in exps[video]]
        answers += evaluate_video(params, size, policy, segment, canon, gt, video, rows, pred_dir)
    answers_df = write_table(pd.DataFrame(answers, columns=list(InferenceSchema.to_schema().columns)),
                             InferenceSchema, out_dir / "answers.parquet")
    pairs = {(v, e) for v in keys for e in exps[v]}
    if (name, split) in SERVER_SPLITS:
        summary: dict[str, float] = dict(make_submission(name, pred_dir, root, out_dir / "submission.zip", split,
                                                         expressions=pairs))
    else:
        summary, table = score_benchmark(name, pred_dir, root, split, params.bound_th, bench=bench, expressions=pairs,
                                         ground_truth=gt if name == "revos" else None,  # mask_dict parsed once
                                         missing=missing)
        table.to_csv(out_dir / "scores.csv", index=False)
    summary.update(_answer_metrics(answers_df, params.mode))
    return summary, answers_df


def _first(name: str, exps: dict[str, list[str]], n: int) -> dict[str, list[str]]:
    """The first `n` expressions in video order (0 = all); Ref-DAVIS17 keeps whole objects (4 expressions each)."""
    if not n:
        return exps
    out: dict[str, list[str]] = {}
    left = n
    for video, ids in exps.items():
        if left <= 0:
            break
        take = -(-left // 4) * 4 if name == "refdavis" else left
        out[video] = ids[:take]
        left -= len(out[video])
    return out


def synthetic_root(name: str, revos_root: Path, out: Path) -> tuple[Path, str]:
    """The synthetic ReVOS root's validation videos written in benchmark `name`'s layout (its evaluation split)."""
    if name == "revos":
        return Path(revos_root), "valid"
    split = DEFAULT_SPLIT[name]
    shutil.rmtree(out, ignore_errors=True)
    return write_layout(name, revos_root, out, split, with_masks=(name, split) not in SERVER_SPLITS), split


def run_benchmark(name: str, params: BenchmarksParams, evaluate: EvaluateParams, model: ModelParams, sam2: Sam2Params,
                  train_size: int, data_root: Path, out_dir: Path,
                  traces: tuple[Path, Path] | None = None) -> StageReport:
    """The `bench@<name>` stage: every model of `benchmarks.models` on benchmark `name`; metrics per model.

    The benchmark's root is `benchmarks.roots[name]`; "" = the synthetic data root's validation videos
    written in the benchmark's layout (under `out_dir/data`). `traces`: (the filter stage's accepted traces, the
    keyframes stage's SFT table): with `benchmarks.reference`, their training prior is the `constant_answer` row.
    """
    if name not in params.names:
        raise ValueError(f"benchmark {name!r} is not in benchmarks.names ({', '.join(params.names)})")
    out_dir = Path(out_dir)
    given = params.roots.get(name, "")
    root, split = (Path(given), params.splits.get(name, "") or DEFAULT_SPLIT[name]) if given else \
        synthetic_root(name, data_root, out_dir / "data")
    size = evaluate.frame_size or train_size
    segment = segmenter(evaluate, sam2)
    metrics: dict[str, dict] = {}
    rows: dict[str, str | None] = dict(params.models)
    if params.reference:  # the ceiling: what the ground-truth answer scores with this segmenter; and the empty answer
        rows.update({REFERENCE: None, EMPTY: None})
    candidates = read_training_prior(traces) if params.reference and traces is not None else []
    if candidates:
        rows[CONSTANT] = None
    for label, path in rows.items():  # one model loaded at a time
        if label == CONSTANT:  # the stronger (higher J&F) of the two constant answers; the mean box on a tie
            results = [evaluate_benchmark(evaluate, name, root, split, out_dir / label / answer.kind, size,
                                          constant_policy(answer, size), segment, params.videos, params.expressions,
                                          missing=params.missing)[0] for answer in candidates]
            summary = max(results, key=lambda r: float(r.get("JF", float("-inf"))))
        else:
            policy = (model_policy(evaluate, path, model.dtype) if path is not None
                      else empty_policy() if label == EMPTY else None)
            summary, _ = evaluate_benchmark(evaluate, name, root, split, out_dir / label, size, policy, segment,
                                            params.videos, params.expressions, missing=params.missing)
        # NaN (e.g. a ReVOS subset without expressions in the chosen videos) stays out of the JSON metrics
        metrics[label] = {k: float(v) for k, v in summary.items()
                          if (k in SUMMARY_KEYS + NO_MASK_KEYS or k.startswith("JF_anno")) and np.isfinite(float(v))}
        metrics[label]["parse_failure_rate"] = float(summary["parse_failure_rate"])
        log.info("%s / %s: %s", name, label, metrics[label])
    write_lineage(out_dir, f"bench@{name}", {"benchmarks": params, "evaluate": evaluate, "sam2": sam2},
                  inputs={"root": root, **{label: Path(p) for label, p in params.models.items()}},
                  counts={"models": len(metrics)},
                  code_modules=["stages.bench", "stages.evaluate", "stages.ingest.benchmarks"],
                  extra={"benchmark": name, "split": split})
    flat = {f"{label}.{k}": v for label, m in metrics.items() for k, v in m.items()}
    table = pd.DataFrame([{"model": label, **m} for label, m in metrics.items()])
    return StageReport(f"bench@{name}", metrics=flat, tables={f"{name} per model": table})


# --- the table -------------------------------------------------------------------------------------------


def benchmark_table(results: dict[str, dict[str, dict[str, float]]], models: list[str]) -> pd.DataFrame:
    """Rows = models, columns = J&F per benchmark (R for ReVOS), rounded to one decimal as the papers print.

    `results[benchmark][model]` is a `bench` stage's metrics; a server split's column says "server".
    """
    rows = []
    for model in models:
        row: dict[str, object] = {"model": model}
        for name, per_model in results.items():
            m = per_model.get(model, {})
            row[f"{name} J&F"] = round(m["JF"], 1) if "JF" in m else "server" if "pngs" in m else "—"
            if name == "revos":
                row["revos R"] = round(m["R_visa_overall"], 1) if "R_visa_overall" in m else "—"
        rows.append(row)
    return pd.DataFrame(rows)


def no_mask_table(results: dict[str, dict[str, dict[str, float]]], models: list[str]) -> pd.DataFrame:
    """Rows = models, a column per benchmark: "no boxes / degenerate boxes" answer counts ("—" without a run)."""
    rows = []
    for model in models:
        row: dict[str, object] = {"model": model}
        for name, per_model in results.items():
            m = per_model.get(model, {})
            row[name] = " / ".join(str(int(m[k])) for k in NO_MASK_KEYS) if NO_MASK_KEYS[0] in m else "—"
        rows.append(row)
    return pd.DataFrame(rows)


def check_no_mask_counts(path: Path, per_model: dict[str, dict[str, float]]) -> None:
    """Refuse a benchmark metrics file written before the answers without a mask were counted apart.

    Raises:
        ValueError: one line naming the file, the model and the stage to rerun.
    """
    for label, metrics in per_model.items():
        missing = [k for k in NO_MASK_KEYS if k not in metrics]
        if missing and ("JF" in metrics or "n_expressions" in metrics):
            stage = f"bench@{Path(path).stem}"
            raise ValueError(f"{path}: model {label} has no {missing[0]} (written by an older vrsflow, which counted "
                             f"degenerate boxes as no boxes); rerun its stage: dvc repro {stage}")


def gain_line(results: dict[str, dict[str, dict[str, float]]], model: str = "grpo", over: str = "sft") -> str:
    """One line: the mean J&F gain of `model` over `over`, across the benchmarks that have scores for both."""
    gains = {name: m[model]["JF"] - m[over]["JF"] for name, m in results.items()
             if "JF" in m.get(model, {}) and "JF" in m.get(over, {})}
    if not gains:
        return f"{model} vs {over}: no benchmark with scores for both."
    parts = ", ".join(f"{name} {g:+.1f}" for name, g in gains.items())
    return f"{model} vs {over}: {float(np.mean(list(gains.values()))):+.1f} J&F on average ({parts})."


def write_benchmark_table(params: BenchmarksParams, metrics_dir: Path, report_path: Path) -> StageReport:
    """The `bench_table` stage: metrics/bench/<name>.json of every benchmark → reports/benchmarks.md."""
    results = {}
    for name in params.names:
        flat = json.loads((Path(metrics_dir) / f"{name}.json").read_text())
        per_model: dict[str, dict[str, float]] = {}
        for key, value in flat.items():
            label, _, metric = key.partition(".")
            per_model.setdefault(label, {})[metric] = value
        check_no_mask_counts(Path(metrics_dir) / f"{name}.json", per_model)
        results[name] = per_model
    models = list(params.models) + ([REFERENCE, EMPTY] if params.reference else [])
    if any(CONSTANT in per_model for per_model in results.values()):
        models.append(CONSTANT)
    table = benchmark_table(results, models)
    line = gain_line(results) if {"grpo", "sft"} <= set(models) else ""
    text = "\n".join(["# Benchmarks", "",
                      "J&F (percent) per benchmark with each benchmark's own protocol (docs/benchmarks.md); R for "
                      "ReVOS as VISA computes it. \"server\": no public masks, the submission archive was written.",
                      *(["", REFERENCE_MD, "", EMPTY_MD] if params.reference else []),
                      *(["", CONSTANT_MD] if CONSTANT in models else []),
                      "", markdown_table(table), "", line, "",
                      "## Answers without a mask", "", NO_MASK_MD, "",
                      markdown_table(no_mask_table(results, models)), ""])
    Path(report_path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(report_path), text)
    metrics = {f"{row['model']}.{col.replace(' J&F', '.JF').replace(' R', '.R')}": value
               for row in table.to_dict("records") for col, value in row.items()
               if col != "model" and isinstance(value, float)}  # e.g. grpo.mevis.JF, sft.revos.R
    if line:
        metrics["gain_grpo_over_sft"] = float(np.mean([results[n]["grpo"]["JF"] - results[n]["sft"]["JF"]
                                                       for n in results if "JF" in results[n].get("grpo", {})
                                                       and "JF" in results[n].get("sft", {})] or [0.0]))
    return StageReport("bench_table", metrics=metrics, tables={"benchmarks": table}, markdown=text)
