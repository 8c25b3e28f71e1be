"""`evaluate` stage: model → keyframe + boxes → SAM2 over every frame → J, F, J&F, R (ReVOS protocol).

For each expression of the eval pool the model sees N frames spread uniformly over the whole video
(timestamps = frame positions, 1 FPS as in training; no ground truth decides which frames) at the
training resolution and answers a keyframe timestamp and boxes. The boxes, scaled back to the video's
resolution, prompt SAM2 at that frame; SAM2 tracks them forward and backward over every frame. A video is
evaluated as a whole: its expressions are generated together (`evaluate.batch_size` per generate() call)
with the shown frames processed and run through the vision tower once, SAM2 encodes its frames once for all
of them, and a box several expressions prompt at the same keyframe is tracked once. Predictions go to VISA's layout
(`predictions/<video>/<exp_id>/<frame>.png`, 0/255) and are scored by `scorer.score_predictions` exactly
as VISA's evaluator scores them. An answer that does not parse gives an empty prediction, and is counted.
An answered keyframe that was not among the frames shown is moved to the nearest shown frame (counted).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image
from pycocotools import mask as mask_utils
from scipy.optimize import linear_sum_assignment

from schemas.answer import DEGENERATE_BOXES, NO_BOXES, parse_answer
from schemas.evaluate import ANSWER_STATUSES, ExpressionScoresSchema, InferenceSchema
from schemas.sample import KeyframesSchema
from stages.core import mask_table, revos
from stages.core.frame_spread import nearest_shown, spread_frames
from stages.core.io import read_table, write_table
from stages.core.lineage import write_lineage
from stages.core.model_card import write_model_card
from stages.core.pixel_box import boxes_mask
from stages.core.progress import track
from stages.core.report import StageReport
from stages.core.rle import to_coco
from stages.core.runner import RunnerParams
from stages.evaluate.baselines import constant_policy, read_training_prior, swap_partners
from stages.evaluate.infer import JUDGE_VERSION, Query, Reply, answer_queries, use_static_cache
from stages.evaluate.metrics import aggregate
from stages.evaluate.report import write_report
from stages.evaluate.scorer import GroundTruth, load_ground_truth, score_predictions
from stages.params import default_params
from stages.params.evaluate import EvaluateParams
from stages.params.model import ModelParams
from stages.params.sam2 import Sam2Params
from stages.teacher.prompts import QUESTION_VERSION

log = logging.getLogger(__name__)
SWAP_SEED = 0  # the query swap's pairing (`baselines.swap_partners`): fixed, so every evaluation swaps alike

__all__ = ["VideoAnswers", "answer_video", "box_masks", "describe_segmenter", "empty_policy", "evaluate",
           "evaluate_video", "model_policy", "predict_masks", "read_answers", "reference_policy", "segment_answers",
           "segmenter", "select_points", "select_prompt", "target_areas", "target_boxes", "write_mask",
           "write_prediction"]


def evaluate(params: EvaluateParams, model: ModelParams, sam2: Sam2Params, train_size: int, data_root: Path,
             eval_table: Path, out_dir: Path, report_path: Path, runner: RunnerParams | None = None,
             policy: Policy | None = None, index_dir: Path | None = None,
             traces: tuple[Path, Path] | None = None) -> StageReport:
    """Run the model and SAM2 on the eval pool, write predictions, score them, write the report.

    Args:
        params: the `evaluate` block.
        model: the `model` block (used when `evaluate.model_path` is "", and for the dtype).
        sam2: the `sam2` block (checkpoint, config).
        train_size: `keyframes.train_size`, the frame size shown when `evaluate.frame_size` is 0.
        data_root: the ReVOS-layout root (frames, masks).
        eval_table: the keyframes stage's `eval.parquet` (the expressions evaluated).
        out_dir: `data/evaluate` (predictions/, answers.parquet, scores.parquet, lineage.json).
        report_path: `reports/eval.md` (pictures in a folder beside it named after it).
        runner: where scoring runs.
        policy: answers the queries instead of the model at `evaluate.model_path` (a scripted policy: tests, oracles).
        index_dir: ingest's tables: the ground-truth RLEs come from its `masks.parquet` (mask_dict.json is
            parsed by ingest only); None = stream `data_root/mask_dict.json`.
        traces: (the filter stage's `accepted.parquet`, the keyframes stage's `sft.parquet`): the SFT traces whose
            training prior is scored as the constant answer (`constant_*`, with `evaluate.reference`); None = none.

    Returns:
        StageReport whose metrics are those of `metrics/eval.json`.

    Raises:
        FileNotFoundError: no model / SAM2 checkpoint / frames. ValueError: eval rows unknown to the data root.
    """
    data_root, out_dir, report_path = Path(data_root), Path(out_dir), Path(report_path)
    size = params.frame_size or train_size
    rows = read_table(Path(eval_table), KeyframesSchema).sort_values(["video", "exp_id"], kind="stable")
    rows = rows.head(params.limit) if params.limit else rows
    ids = rows["expression_id"].tolist()
    gt = load_ground_truth(data_root, params.split, ids, index_dir and Path(index_dir) / mask_table.FILE)
    model_path = params.model_path or model.path
    policy = policy or model_policy(params, model_path, model.dtype)
    segment = segmenter(params, sam2)

    def answer_and_score(policy: Policy, pred_dir: Path, desc: str, asked: pd.DataFrame = rows
                         ) -> tuple[list[dict], list[float], dict, pd.DataFrame]:
        shutil.rmtree(pred_dir, ignore_errors=True)  # outputs are rewritten whole
        pred_dir.mkdir(parents=True)
        answers: list[dict] = []
        seconds: list[float] = []
        truth = gt if asked is rows else _subset(gt, asked)
        for video, group in track(list(asked.groupby("video", sort=True)), desc=desc):
            started = time.perf_counter()
            answers += evaluate_video(params, size, policy, segment, data_root, truth, video,
                                      group.to_dict("records"), pred_dir)
            seconds.append(time.perf_counter() - started)
        summary, scores = score_predictions(pred_dir, data_root, params.split, asked["expression_id"].tolist(),
                                            runner, params.bound_th, truth)
        return answers, seconds, summary, scores

    pred_dir = out_dir / "predictions"
    answers, seconds, summary, scores = answer_and_score(policy, pred_dir, "evaluate videos")
    answers_df = write_table(pd.DataFrame(answers, columns=list(InferenceSchema.to_schema().columns)),
                             InferenceSchema, out_dir / "answers.parquet")
    write_table(scores, ExpressionScoresSchema, out_dir / "scores.parquet")
    metrics = {**{k: v for k, v in summary.items() if np.isfinite(v)},
               **_answer_metrics(answers_df, params.mode),
               "seconds_per_video": float(np.mean(seconds)) if seconds else 0.0}
    shutil.rmtree(out_dir / "reference", ignore_errors=True)
    shutil.rmtree(out_dir / "swap", ignore_errors=True)
    if params.reference:  # the ceiling: the ground-truth answers through the same segmenter and scoring
        expressions = {row.sample_id: (row.video, str(row.exp_id)) for row in rows.itertuples()}
        *_, ceiling, _ = answer_and_score(reference_policy(gt, expressions, size), out_dir / "reference" /
                                          "predictions", "evaluate the ground-truth answers")
        metrics.update(_scores("ceiling", ceiling))
        # and the empty answer: what answering nothing scores (the frames where the target is absent)
        *_, empty, _ = answer_and_score(empty_policy(), out_dir / "reference" / "empty", "evaluate the empty answers")
        metrics.update(_scores("empty", empty))
        if traces is not None:  # and the training prior: one fixed answer for every query, whatever the video
            metrics.update(_constant_metrics(traces, size, lambda policy, name: answer_and_score(
                policy, out_dir / "reference" / name, f"evaluate the constant answer ({name})")[2]))
    if params.swap_query:  # the model answering another expression's query of the same video
        metrics.update(_swap_metrics(rows, gt, scores, lambda asked: answer_and_score(
            policy, out_dir / "swap" / "predictions", "evaluate the swapped queries", asked)[2]))
    write_lineage(out_dir, "evaluate", {"evaluate": params, "model": model, "sam2": sam2},
                  inputs={"eval_table": Path(eval_table), "model": Path(model_path),
                          **({"masks": Path(index_dir) / mask_table.FILE} if index_dir else {}),
                          **({"sam2": Path(sam2.checkpoint)} if params.segmenter == "sam2" else {})},
                  counts={"expressions": len(answers_df), "videos": len(seconds)},
                  code_modules=["stages.evaluate", "stages.sam2_wrapper", "stages.core.frame_spread",
                                "schemas.evaluate"],
                  extra={"model_path": str(model_path), "frame_size": size, "question_prompt": QUESTION_VERSION,
                         **({"judge_prompt": JUDGE_VERSION} if params.mode == "rcot" else {})})
    # the released model's card: the evaluated checkpoint's whole chain (raw data → weights) + eval metrics
    write_model_card(out_dir, f"vrsflow model card: {model_path}", default_params(),
                     metrics={"evaluation": metrics})
    markdown = write_report(report_path, metrics, scores, answers_df, data_root, pred_dir, gt,
                            params.report_examples, model_label=str(model_path), segmenter=params.segmenter)
    table = scores[["expression_id", "type_id", "status", "J", "F", "JF", "R_visa", "R_binary"]]
    return StageReport("evaluate", metrics=metrics, tables={"per expression": table}, markdown=markdown)


def _scores(prefix: str, summary: dict) -> dict:
    """A reference row's finite J, F, J&F and R figures under `<prefix>_` (`ceiling_JF_overall`, …)."""
    return {f"{prefix}_{k}": v for k, v in summary.items()
            if k.split("_")[0] in ("J", "F", "JF", "R") and np.isfinite(v)}


