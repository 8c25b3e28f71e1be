"""Each benchmark's own scoring protocol, as its official script computes it (docs/benchmarks.md).

Predictions: one grayscale PNG per frame, `<pred_dir>/<video key>/<exp_id>/<frame>.png` (the video key is
the benchmark's prediction folder name, `stages.ingest.benchmarks`), read with OpenCV as grayscale exactly
like the official scripts (`cv2.imread(path, cv2.IMREAD_GRAYSCALE)`); any non-zero pixel is foreground.

- revos: VISA's evaluator (`scorer.score_predictions`): all frames, a missing prediction scores 0.
- mevis (valid_u): every frame of `meta_expressions.json`; ground truth = the anno_ids' RLE masks summed;
  per expression mean J and mean F over frames; J = mean over expressions, F likewise, J&F = (J + F) / 2. An
  expression whose prediction *video* folder is missing scores J = F = 0 and counts (`missing="authors"` =
  "zero": the dataset authors' `henghuiding/MeViS` `tools/eval_mevis.py`); `missing="skip"` leaves it out
  instead, as the copy of that script in VideoLISA's `evaluation/mevis_val_u/` does (`continue`). A missing
  expression folder or frame, or a mis-sized frame, crashes that worker in both scripts, so the expression is
  left out — here it is skipped with a warning and counted.
- reasonvos: the frames are the ground-truth PNGs of `Annotations/<video key>/` (sorted; a frame without a
  PNG is not scored); otherwise as mevis, except that its authors' script (VideoLISA
  `evaluation/reason_vos/eval_reason_vos.py`) skips an expression without a prediction folder: "authors" =
  "skip" there; "zero" scores it 0 as for MeViS.
- refdavis: per annotator a (0–3), the expressions 4·k + a of each video are merged into one label map per
  frame (value / 100, below 0.5 → 0, background 0.1, argmax; ties go to the lower object), then DAVIS-2017
  unsupervised evaluation against the palette ground truth (void 255 ignored): objects = max label of the
  first ground-truth frame, predicted objects matched by the Hungarian method on mean (J + F) / 2, every
  frame, per object mean over frames; J = mean over objects of all videos. The reported number is the mean of
  the four annotators' J, F and J&F.
- mevis valid / refytvos valid (no public masks): no scores; `make_submission` zips the predictions in the
  server's layout.
"""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import cv2
import numpy as np
import pandas as pd
from PIL import Image
from scipy.optimize import linear_sum_assignment

from stages.evaluate import metrics as M
from stages.ingest.benchmarks import VOID, Benchmark, read_benchmark

if TYPE_CHECKING:
    from stages.evaluate.scorer import GroundTruth

log = logging.getLogger(__name__)

ANNOTATORS = 4
MAX_PROPOSALS = 20  # DAVIS unsupervised: most objects one prediction frame may hold
ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # fixed member timestamps: the archive's bytes depend on the masks only
MISSING_RULES = ("authors", "zero", "skip")  # what an expression whose prediction video folder is missing scores
AUTHORS_MISSING = {"mevis": "zero", "reasonvos": "skip"}  # the dataset authors' own scripts (module docstring)


class PredictionsError(ValueError):
    """A predictions folder that cannot be scored; the message says what is expected."""


def read_prediction(path: Path) -> np.ndarray | None:
    """A prediction PNG as the official scripts read it (OpenCV grayscale, uint8); None when unreadable."""
    return cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)


