"""Benchmark: the evaluate stage's per-video path (`evaluate_video` with every expression of a video: the
frames loaded and encoded by SAM2 once for all its expressions; generation batched `evaluate.batch_size`
queries at a time, the shown frames processed and run through the Qwen vision tower once per batch; a box
prompted at the same keyframe by several expressions tracked once) vs the per-expression path (the same
function called for one expression at a time, as the released evaluators run: the video's frames loaded,
shown, encoded by the vision tower and by SAM2 again for every expression, one query per generate() call),
same models, same inputs, in the same run. A third path, the per-video one with every prompted box tracked
(`predict_masks(share_prompts=False)`), shows how much of the gain comes from the oracle's repeated boxes.

Data: the default synthetic dataset (`synth` defaults: 4 valid videos), every expression of its valid
split. Models: the tiny random Qwen2.5-VL and micro SAM2 at the `tiny_models` defaults, built here.
The policy is the tiny Qwen answering every query for real (its generation is what is timed), but a
random model does not write the answer format, so its parsed answer is replaced by a ground-truth one
(the shown frame where the targets are largest, their boxes at the shown size; computed from the masks
here), so that SAM2 tracks real prompts on both paths. Expressions with the same targets therefore prompt
the same boxes at the same keyframe (a model's answers would repeat less often). Before any figure is
written, every prediction PNG of every path is ASSERTED equal, the score tables identical, and every
generated response identical (greedy decoding in a video's batch = each expression alone).

    python bench/bench_evaluate.py [--repeats 1] [--max-new-tokens 256] [--batch-size 4]

Writes bench/results/evaluate.json (seconds per video, both paths, and their ratio; target ≥ 3×).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results_io import write_result  # noqa: E402
from schemas.answer import parse_answer  # noqa: E402
from stages.core.ids import expression_id  # noqa: E402
from stages.core.rle import to_coco  # noqa: E402
from stages.evaluate import evaluate_video, model_policy, predict_masks, target_areas, target_boxes  # noqa: E402
from stages.evaluate.infer import Reply  # noqa: E402
from stages.evaluate.scorer import load_ground_truth, score_predictions  # noqa: E402
from stages.params.evaluate import EvaluateParams  # noqa: E402
from stages.params.synth import SynthParams  # noqa: E402
from stages.params.tiny_models import TinyModelsParams  # noqa: E402
from stages.sam2_wrapper import load_video_predictor  # noqa: E402


def oracle_boxes(gt, video: str, exp_id: str, shown: list[int], size: int) -> tuple[int, list[list[int]]]:
    """(shown frame where the targets' union is largest, their boxes there at the shown size)."""
    annos = [str(a) for a in gt.videos[video]["expressions"][exp_id].get("anno_id", [])]
    areas = target_areas(gt, annos, shown)
    best = shown[int(np.argmax(areas))]  # the first of equal areas, shown[0] when no target shows
    sizes = [to_coco(rle)["size"] for a in annos for rle in gt.masks[a] if rle]
    if not sizes:
        return best, []
    height, width = sizes[0]
    return best, [[round(x1 * size / width), round(y1 * size / height), round(x2 * size / width),
                   round(y2 * size / height)] for x1, y1, x2, y2 in target_boxes(gt, annos, best)]


def timed_model_with_oracle_answers(model, gt, size: int):
    """The tiny Qwen generates for every query (timed), its answer replaced by the ground-truth one."""
    def policy(queries):
        replies = model(queries)
        out = []
        for query, reply in zip(queries, replies, strict=True):
            video, exp_id = query.key.rsplit("#", 1)
            key, boxes = oracle_boxes(gt, video, exp_id, query.timestamps, size)
            text = f'<think>{reply.response}</think><answer>{{"keyframe_timestamp": {key}, ' \
                   f'"bbox_2d_list": {json.dumps(boxes)}}}</answer>'
            out.append(Reply(text, parse_answer(text), [key]))
        return out
    return policy


class Clock:
    """Seconds spent inside wrapped callables (generation, SAM2), per path."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.path = ""

    def wrap(self, name: str, fn):
        def timed(*args):
            start = time.perf_counter()
            try:
                return fn(*args)
            finally:
                key = f"{self.path}_{name}_s"
                self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - start
        return timed


def run_video(path: str, params, size, policy, segment, root, gt, video, rows, pred: Path
              ) -> tuple[float, list[dict]]:
    """(seconds one path takes for one video, its answer rows); predictions written under `pred`."""
    start = time.perf_counter()
    if path.startswith("per_video"):
        answers = evaluate_video(params, size, policy, segment, root, gt, video, rows, pred)
    else:
        answers = [a for row in rows for a in evaluate_video(params, size, policy, segment, root, gt, video, [row],
                                                              pred)]
    return time.perf_counter() - start, answers


def boxes_tracked(answers: list[dict], shared: bool) -> int:
    """SAM2 objects one video's answers make the per-video path track (distinct boxes per keyframe if shared)."""
    boxes = [(a["keyframe_idx"], tuple(b)) for a in answers if a["status"] != "parse_failure" for b in a["boxes"]]
    return len(set(boxes)) if shared else len(boxes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=1, help="best of N per path")
    parser.add_argument("--max-new-tokens", type=int, default=EvaluateParams().max_new_tokens)
    parser.add_argument("--batch-size", type=int, default=EvaluateParams().batch_size)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="default: bench/results/evaluate.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from stages.synth import generate_synthetic
    from stages.tiny_models.tiny_qwen import build_tiny_qwen
    from stages.tiny_models.tiny_sam2 import build_tiny_sam2

    tiny = TinyModelsParams()
    size = 112  # keyframes.train_size default: the frame side shown
    params = EvaluateParams(max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        root = tmp / "synth"
        generate_synthetic(SynthParams(), root)
        build_tiny_qwen(tiny, tmp / "qwen")
        checkpoint, config = build_tiny_sam2(tmp / "sam2", tiny.sam2_image_size, tiny.seed)
        gt = load_ground_truth(root, "valid")
        videos = []
        for video in sorted(gt.videos):
            exps = sorted(gt.videos[video]["expressions"].items(), key=lambda kv: int(kv[0]))
            videos.append((video, [{"sample_id": expression_id(video, k), "expression_id": expression_id(video, k),
                                    "exp_id": k, "text": e["exp"]} for k, e in exps]))
        ids = [r["expression_id"] for _, rows in videos for r in rows]
        policy = timed_model_with_oracle_answers(model_policy(params, tmp / "qwen", "auto"), gt, size)
        # as evaluate's `segmenter` loads it
        predictor = load_video_predictor(str(checkpoint), str(config), share_frame_self_attention=True)
        clock = Clock()
        policy = clock.wrap("generate", policy)
        segments = {share: clock.wrap("sam2", lambda frames, prompts, share=share: predict_masks(
            predictor, frames, prompts, params.mask_threshold, share_prompts=share)) for share in (True, False)}
        paths = ("per_expression", "per_video", "per_video_every_box")
        segment_of = {"per_expression": segments[True], "per_video": segments[True],
                      "per_video_every_box": segments[False]}
        run_video("per_video", params, size, policy, segments[True], root, gt, *videos[0], tmp / "warm")  # warm-up
        clock.seconds.clear()
        best = {p: [float("inf")] * len(videos) for p in paths}
        answers: dict[str, dict[str, list[dict]]] = {p: {} for p in paths}
        for r in range(args.repeats):  # every path on each video in turn: machine load drifts alike on all
            for v, (video, rows) in enumerate(videos):
                for path in paths if (r + v) % 2 == 0 else paths[::-1]:
                    clock.path = path
                    seconds, answers[path][video] = run_video(path, params, size, policy, segment_of[path], root,
                                                              gt, video, rows, tmp / path)
                    best[path][v] = min(best[path][v], seconds)
        for path in paths[1:]:
            for video, rows in videos:  # every PNG of every expression, every path: the same mask
                for row in rows:
                    for png in sorted((tmp / "per_expression" / video / row["exp_id"]).glob("*.png")):
                        a = np.asarray(Image.open(png))
                        b = np.asarray(Image.open(tmp / path / video / row["exp_id"] / png.name))
                        if not np.array_equal(a, b):
                            raise AssertionError(f"{path} {video}#{row['exp_id']} {png.name}: masks differ "
                                                 f"({int((a != b).sum())} pixels)")
                responses = [[a["response"] for a in answers[p][video]] for p in ("per_expression", path)]
                if responses[0] != responses[1]:
                    raise AssertionError(f"{path} {video}: generated responses differ from the per-expression ones")
        tables = [score_predictions(tmp / p, root, "valid", ids, None, params.bound_th, gt)[1] for p in paths]
        if not all(t.equals(tables[0]) for t in tables[1:]):
            raise AssertionError("score tables differ between the paths")
        summary = score_predictions(tmp / "per_video", root, "valid", ids, None, params.bound_th, gt)[0]
        foreground = sum(int((np.asarray(Image.open(p)) > 0).sum()) for p in (tmp / "per_video").rglob("*.png"))
    per_expr, per_video = np.mean(best["per_expression"]), np.mean(best["per_video"])
    every_box = np.mean(best["per_video_every_box"])
    figures = {
        "data": "synth default, valid split", "videos": len(videos), "expressions": len(ids),
        "frames_per_video": [len(gt.videos[v]["frames"]) for v, _ in videos],
        "expressions_per_video": [len(rows) for _, rows in videos],
        "models": f"tiny Qwen2.5-VL (hidden {tiny.hidden_size}, {tiny.num_layers} layers) + micro SAM2 "
                  f"({tiny.sam2_image_size}²), random weights; answers replaced by ground-truth boxes",
        "n_frames": params.n_frames, "frame_size": size, "batch_size": params.batch_size,
        "max_new_tokens": params.max_new_tokens, "threads": args.threads, "repeats_best_of": args.repeats,
        "per_expression_s_per_video": round(float(per_expr), 3), "per_video_s_per_video": round(float(per_video), 3),
        "speedup": round(float(per_expr / per_video), 2), "target_speedup": 3.0, "masks_equal": True,
        "scores_equal": True, "responses_equal": True, "JF_overall": round(float(summary["JF_overall"]), 3),
        "foreground_pixels": foreground,
        "per_video_speedups": [round(a / b, 2) for a, b in zip(best["per_expression"], best["per_video"],
                                                                strict=True)],
        "sam2_boxes_prompted": sum(boxes_tracked(answers["per_video"][v], False) for v, _ in videos),
        "sam2_boxes_tracked_per_video": sum(boxes_tracked(answers["per_video"][v], True) for v, _ in videos),
        "per_video_every_box_s_per_video": round(float(every_box), 3),
        "speedup_every_box_tracked": round(float(per_expr / every_box), 2),
        "inside_all_repeats_s": {k: round(v, 3) for k, v in sorted(clock.seconds.items())},
    }
    write_result("evaluate", figures, "per expression: evaluate_video called for one expression at a time (frames "
                 "loaded, vision-encoded and SAM2-encoded again per expression, one query per generate() call)",
                 code=("stages/evaluate", "stages/sam2_wrapper", "bench/bench_evaluate.py"), out=args.out)


if __name__ == "__main__":
    main()