def _constant_metrics(traces: tuple[Path, Path], size: int, score: Callable[[Policy, str], dict]) -> dict:
    """`constant_*`: the stronger (higher J&F) of the training prior's two constant answers (`baselines`), with
    which it was (`constant_kind`: 0 mean box, 1 most common box), its keyframe position and box, and both J&F."""
    candidates = read_training_prior(traces)
    if not candidates:
        log.warning("no SFT trace in %s answers with a box: no constant answer scored", traces[0])
        return {}
    results = [score(constant_policy(answer, size), f"constant-{answer.kind}") for answer in candidates]
    best = max(range(len(candidates)), key=lambda i: (results[i]["JF_overall"], -i))  # the mean box on a tie
    answer = candidates[best]
    out = _scores("constant", results[best])
    out.update({f"constant_{a.kind}_JF_overall": r["JF_overall"] for a, r in zip(candidates, results, strict=True)})
    out.update({"constant_kind": float(best), "constant_keyframe_pos": float(answer.keyframe_pos),
                **{f"constant_box_{name}": float(v) for name, v in zip(("x1", "y1", "x2", "y2"), answer.box,
                                                                       strict=True)}})
    return out


def _swap_metrics(rows: pd.DataFrame, gt: GroundTruth, scores: pd.DataFrame,
                  score: Callable[[pd.DataFrame], dict]) -> dict:
    """`swap_*`: J&F when each expression is answered with its partner's query (`baselines.swap_partners`), beside
    the model's own J&F on the same expressions (`swap_own_JF_overall`) and how many were swapped."""
    targets = {row.expression_id: frozenset(str(a) for a in gt.videos[row.video]["expressions"][str(row.exp_id)]
                                            .get("anno_id", [])) for row in rows.itertuples()}
    partners = swap_partners(rows.to_dict("records"), targets, SWAP_SEED)
    if not partners:
        return {"swap_n_expressions": 0.0}
    text = dict(zip(rows["expression_id"], rows["text"], strict=True))
    asked = rows[rows["expression_id"].isin(partners)].copy()
    asked["text"] = asked["expression_id"].map(lambda e: text[partners[e]])
    summary = score(asked)
    own = aggregate(scores[scores["expression_id"].isin(partners)])  # the model's own answers, the same expressions
    return {**_scores("swap", summary),
            **({"swap_own_JF_overall": own["JF_overall"]} if np.isfinite(own["JF_overall"]) else {}),
            "swap_n_expressions": float(len(partners))}