def score_benchmark(name: str, pred_dir: Path, root: Path, split: str = "", bound_th: float = M.BOUND_TH,
                    bench: Benchmark | None = None, expressions: set[tuple[str, str]] | None = None,
                    ground_truth: GroundTruth | None = None,
                    missing: str = "authors") -> tuple[dict[str, float], pd.DataFrame]:
    """Score a predictions folder with benchmark `name`'s protocol; returns (summary, per-expression table).

    Summary: `J`, `F`, `JF` in percent (unrounded), `n_expressions`, `n_scored`, `n_skipped` (and for ReVOS its
    usual keys; for refdavis `JF_anno<a>` per annotator). `expressions` restricts scoring to (video, exp_id)
    pairs (the evaluated subset). `ground_truth`: ReVOS only, the ground truth of those expressions already
    loaded (`scorer.load_ground_truth`), so that the root's mask_dict.json is not parsed a second time.
    `missing` (mevis, reasonvos): "zero" scores an expression whose prediction video folder is missing 0,
    "skip" leaves it out, "authors" is the dataset authors' rule (mevis: zero, reasonvos: skip); ReVOS always
    scores a missing prediction 0 (VISA), Ref-DAVIS17 needs every prediction. The summary records the rule.

    Raises:
        PredictionsError: `pred_dir` missing, or no expression has a prediction folder.
        BenchmarkFormatError: bad ground truth. ValueError: a server split (no masks): use make_submission.
    """
    pred_dir = Path(pred_dir)
    if missing not in MISSING_RULES:
        raise ValueError(f"missing-prediction rule {missing!r}: expected one of {', '.join(MISSING_RULES)}")
    if not pred_dir.is_dir():
        raise PredictionsError(f"predictions folder {pred_dir} does not exist")
    if name == "revos":
        return _score_revos(pred_dir, root, split or "valid", bound_th, expressions, ground_truth)
    bench = bench or read_benchmark(name, root, split)
    if not bench.has_masks:
        raise ValueError(f"{name} {bench.split} has no public masks: build the submission archive instead")
    pairs = [(v, e) for v in sorted(bench.videos) for e in bench.videos[v].expressions
             if expressions is None or (v, e) in expressions]
    if not any((pred_dir / v / e).is_dir() for v, e in pairs):
        example = f"{pairs[0][0]}/{pairs[0][1]}/<frame>.png" if pairs else "<video>/<exp_id>/<frame>.png"
        raise PredictionsError(f"{pred_dir}: no prediction folder matches any {name} {bench.split} expression "
                               f"(expected e.g. {example})")
    if name == "refdavis":
        return _score_refdavis(bench, pred_dir, bound_th, expressions)
    rows = [_score_expression(bench, pred_dir, v, e, bound_th) for v, e in pairs]
    zero = (AUTHORS_MISSING.get(name) if missing == "authors" else missing) == "zero"
    return _summary(pd.DataFrame(rows), zero)


def _score_revos(pred_dir: Path, root: Path, split: str, bound_th: float, expressions: set[tuple[str, str]] | None,
                 ground_truth: GroundTruth | None = None) -> tuple[dict[str, float], pd.DataFrame]:
    from stages.core.ids import expression_id
    from stages.evaluate.scorer import score_predictions

    ids = None if expressions is None else sorted(expression_id(v, e) for v, e in expressions)
    summary, table = score_predictions(pred_dir, root, split, ids, bound_th=bound_th, ground_truth=ground_truth)
    if summary["n_missing_video"] == len(table) and len(table):
        raise PredictionsError(f"{pred_dir}: no prediction folder matches any revos {split} expression "
                               f"(expected e.g. {table['video'].iloc[0]}/{table['exp_id'].iloc[0]}/<frame>.png)")
    summary = {**summary, "J": summary["J_overall"], "F": summary["F_overall"], "JF": summary["JF_overall"]}
    return summary, table


def _score_expression(bench: Benchmark, pred_dir: Path, video: str, exp_id: str, bound_th: float) -> dict:
    v = bench.videos[video]
    row = {"video": video, "exp_id": exp_id, "status": "ok", "n_frames": 0, "J": np.nan, "F": np.nan}
    folder = pred_dir / video / exp_id
    if not (pred_dir / video).is_dir():
        return {**row, "status": "missing_video"}
    if not folder.is_dir():
        return {**row, "status": "missing_expression"}
    track = bench.track(video, exp_id)
    gts, preds = [], []
    for frame, gt in zip(v.frames, track, strict=True):
        if gt is None:  # not annotated: not scored (ReasonVOS scores the annotated frames only)
            continue
        pred = read_prediction(folder / f"{frame}.png")
        if pred is None:
            return {**row, "status": "missing_frame"}
        if pred.shape != gt.shape:
            return {**row, "status": "bad_shape"}
        gts.append(gt)
        preds.append(pred > 0)
    if not gts:
        return {**row, "status": "no_annotated_frame"}
    gt_stack, pred_stack = np.stack(gts), np.stack(preds)
    return {**row, "n_frames": len(gts), "J": float(M.j_measure(gt_stack, pred_stack).mean()),
            "F": float(M.f_measure(gt_stack, pred_stack, bound_th).mean())}


