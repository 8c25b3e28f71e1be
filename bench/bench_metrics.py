"""Benchmark: evaluation metrics and (with --gpu) seconds per 100-frame video of the whole evaluate path.

Metrics (default): J + F + R over a (T, H, W) stack, ours (`stages.evaluate.metrics`: the functions the
evaluate scorer calls — `j_measure`, `f_measure`, `r_visa`) against the published evaluators at their
fastest: DAVIS's `db_eval_iou` on the whole stack, DAVIS's `db_eval_boundary` (per-frame `f_measure`:
`_seg2bmap` + `cv2.dilate` by a disk) and VISA's robustness on the whole stack (bench/davis_reference.py,
written from davis2017-evaluation's metrics.py). The per-frame values of both are asserted identical
(==, not approximately) before timing. Synthetic masks: two moving ellipses at ReVOS-like 720p, the
prediction a shifted, noisier copy. Writes bench/results/metrics.json.

    python bench/bench_metrics.py [--frames 100] [--height 720] [--width 1280]

GPU (`--gpu`): seconds per 100-frame video for one expression: a Qwen2.5-VL-3B-shaped model with random
weights answers (N frames at 560², greedy, `--new-tokens` tokens), then a SAM2.1-large-shaped random
model tracks 2 boxes forward and backward over all frames at 1024 (bf16), through the stage's own
functions. Published: 36 s (Veason-R1-3B, 8 frames) and 31 s (RCoT-Seg) per video on an L20; goal ≤ 5 s
on one H100. `--shapes tiny` runs the same path with tiny shapes (a CPU smoke run; timings meaningless).
Writes bench/results/gpu-evaluate.json (tiny shapes: bench/out/, never committed).

    python bench/bench_metrics.py --gpu [--frames 100] [--n-frames 8] [--new-tokens 128]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import davis_reference as ref  # noqa: E402
from bench.results_io import write_result  # noqa: E402
from stages.evaluate import metrics as M  # noqa: E402

# --- metrics ----------------------------------------------------------------------------------------------


def synthetic_masks(frames: int, height: int, width: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    """(gt uint8 summed over 2 objects, prediction 0/255 uint8, foreground uint8), each (T, H, W)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:height, :width]
    gt = np.zeros((frames, height, width), np.uint8)
    pred = np.zeros_like(gt)
    for t in range(frames):
        for k, (cy, cx, ry, rx) in enumerate([(0.4, 0.3, 0.15, 0.1), (0.6, 0.6, 0.1, 0.2)]):
            y0, x0 = cy * height + 2 * t * (k + 1) % (height // 4), cx * width + 3 * t % (width // 4)
            inside = ((yy - y0) / (ry * height)) ** 2 + ((xx - x0) / (rx * width)) ** 2 <= 1
            gt[t] += inside
            shifted = ((yy - y0 - 6) / (ry * height * 1.05)) ** 2 + ((xx - x0 + 4) / (rx * width)) ** 2 <= 1
            pred[t] |= shifted
        pred[t] |= rng.random((height, width)) < 0.0005  # scattered false positives
    return gt, pred * np.uint8(255), (gt > 0).astype(np.uint8)


def published(gt: np.ndarray, pred: np.ndarray, fg: np.ndarray) -> dict[str, np.ndarray]:
    """The published evaluators: J and R on the whole stack, F frame by frame with cv2.dilate."""
    return {"J": ref.db_eval_iou(gt, pred), "F": ref.db_eval_boundary(gt, pred), "R_visa": ref.r_visa(gt, pred, fg)}


def ours(gt: np.ndarray, pred: np.ndarray, fg: np.ndarray) -> dict[str, np.ndarray]:
    """`stages.evaluate.metrics` as the scorer calls it."""
    return {"J": M.j_measure(gt, pred), "F": M.f_measure(gt, pred), "R_visa": M.r_visa(gt, pred, fg)}


def f_only_published(gt: np.ndarray, pred: np.ndarray, fg: np.ndarray) -> dict[str, np.ndarray]:
    return {"F": ref.db_eval_boundary(gt, pred)}


def f_only_ours(gt: np.ndarray, pred: np.ndarray, fg: np.ndarray) -> dict[str, np.ndarray]:
    return {"F": M.f_measure(gt, pred)}


def _best_interleaved(fns: dict, args: tuple, repeats: int) -> dict[str, float]:
    """Best-of-`repeats` seconds of each function, the functions taking turns within every repeat, so a
    change in the machine's load during the run weighs on all of them alike."""
    best = dict.fromkeys(fns, math.inf)
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn(*args)
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def bench_metrics(frames: int, height: int, width: int, repeats: int) -> dict:
    gt, pred, fg = synthetic_masks(frames, height, width)
    a, b = ours(gt, pred, fg), published(gt, pred, fg)
    for key in a:  # identical per-frame values, or no figure at all
        if a[key].tolist() != b[key].tolist():
            raise AssertionError(f"{key}: ours {a[key]} != published {b[key]}")
    args = (gt, pred, fg)
    seconds = _best_interleaved({"published_jfr": published, "ours_jfr": ours, "published_f": f_only_published,
                                 "ours_f": f_only_ours}, args, repeats)
    return {"frames": frames, "height": height, "width": width, "tolerance_px": M.tolerance_px(height, width),
            "values": {k: float(v.mean()) for k, v in a.items()}, "values_identical": True,
            "seconds": {k: round(v, 4) for k, v in seconds.items()}, "repeats_best_of": repeats,
            "speedup_jfr": round(seconds["published_jfr"] / seconds["ours_jfr"], 2),
            "speedup_f": round(seconds["published_f"] / seconds["ours_f"], 2), "target_speedup_jfr": 2.0}


# --- GPU: seconds per video ------------------------------------------------------------------------------


def _qwen_3b(tiny: bool, folder: Path):
    """A Qwen2.5-VL-3B-shaped (or tiny) random model + processor saved to and loaded from `folder`."""
    import torch
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
        Qwen2VLVideoProcessor,
    )

    from stages.tiny_models.tiny_qwen import CHAT_TEMPLATE, SPECIAL_TOKENS, build_tokenizer

    tokenizer = build_tokenizer(1024, 0)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    side = 112 if tiny else 560
    pixels = {"size": {"shortest_edge": 28 * 28, "longest_edge": side * side}, "patch_size": 14,
              "temporal_patch_size": 2, "merge_size": 2}
    processor = Qwen2_5_VLProcessor(image_processor=Qwen2VLImageProcessor(**pixels), tokenizer=tokenizer,
                                    video_processor=Qwen2VLVideoProcessor(**pixels), chat_template=CHAT_TEMPLATE)
    text = ({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 2048, "mrope": [4, 2, 2]} if tiny else
            {"hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16,
             "num_key_value_heads": 2, "vocab_size": 151936, "mrope": [16, 24, 24]})
    vision = ({"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "fullatt_block_indexes": [0]}
              if tiny else {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
                            "fullatt_block_indexes": [7, 15, 23, 31]})
    mrope = text.pop("mrope")
    config = Qwen2_5_VLConfig(
        text_config={**text, "max_position_embeddings": 32768, "tie_word_embeddings": True,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": mrope},
                     "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
                     "pad_token_id": ids["<|endoftext|>"]},
        vision_config={**vision, "out_hidden_size": text["hidden_size"], "patch_size": 14, "spatial_merge_size": 2,
                       "temporal_patch_size": 2, "window_size": 112, "tokens_per_second": 2},
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration(config).to(torch.bfloat16 if not tiny else torch.float32)
    model.generation_config.eos_token_id = -1  # never stop early: time exactly --new-tokens tokens
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    model.save_pretrained(folder)
    processor.save_pretrained(folder)


def _sam2_large(tiny: bool, folder: Path) -> tuple[str, str]:
    """A SAM2.1-large-shaped (or micro) random checkpoint + config in `folder`."""
    import torch
    import yaml
    from sam2.build_sam import build_sam2

    from stages.tiny_models.tiny_sam2 import BASE_CONFIG, MICRO_OVERRIDES

    base, overrides = (BASE_CONFIG, ["++model.image_size=256", *MICRO_OVERRIDES]) if tiny else (
        "configs/sam2.1/sam2.1_hiera_l.yaml", [])
    torch.manual_seed(0)
    model = build_sam2(base, ckpt_path=None, device="cpu", hydra_overrides_extra=overrides)
    checkpoint, config = folder / "model.pt", folder / "config.yaml"
    torch.save({"model": model.state_dict()}, checkpoint)
    config.write_text(yaml.safe_dump({"base": base, "overrides": overrides}))
    return str(checkpoint), str(config)


def bench_video(frames: int, n_frames: int, new_tokens: int, tiny: bool, repeats: int) -> dict:
    import torch
    from PIL import Image

    from stages.core.frame_spread import spread_frames
    from stages.evaluate import predict_masks
    from stages.evaluate.infer import Query, answer_queries
    from stages.models import load_vlm
    from stages.sam2_wrapper import load_video_predictor

    if not tiny and not torch.cuda.is_available():
        raise SystemExit("--gpu needs CUDA (use --shapes tiny for a CPU smoke run)")
    height, width, size = (120, 160, 56) if tiny else (720, 1280, 560)
    with tempfile.TemporaryDirectory() as tmp:
        _qwen_3b(tiny, Path(tmp) / "qwen")
        checkpoint, config = _sam2_large(tiny, Path(tmp))
        vlm, processor = load_vlm(Path(tmp) / "qwen", "float32" if tiny else "bfloat16")
        predictor = load_video_predictor(checkpoint, config, share_frame_self_attention=True)  # as evaluate's
    rng = np.random.default_rng(0)
    video = [rng.integers(0, 255, (height, width, 3), dtype=np.uint8) for _ in range(frames)]
    runs = []
    shown_idx = spread_frames(frames, n_frames)
    prompts = [(shown_idx[len(shown_idx) // 2], [[width * 0.2, height * 0.2, width * 0.5, height * 0.6],
                                                  [width * 0.6, height * 0.3, width * 0.9, height * 0.8]])]
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for _ in range(repeats):
        start = time.perf_counter()
        query = [Query("q", "the object that moves fastest", shown_idx,
                       [Image.fromarray(video[t]).resize((size, size)) for t in shown_idx])]  # resizing is timed
        answer_queries(vlm, processor, query, new_tokens, 1)
        sync()
        middle = time.perf_counter()
        predict_masks(predictor, video, prompts)
        sync()
        end = time.perf_counter()
        runs.append({"vlm_s": middle - start, "sam2_s": end - middle, "total_s": end - start})
    best = min(runs, key=lambda r: r["total_s"])
    phases = video_phases(vlm, processor, predictor, video, query, prompts, new_tokens, best)
    static = static_cache_answer(vlm, processor, query, new_tokens, repeats)
    return {"shapes": "tiny" if tiny else "qwen2.5-vl-3b + sam2.1-large", "video_frames": frames,
            "static_cache": static, "phases_s": phases,
            "phases_from": "one more run after the timed ones: the answer with 1 new token "
            "(prefill: processor, vision tower, the prompt's forward), decode = the best run's VLM time less it "
            "(with the shown frames' resizing, which the extra run reuses); "
            "forward hooks on SAM2's image encoder (each call synchronised), propagate = the best run's SAM2 time "
            "less the encoder's",
            "frames_shown": n_frames, "new_tokens": new_tokens, "frame_size": f"{width}x{height}",
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu", **best,
            "published_s": {"veason_r1_3b_L20": 36.0, "rcot_seg_L20": 31.0}, "goal_s": 5.0}


def static_cache_answer(vlm, processor, query: list, new_tokens: int, repeats: int) -> dict:
    """The answer's seconds with `evaluate.kv_cache: static` (the timed runs use the stage's default, a dynamic
    cache): its first call (on CUDA, transformers compiles the decode step there) and the best of `repeats` after
    it, and whether every answer is the dynamic cache's greedy text."""
    import torch

    from stages.evaluate.infer import answer_queries, use_static_cache

    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    dynamic = answer_queries(vlm, processor, query, new_tokens, 1)[0].response
    use_static_cache(vlm, "static")
    seconds, texts = [], []
    try:
        for _ in range(repeats + 1):
            sync()
            start = time.perf_counter()
            texts.append(answer_queries(vlm, processor, query, new_tokens, 1)[0].response)
            sync()
            seconds.append(time.perf_counter() - start)
    finally:
        vlm.generation_config.cache_implementation = None
    return {"first_call_s": round(seconds[0], 4), "vlm_s": round(min(seconds[1:]), 4),
            "same_text_as_dynamic": all(text == dynamic for text in texts)}


def video_phases(vlm, processor, predictor, video: list, query: list, prompts: list, new_tokens: int,
                 best: dict) -> dict:
    """The best run's time split into VLM prefill and decode and SAM2 image encoding and the rest of its
    propagation, from one more run: a 1-token answer (its time is the prefill), and the SAM2 pass with timing
    hooks on the image encoder (torch's module hooks; each call synchronised, so this run is not itself timed)."""
    import torch

    from stages.evaluate import predict_masks
    from stages.evaluate.infer import answer_queries

    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    start = time.perf_counter()
    answer_queries(vlm, processor, query, 1, 1)
    sync()
    prefill = time.perf_counter() - start
    encoder_s, started = [0.0], [0.0]

    def before(*_):  # noqa: ANN002, ANN202 - torch's hook signature
        sync()
        started[0] = time.perf_counter()

    def after(*_):  # noqa: ANN002, ANN202
        sync()
        encoder_s[0] += time.perf_counter() - started[0]

    hooks = [predictor.image_encoder.register_forward_pre_hook(before),
             predictor.image_encoder.register_forward_hook(after)]
    try:
        predict_masks(predictor, video, prompts)
    finally:
        for hook in hooks:
            hook.remove()
    return {"vlm_prefill": round(prefill, 4), "vlm_decode": round(max(0.0, best["vlm_s"] - prefill), 4),
            "new_tokens": new_tokens, "sam2_encode": round(encoder_s[0], 4),
            "sam2_propagate": round(max(0.0, best["sam2_s"] - encoder_s[0]), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--gpu", action="store_true", help="seconds per video with 3B / large shaped models")
    parser.add_argument("--shapes", choices=["real", "tiny"], default="real")
    parser.add_argument("--n-frames", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--out", type=Path, default=None, help="default: bench/results/<name>.json")
    args = parser.parse_args()
    if args.gpu:
        figures = bench_video(args.frames, args.n_frames, args.new_tokens, args.shapes == "tiny", args.repeats)
        out = args.out or (Path("bench/out/gpu-evaluate-tiny.json") if args.shapes == "tiny" else None)
        write_result("gpu-evaluate", figures, "published seconds per video (Veason-R1 36 s, RCoT-Seg 31 s on an "
                     "L20); goal 5 s on one H100", code=("stages", "bench/bench_metrics.py"), out=out)
    else:
        figures = bench_metrics(args.frames, args.height, args.width, args.repeats)
        write_result("metrics", figures, "davis2017-evaluation db_eval_iou (stack) + db_eval_boundary (per frame, "
                     "cv2.dilate) + VISA R (stack), bench/davis_reference.py",
                     code=("stages/evaluate/metrics.py", "bench/bench_metrics.py", "bench/davis_reference.py"),
                     out=args.out)


if __name__ == "__main__":
    main()