def _subset(gt: GroundTruth, rows: pd.DataFrame) -> GroundTruth:
    """`gt` reduced to the expressions of `rows` (their masks are shared, not copied)."""
    wanted: dict[str, set[str]] = {}
    for row in rows.itertuples():
        wanted.setdefault(row.video, set()).add(str(row.exp_id))
    videos = {video: {**gt.videos[video], "expressions": {k: v for k, v in gt.videos[video]["expressions"].items()
                                                          if k in exps}} for video, exps in wanted.items()}
    return GroundTruth(videos, gt.masks, gt.foreground)


def read_answers(path: Path) -> pd.DataFrame:
    """An `answers.parquet` (InferenceSchema), also one written before "degenerate_boxes" was a status of its own.

    Such a table labelled "no_boxes" every answer whose boxes were all empty after clipping, and kept the boxes:
    a "no_boxes" row with boxes can only be degenerate boxes, so it is relabelled (exactly) before validation.
    """
    table = pd.read_parquet(path)
    if {"status", "boxes"} <= set(table.columns):
        old = (table["status"] == NO_BOXES) & (table["boxes"].map(len) > 0)
        table.loc[old, "status"] = DEGENERATE_BOXES
    return InferenceSchema.validate(table, lazy=True)


def _load_video(root: Path, video: str, frames: list[str]) -> list[np.ndarray]:
    out = []
    for name in frames:
        path = revos.frame_path(root, video, name)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: frame {name} of video {video} missing")
        with Image.open(path) as img:
            out.append(np.asarray(img.convert("RGB")))
    return out