def _summary(table: pd.DataFrame, zero: bool) -> tuple[dict[str, float], pd.DataFrame]:
    """J, F, J&F over the scored expressions; with `zero` (the "zero" rule) a missing prediction video scores 0;
    otherwise it is skipped."""
    zeroed = (table["status"] == "missing_video") if zero else pd.Series(False, index=table.index)
    table.loc[zeroed, ["J", "F"]] = 0.0
    table["JF"] = (table["J"] + table["F"]) / 2
    counted = (table["status"] == "ok") | zeroed
    ok = table[counted]
    skipped = table[~counted]
    if len(skipped):
        log.warning("%d of %d expressions skipped, as the official script skips them (%s), e.g. %s/%s",
                    len(skipped), len(table), skipped["status"].value_counts().to_dict(),
                    skipped["video"].iloc[0], skipped["exp_id"].iloc[0])
    if zeroed.any():
        log.warning("%d of %d expressions have no prediction video folder: scored 0 (missing rule 'zero')",
                    int(zeroed.sum()), len(table))
    j, f = float(ok["J"].mean()) * 100, float(ok["F"].mean()) * 100
    summary = {"J": j, "F": f, "JF": (j + f) / 2, "n_expressions": len(table), "n_scored": len(ok),
               "n_skipped": len(skipped), "n_zeroed": int(zeroed.sum()), "missing_zero": float(zero)}
    return summary, table


# --- Ref-DAVIS17 ------------------------------------------------------------------------------------------


def merge_annotator(bench: Benchmark, pred_dir: Path, video: str, annotator: int) -> np.ndarray:
    """(T, H, W) uint8 label map of one annotator's expressions, as the official post-processing merges them."""
    exp_ids = list(bench.videos[video].expressions)
    n_objects = len(exp_ids) // ANNOTATORS
    frames = bench.videos[video].frames
    probs = []
    for k in range(n_objects):
        folder = pred_dir / video / exp_ids[k * ANNOTATORS + annotator]
        files = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
        if len(files) != len(frames):
            raise PredictionsError(f"{folder}: {len(files)} PNGs, video {video} has {len(frames)} frames")
        stack = []
        for file in files:
            pred = read_prediction(folder / file)
            if pred is None:
                raise PredictionsError(f"{folder / file}: unreadable PNG")
            stack.append(pred.astype(np.float32) / np.float32(100.0))
        probs.append(np.stack(stack))
    probs_arr = np.stack(probs)
    probs_arr[probs_arr < 0.5] = 0.0
    background = np.full((1, *probs_arr.shape[1:]), 0.1, dtype=np.float32)
    return np.argmax(np.concatenate([background, probs_arr]), axis=0).astype(np.uint8)


def _davis_gt(bench: Benchmark, video: str) -> tuple[np.ndarray, np.ndarray]:
    """(objects (n, T, H, W) bool, void (T, H, W) bool) of the palette ground truth, as DAVIS reads it."""
    folder = bench.root / "valid" / "Annotations" / video
    n_kept = len(bench.videos[video].expressions) // ANNOTATORS  # a subset run scores the objects it kept
    labels = []
    for frame in bench.videos[video].frames:
        with Image.open(folder / f"{frame}.png") as img:
            labels.append(np.asarray(img))
    lab = np.stack(labels)
    void = lab == VOID
    lab = np.where(void, 0, lab)
    n = min(int(lab[0].max()), n_kept)
    return np.stack([lab == k for k in range(1, n + 1)]) if n else np.zeros((0, *lab.shape), bool), void


def _davis_video(gt: np.ndarray, void: np.ndarray, labels: np.ndarray, bound_th: float) -> tuple[list, list]:
    """Per ground-truth object (J mean, F mean) after the Hungarian match (DAVIS unsupervised)."""
    n_pred = int(labels.max())
    if n_pred > MAX_PROPOSALS:
        raise PredictionsError(f"a prediction holds {n_pred} objects, more than DAVIS allows ({MAX_PROPOSALS})")
    preds = [labels == k for k in range(1, n_pred + 1)]
    preds += [np.zeros_like(labels, dtype=bool)] * max(0, len(gt) - n_pred)
    keep = ~void  # void pixels count for neither mask (J and F as DAVIS computes them with void)
    j = np.zeros((len(preds), len(gt), labels.shape[0]))
    f = np.zeros_like(j)
    for ii, g in enumerate(gt):
        for jj, p in enumerate(preds):
            j[jj, ii] = M.j_measure(g & keep, p & keep)
            f[jj, ii] = M.f_measure(g & keep, p & keep, bound_th)
    rows, cols = linear_sum_assignment(-(j.mean(axis=2) + f.mean(axis=2)) / 2)
    by_object = np.argsort(cols)  # the pairs come in proposal order: report them in ground-truth object order
    rows, cols = rows[by_object], cols[by_object]
    return [float(np.nanmean(x)) for x in j[rows, cols]], [float(np.nanmean(x)) for x in f[rows, cols]]