Policy = Callable[[list[Query]], list[Reply]]  # queries → replies (the model, or a scripted policy)
# (frames, prompts) → one (T, H, W) mask per prompt; a segmenter with `streams = True` also takes `sink=`, a
# callable (prompt, t, mask) receiving each frame's mask as it is made (nothing held: `segment_answers`)
Segmenter = Callable[[list[np.ndarray], list[tuple[int, list[list[float]]]]], list[np.ndarray]]
MaskSink = Callable[[int, int, np.ndarray], None]


def model_policy(params: EvaluateParams, model_path: str | Path, dtype: str) -> Policy:
    """The Qwen2.5-VL checkpoint at `model_path` answering queries (batched; RCoT loop in "rcot" mode).

    Raises:
        FileNotFoundError: `model_path` is not a folder.
    """
    from stages.models import load_vlm

    if not Path(model_path).is_dir():
        raise FileNotFoundError(f"evaluate.model_path {model_path} is not a folder (train with sft/grpo, or point it "
                                f"at a local Qwen2.5-VL checkpoint)")
    vlm, processor = load_vlm(str(model_path), dtype)
    use_static_cache(vlm, params.kv_cache)
    from stages.tasks.inference import HtfsParams

    htfs = HtfsParams(k=params.htfs_k, delta=params.htfs_delta, m=params.htfs_m)
    return lambda queries: answer_queries(vlm, processor, queries, params.max_new_tokens, params.batch_size,
                                          params.mode, params.max_rounds, htfs)


def reference_policy(gt: GroundTruth, expressions: dict[str, tuple[str, str]], size: int) -> Policy:
    """The ground-truth answer as the policy: what a model that answers perfectly would write, read back by the
    parser a model's answer goes through. Run through the same segmenter and scoring, it is the evaluation's
    ceiling (the benchmark table's `ground_truth` row): what a perfect answer scores with that segmenter. (Not a
    bound on every answer: an empty answer scores the frames where the target is absent, which a segmenter that
    marks the keyframe's boxes on every frame gets wrong.)

    `expressions`: query key → (video, exp_id) of `gt`. The keyframe is the shown frame where the union of the
    targets' masks is largest (the earliest on a tie), the boxes are the targets' boxes there at the shown `size`
    (rounded to whole pixels, as a model writes them). A no-target expression, or a target absent from every
    frame shown, answers the first shown frame with no boxes.
    """
    def answer(query: Query) -> Reply:
        video, exp_id = expressions[query.key]
        entry, meta = gt.videos[video]["expressions"][exp_id], gt.videos[video]
        annos = [str(a) for a in entry.get("anno_id", [])]
        areas = target_areas(gt, annos, query.timestamps) if annos else [0.0] * len(query.timestamps)
        key = query.timestamps[int(np.argmax(areas))]
        sx, sy = size / int(meta["width"]), size / int(meta["height"])
        boxes = [[round(x1 * sx), round(y1 * sy), round(x2 * sx), round(y2 * sy)]
                 for x1, y1, x2, y2 in (target_boxes(gt, annos, key) if max(areas, default=0.0) > 0 else [])]
        text = (f'<think>the ground-truth answer</think><answer>{{"keyframe_timestamp": {key}, '
                f'"bbox_2d_list": {json.dumps(boxes)}}}</answer>')
        return Reply(text, parse_answer(text), [key])

    return lambda queries: [answer(query) for query in queries]


def empty_policy() -> Policy:
    """The empty answer as the policy: every query answered with the first shown frame and no boxes, read back by
    the parser a model's answer goes through (status "no_boxes"), so its masks are empty on every frame — made
    without running SAM2, which is given no prompt (`predict_masks`). Run through the same scoring, it is what
    answering nothing scores (the benchmark table's `empty_answer` row): J = 1 on a frame exactly when the target
    is absent there, so a model must beat it to have found anything.
    """
    def answer(query: Query) -> Reply:
        key = query.timestamps[0]
        text = f'<think>the empty answer</think><answer>{{"keyframe_timestamp": {key}, "bbox_2d_list": []}}</answer>'
        return Reply(text, parse_answer(text), [key])

    return lambda queries: [answer(query) for query in queries]


def segmenter(params: EvaluateParams, sam2: Sam2Params) -> Segmenter:
    """`evaluate.segmenter`: "sam2" (boxes prompt SAM2 at the keyframe, tracked both ways) or "box" (the
    keyframe boxes filled as the mask on every frame: the lower bound of a box-only method). The segmenter
    carries its name and checkpoint (`describe_segmenter`)."""
    if params.segmenter == "box":
        if sam2.checkpoint != Sam2Params.checkpoint:  # a SAM2 was named, so it was likely meant to make the masks
            log.warning("evaluate.segmenter is box: the masks are the answered boxes on every frame, and "
                        "sam2.checkpoint %s does not make them (set evaluate.segmenter=sam2 for SAM2's tracking)",
                        sam2.checkpoint)
        return box_masks
    from stages.sam2_wrapper import load_video_predictor

    # many objects per frame: memory attention's self-attention runs once per frame for all of them
    predictor = load_video_predictor(sam2.checkpoint, sam2.config, share_frame_self_attention=True)

    def segment(frames, prompts, sink: MaskSink | None = None, spill_dir: Path | None = None):
        return predict_masks(predictor, frames, prompts, params.mask_threshold, sink=sink, spill_dir=spill_dir)

    segment.streams = True
    segment.kind, segment.checkpoint, segment.config = "sam2", str(sam2.checkpoint), str(sam2.config)
    return segment


def describe_segmenter(segment: Segmenter) -> dict[str, str | None]:
    """What made the masks, for the people who read them (`vrsflow segment`'s answer.json, the demo page):
    {"name": "sam2" | "box", "description", "checkpoint", "config"} — checkpoint and config None for the box
    segmenter, which has none; a segmenter built elsewhere is "custom"."""
    from stages.evaluate.report import SEGMENTERS

    kind = getattr(segment, "kind", "custom")
    checkpoint = getattr(segment, "checkpoint", None)
    return {"name": kind, "description": SEGMENTERS.get(kind, "a segmenter vrsflow did not build"),
            "checkpoint": str(Path(checkpoint).resolve()) if checkpoint else None,
            "config": getattr(segment, "config", None)}


def box_masks(frames: list[np.ndarray], prompts: list[tuple[int, list[list[float]]]],
              sink: MaskSink | None = None, spill_dir: Path | None = None) -> list[np.ndarray] | None:
    """Per prompt, the union of its boxes (video pixels, exclusive edges; the pixels whose centres they cover,
    `stages.core.pixel_box.boxes_mask`) on every frame."""
    height, width = frames[0].shape[:2]
    out = []
    for prompt in prompts:  # (keyframe, boxes[, point prompts]): points do not change a box mask
        mask = boxes_mask(prompt[1], height, width)
        out.append(np.broadcast_to(mask, (len(frames), height, width)))
    if sink is None:
        return out
    for t in range(len(frames)):
        for i, masks in enumerate(out):
            sink(i, t, masks[t])
    return None


box_masks.streams = True
box_masks.kind = "box"


@dataclass
class VideoAnswers:
    """What the model answered for a video's queries, and the SAM2 prompts made from it (`answer_video`)."""

    shown_idx: list[int]  # frame positions shown to the model (its timestamps)
    shown: list[Image.Image]  # those frames at the shown size
    replies: list[Reply]
    picks: list[tuple[str, int, list[list[float]]]]  # per query: (status, keyframe index, boxes in video pixels)
    points: list[list[list[tuple[float, float, int]]]]  # per query: SAM2 point prompts per kept box
    seconds: float = 0.0  # the policy's time

    @property
    def prompts(self) -> list[tuple]:
        """SAM2 prompts, one per query: (keyframe, boxes[, point prompts per box])."""
        return [(key, boxes, pts) if pts else (key, boxes) for (_, key, boxes), pts in zip(
            self.picks, self.points, strict=True)]


def answer_video(params: EvaluateParams, size: int, policy: Policy, frames: Sequence[np.ndarray],
                 queries: list[tuple[str, str]]) -> VideoAnswers:
    """The model's side of one video: N frames sampled uniformly and shown at `size`, every (key, text) query
    answered together, the answers turned into SAM2 prompts in video pixels. `frames` may read each frame
    when indexed (`vrsflow segment` on a long video): only the frames shown and chosen are read here.
    """
    height, width = frames[0].shape[:2]
    shown_idx = spread_frames(len(frames), params.n_frames)
    shown = [Image.fromarray(frames[t]).resize((size, size), Image.Resampling.BICUBIC) for t in shown_idx]
    key_side = params.keyframe_size or size  # RCoT-Seg AKS / KTG and VideoSeg-R1: the chosen frame alone, this side

    def frame_at(t: int) -> Image.Image:
        return Image.fromarray(frames[t]).resize((key_side, key_side), Image.Resampling.BICUBIC)

    started = time.perf_counter()
    replies = policy([Query(key, text, list(shown_idx), shown, frame_at=frame_at) for key, text in queries])
    seconds = time.perf_counter() - started
    # an answer given on the chosen frame alone (RCoT-Seg KTG, VideoSeg-R1) is in that frame's pixels
    picks = [select_prompt(reply, shown_idx, reply.answer_size or size, width, height) for reply in replies]
    # VideoSeg-R1 answers also carry positive / negative points: they prompt SAM2 with the boxes
    points = [select_points(reply, reply.answer_size or size, width, height) for reply in replies]
    return VideoAnswers(list(shown_idx), shown, replies, picks, points, seconds)