def _score_refdavis(bench: Benchmark, pred_dir: Path, bound_th: float,
                    expressions: set[tuple[str, str]] | None) -> tuple[dict[str, float], pd.DataFrame]:
    rows = []
    summary: dict[str, float] = {}
    videos = sorted({v for v, _ in expressions} if expressions is not None else bench.videos)
    per_annotator = []
    for a in range(ANNOTATORS):
        js, fs = [], []
        for video in videos:
            gt, void = _davis_gt(bench, video)
            jm, fm = _davis_video(gt, void, merge_annotator(bench, pred_dir, video, a), bound_th)
            for k, (jv, fv) in enumerate(zip(jm, fm, strict=True), start=1):
                rows.append({"video": video, "exp_id": f"anno_{a}/{k}", "status": "ok", "n_frames": gt.shape[1],
                             "J": jv, "F": fv})
            js += jm
            fs += fm
        j, f = float(np.mean(js)) * 100, float(np.mean(fs)) * 100
        summary.update({f"J_anno{a}": j, f"F_anno{a}": f, f"JF_anno{a}": (j + f) / 2})
        per_annotator.append((j, f))
    j = float(np.mean([x[0] for x in per_annotator]))
    f = float(np.mean([x[1] for x in per_annotator]))
    table = pd.DataFrame(rows)
    table["JF"] = (table["J"] + table["F"]) / 2
    summary.update({"J": j, "F": f, "JF": (j + f) / 2, "n_expressions": len(table), "n_scored": len(table),
                    "n_skipped": 0})
    return summary, table


# --- server splits ----------------------------------------------------------------------------------------


def make_submission(name: str, pred_dir: Path, root: Path, out_zip: Path, split: str = "",
                    expressions: set[tuple[str, str]] | None = None) -> dict[str, int]:
    """Zip the predictions of a server split in the server's layout; returns counts.

    mevis valid: `<video>/<exp_id>/<frame>.png` at the archive root (CodaLab's sample submission);
    refytvos valid: `Annotations/<video>/<exp_id>/<frame>.png`. Every expression (of `expressions`, (video,
    exp_id) pairs; default all) needs one PNG per frame.

    Raises:
        PredictionsError: a missing expression folder or frame (names the first).
    """
    bench = read_benchmark(name, root, split)
    if expressions is not None:  # a partial archive (the default pipeline's few expressions): a server wants all
        for key, video in list(bench.videos.items()):
            video.expressions = {e: x for e, x in video.expressions.items() if (key, e) in expressions}
            if not video.expressions:
                del bench.videos[key]
    prefix = "Annotations/" if name == "refytvos" else ""
    pred_dir, out_zip = Path(pred_dir), Path(out_zip)
    missing = [f"{v}/{e}/{f}.png" for v in sorted(bench.videos) for e in bench.videos[v].expressions
               for f in bench.videos[v].frames if not (pred_dir / v / e / f"{f}.png").is_file()]
    if missing:
        raise PredictionsError(f"{pred_dir}: {len(missing)} prediction PNGs missing for the {name} {bench.split} "
                               f"submission, e.g. {missing[0]}")
    out_zip.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with zipfile.ZipFile(out_zip, "w") as archive:  # each member's ZipInfo names its compression
        for v in sorted(bench.videos):
            for e in sorted(bench.videos[v].expressions, key=lambda x: (len(x), x)):
                for f in bench.videos[v].frames:
                    info = zipfile.ZipInfo(f"{prefix}{v}/{e}/{f}.png", date_time=ZIP_DATE)
                    info.compress_type = zipfile.ZIP_DEFLATED
                    archive.writestr(info, (pred_dir / v / e / f"{f}.png").read_bytes())
                    n += 1
    return {"videos": len(bench.videos), "expressions": sum(len(x.expressions) for x in bench.videos.values()),
            "pngs": n}


def evaluate_folder(name: str, pred_dir: Path, root: Path, split: str = "", submission: Path | None = None,
                    missing: str = "authors") -> tuple[dict[str, float], pd.DataFrame | None]:
    """`vrsflow evaluate --benchmark NAME`: score with the benchmark's protocol (`missing`: see
    `score_benchmark`), or, for a server split, write the submission archive (`submission`, default
    `<pred_dir>.zip`) and return its counts."""
    bench = None if name == "revos" else read_benchmark(name, root, split)
    if bench is not None and not bench.has_masks:
        out = Path(submission) if submission else Path(pred_dir).with_suffix(".zip")
        counts = make_submission(name, pred_dir, root, out, split)
        return {**counts, "submission": str(out)}, None
    return score_benchmark(name, pred_dir, root, split, bench=bench, missing=missing)