def segment_answers(segment: Segmenter, frames: Sequence[np.ndarray], answers: VideoAnswers, sink: MaskSink,
                    spill_dir: Path | None = None) -> None:
    """Each query's mask of every frame to `sink(query, t, mask)`: as SAM2 makes them (a streaming segmenter:
    nothing is held), or from the arrays another segmenter returns."""
    if getattr(segment, "streams", False):
        segment(frames, answers.prompts, sink=sink, spill_dir=spill_dir)
        return
    for i, masks in enumerate(segment(frames, answers.prompts)):
        for t, mask in enumerate(masks):
            sink(i, t, mask)


def evaluate_video(params: EvaluateParams, size: int, policy: Policy, segment: Segmenter, root: Path,
                   gt: GroundTruth, video: str, rows: list[dict], pred_dir: Path) -> list[dict]:
    """Answer, segment and write predictions for the expressions of one video; returns InferenceSchema rows.

    `rows`: the eval pool's rows of the video (sample_id, expression_id, exp_id, text).
    """
    names = list(gt.videos[video]["frames"])
    frames = _load_video(root, video, names)
    answers = answer_video(params, size, policy, frames, [(row["sample_id"], row["text"]) for row in rows])
    shown_idx, replies, picks = answers.shown_idx, answers.replies, answers.picks
    folders = [pred_dir / video / str(row["exp_id"]) for row in rows]
    segment_answers(segment, frames, answers, lambda i, t, mask: write_mask(folders[i], names[t], mask))
    out = []
    for row, reply, (status, key, boxes) in zip(rows, replies, picks, strict=True):
        entry = gt.videos[video]["expressions"][str(row["exp_id"])]
        annos = [str(a) for a in entry.get("anno_id", [])]
        ratio, iou = _keyframe_quality(gt, annos, shown_idx, key if status != "parse_failure" else None, boxes)
        out.append({
            "sample_id": row["sample_id"], "expression_id": row["expression_id"], "video": video,
            "exp_id": str(row["exp_id"]), "type_id": int(entry.get("type_id", 0)), "text": row["text"],
            "n_video_frames": len(frames), "frame_indices": list(shown_idx), "timestamps": list(shown_idx),
            "frame_size": size, "response": reply.response, "status": status,
            "keyframe_timestamp": None if reply.answer is None else float(key),
            "keyframe_idx": None if reply.answer is None else float(key),
            "boxes": [] if reply.answer is None else [list(map(float, b)) for b in reply.answer.boxes],
            "n_rounds": reply.n_rounds, "rounds": list(reply.rounds),
            "keyframe_area_ratio": ratio, "keyframe_box_iou": iou,
        })
    return out


def select_prompt(reply: Reply, shown_idx: list[int], size: int, width: int, height: int
                  ) -> tuple[str, int, list[list[float]]]:
    """(status, keyframe index in the video, boxes in video pixels) of one reply.

    Status: "parse_failure" (the answer does not parse), "no_boxes" (it parses and holds no box),
    "degenerate_boxes" (it holds boxes, but every one is empty after scaling and clipping to the frame: inverted
    corners, zero width or height, outside the frame — nothing to segment), "keyframe_not_shown" (moved to the
    nearest shown frame, earlier on a tie) or "ok".
    """
    answer = reply.answer
    if answer is None:
        return "parse_failure", 0, []
    key = answer.keyframe_timestamp
    status = "ok"
    if key not in shown_idx:  # timestamps are frame positions; keep the model's choice as close as possible
        key = nearest_shown(shown_idx, key)
        status = "keyframe_not_shown"
    sx, sy = width / size, height / size
    boxes = []
    for x1, y1, x2, y2 in answer.boxes:
        box = [min(max(x1 * sx, 0.0), width), min(max(y1 * sy, 0.0), height),
               min(max(x2 * sx, 0.0), width), min(max(y2 * sy, 0.0), height)]
        if box[2] > box[0] and box[3] > box[1]:
            boxes.append(box)
    if not boxes:  # the same rule as `schemas.answer.box_status`, on the boxes in video pixels
        status = NO_BOXES if not answer.boxes else DEGENERATE_BOXES
    return status, key, boxes


def select_points(reply: Reply, size: int, width: int, height: int) -> list[list[tuple[float, float, int]]]:
    """Per box that `select_prompt` keeps, its SAM2 point prompts in video pixels: the answer's positive point
    (label 1) and the negative points nearest to that box (label 0); [] when the answer has no points."""
    answer = reply.answer
    if answer is None or (answer.points is None and not answer.negative_points):
        return []
    sx, sy = width / size, height / size
    kept = []
    for i, (x1, y1, x2, y2) in enumerate(answer.boxes):
        box = [min(max(x1 * sx, 0.0), width), min(max(y1 * sy, 0.0), height),
               min(max(x2 * sx, 0.0), width), min(max(y2 * sy, 0.0), height)]
        if box[2] > box[0] and box[3] > box[1]:
            kept.append((i, box))
    if not kept:
        return []
    out: list[list[tuple[float, float, int]]] = [[] for _ in kept]
    if answer.points is not None:
        for j, (i, _) in enumerate(kept):
            out[j].append((answer.points[i][0] * sx, answer.points[i][1] * sy, 1))
    for x, y in answer.negative_points or ():
        x, y = x * sx, y * sy
        gaps = [max(b[0] - x, 0, x - b[2]) ** 2 + max(b[1] - y, 0, y - b[3]) ** 2 for _, b in kept]
        out[int(np.argmin(gaps))].append((x, y, 0))
    return out


def predict_masks(predictor, frames: list[np.ndarray], prompts: list[tuple[int, list[list[float]]]],
                  threshold: float = 0.0, share_prompts: bool = True, sink: MaskSink | None = None,
                  spill_dir: Path | None = None) -> list[np.ndarray] | None:
    """Union mask (T, H, W bool) per prompt (keyframe index, boxes in video pixels[, point prompts per box]),
    SAM2-tracked both ways.

    All prompts of one video share the frame encoding, and a box prompted more than once at the same
    keyframe with the same points (expressions of one video answered alike) is tracked once: SAM2 tracks
    the objects of a batch independently, so its masks are those it would get on its own. A prompt
    without boxes gives an empty mask. `share_prompts=False` tracks every box of every prompt (a benchmark's
    ablation). With `sink`, each prompt's mask of each frame goes to `sink(prompt, t, mask)` as SAM2 tracks it
    and nothing is returned or held (`spill_dir`: where SAM2's shared encoding is kept; see `propagate_groups`).
    """
    from stages.sam2_wrapper import propagate_groups

    height, width = frames[0].shape[:2]
    objects: dict[int, dict[tuple, int]] = {}  # keyframe → distinct (box, points) → position in its group
    members: list[list[tuple[int, int]]] = []  # per prompt: (keyframe, position) of each of its boxes
    for prompt in prompts:
        key, boxes = prompt[0], prompt[1]
        points = prompt[2] if len(prompt) > 2 and prompt[2] else [()] * len(boxes)
        if not boxes:  # an empty mask: no keyframe group for SAM2 (a video answered with no boxes encodes nothing)
            members.append([])
            continue
        distinct = objects.setdefault(key, {})
        members.append([(key, distinct.setdefault((tuple(map(float, box)), tuple(tuple(map(float, p)) for p in pts),
                                                   None if share_prompts else len(distinct)), len(distinct)))
                        for box, pts in zip(boxes, points, strict=True)])
    if sink is not None:
        return _stream_masks(predictor, frames, prompts, objects, members, threshold, sink, spill_dir)
    if not any(members):
        return [np.zeros((len(frames), height, width), dtype=bool) for _ in prompts]
    keys = sorted(objects)
    groups = _groups(objects, keys)
    tracked = dict(zip(keys, propagate_groups(predictor, frames, groups, threshold), strict=True))
    out = []
    for boxes in members:
        union = np.zeros((len(frames), height, width), dtype=bool)
        for key, i in boxes:
            union |= tracked[key][i]
        out.append(union)
    return out


def _groups(objects: dict[int, dict[tuple, int]], keys: list[int]) -> list:
    from stages.sam2_wrapper import BoxGroup

    return [BoxGroup(key, [list(box) for box, _, _ in objects[key]],
                     [[(x, y, int(label)) for x, y, label in pts] for _, pts, _ in objects[key]]
                     if any(p for _, p, _ in objects[key])
                     else ()) for key in keys]


def _stream_masks(predictor, frames, prompts, objects: dict[int, dict[tuple, int]],
                  members: list[list[tuple[int, int]]], threshold: float, sink: MaskSink,
                  spill_dir: Path | None) -> None:
    """`predict_masks` with a sink: each prompt's union mask of frame t, made as SAM2 tracks frame t of the
    prompt's keyframe group (a prompt's boxes all share its keyframe), given to `sink` at once."""
    from stages.sam2_wrapper import propagate_groups

    height, width = frames[0].shape[:2]
    empty = np.zeros((height, width), dtype=bool)
    for i, boxes in enumerate(members):
        if not boxes:
            for t in range(len(frames)):
                sink(i, t, empty)
    keys = sorted(objects)
    by_key: dict[int, list[tuple[int, list[int]]]] = {}
    for i, boxes in enumerate(members):
        if boxes:
            by_key.setdefault(boxes[0][0], []).append((i, [pos for _, pos in boxes]))

    def group_sink(g: int, t: int, masks: np.ndarray) -> None:
        for i, rows in by_key[keys[g]]:
            sink(i, t, masks[rows].any(axis=0))

    if keys:
        propagate_groups(predictor, frames, _groups(objects, keys), threshold, sink=group_sink, spill_dir=spill_dir)


def write_prediction(folder: Path, names: list[str], masks: np.ndarray) -> None:
    """One 0/255 grayscale PNG per frame, `<folder>/<frame>.png` (VISA's layout)."""
    for name, mask in zip(names, masks, strict=True):
        write_mask(folder, name, mask)


def write_mask(folder: Path, name: str, mask: np.ndarray) -> None:
    """One frame's mask as a 0/255 grayscale PNG, `<folder>/<name>.png` (VISA's layout)."""
    folder.mkdir(parents=True, exist_ok=True)
    Image.fromarray(mask.astype(np.uint8) * 255, mode="L").save(folder / f"{name}.png")


def box_iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of (n, 4) and (m, 4) boxes [x1, y1, x2, y2] (exclusive edges)."""
    a, b = np.asarray(a, float).reshape(-1, 4), np.asarray(b, float).reshape(-1, 4)
    w = np.clip(np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0, None)
    h = np.clip(np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]), 0, None)
    inter = w * h
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def matched_box_iou(pred: list[list[float]], gt: list[list[float]]) -> float:
    """Σ Hungarian-matched IoU / max(#pred, #gt) (Veason-R1's spatial score); 0 when only one side is empty."""
    if not pred or not gt:
        return 0.0
    iou = box_iou_matrix(np.asarray(pred), np.asarray(gt))
    rows, cols = linear_sum_assignment(1 - iou)
    return float(iou[rows, cols].sum() / max(len(pred), len(gt)))


def _keyframe_quality(gt: GroundTruth, annos: list[str], shown_idx: list[int], key: int | None,
                      boxes: list[list[float]]) -> tuple[float | None, float | None]:
    """(target area at the keyframe ÷ max over the frames shown, matched box IoU at the keyframe).

    None for no-target expressions and when the target is absent from every frame shown; 0 for an
    unparseable answer.
    """
    if not annos:
        return None, None
    areas = target_areas(gt, annos, shown_idx)
    if max(areas) == 0:
        return None, None
    if key is None:
        return 0.0, 0.0
    ratio = areas[shown_idx.index(key)] / max(areas)
    return float(ratio), matched_box_iou(boxes, target_boxes(gt, annos, key))


def target_areas(gt: GroundTruth, annos: list[str], frames: list[int]) -> list[float]:
    """Per frame, the area of the union of the targets' masks (computed on the RLEs, nothing decoded)."""
    areas = []
    for t in frames:
        rles = [to_coco(gt.masks[a][t]) for a in annos if gt.masks[a][t]]
        areas.append(float(mask_utils.area(mask_utils.merge(rles, intersect=False))) if rles else 0.0)
    return areas


def target_boxes(gt: GroundTruth, annos: list[str], t: int) -> list[list[float]]:
    """Each target's box [x1, y1, x2, y2] on frame `t` (video pixels, exclusive edges); empty targets left out."""
    boxes = []
    for a in annos:
        rle = gt.masks[a][t]
        if rle:
            x, y, w, h = (float(v) for v in mask_utils.toBbox(to_coco(rle)))
            if w > 0 and h > 0:
                boxes.append([x, y, x + w, y + h])
    return boxes


def _answer_metrics(answers: pd.DataFrame, mode: str) -> dict[str, float | int]:
    """Counts of answer statuses, keyframe / box quality (failures count 0), RCoT rounds."""
    out: dict[str, float | int] = {f"n_answer_{s}": int((answers["status"] == s).sum())
                                   for s in ANSWER_STATUSES if s != "ok"}
    out["parse_failure_rate"] = float((answers["status"] == "parse_failure").mean()) if len(answers) else 0.0
    for col, name in (("keyframe_area_ratio", "keyframe_area_ratio"), ("keyframe_box_iou", "keyframe_box_iou")):
        values = answers[col].dropna()
        out[name] = float(values.mean()) if len(values) else 0.0
    if mode == "rcot":
        out["rcot_mean_rounds"] = float(answers["n_rounds"].mean()) if len(answers) else 0.0
        out["rcot_max_rounds"] = int(answers["n_rounds"].max()) if len(answers) else 0
    return out
