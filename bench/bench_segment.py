"""Benchmark: `vrsflow segment` on real video sizes — seconds per frame for decode, generate and propagate at
480p and 1080p, and peak memory (RSS) of a 10 s and a 60 s 1080p clip (target: within 20 % of each other:
frames streamed to disk, SAM2's encoding in a file, masks written as they come).

Clips: synthetic H.264 mp4s written here with PyAV (a textured background, one box moving across it), at
`--fps` frames per second. Models: the tiny random Qwen2.5-VL and micro SAM2 at the `tiny_models` defaults,
built here (CPU), or with `--gpu` a Qwen2.5-VL-3B-shaped model and SAM2.1-large (random weights, built from
the packages' configs) on CUDA. Each clip runs in a fresh process (`run_video`, exactly what `vrsflow
segment` runs) that reports its own peak RSS. The model answers for real (its generation is what is timed);
a random model does not write the answer format, so an answer that does not parse is replaced by a fixed
box in the middle of the middle shown frame, so that SAM2 tracks a real prompt over every frame.

    nice -n 10 python bench/bench_segment.py [--fps 5] [--short 10] [--long 60] [--max-new-tokens 64] [--gpu]

Writes bench/results/segment.json (bench/results/gpu-segment.json with --gpu).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SIZES = {"480p": (480, 854), "1080p": (1080, 1920)}
# published: seconds per 100-frame video on an L20 (bench/bench_metrics.py; Veason-R1-3B 8 frames, RCoT-Seg)
PUBLISHED_100_FRAMES_S = {"veason_r1_3b_L20": 36.0, "rcot_seg_L20": 31.0}


def write_clip(path: Path, height: int, width: int, seconds: float, fps: int) -> Path:
    """A synthetic H.264 clip: a fixed textured background, a bright box moving left to right."""
    import av

    rng = np.random.default_rng(0)
    small = rng.integers(30, 120, (height // 8 + 1, width // 8 + 1, 3), dtype=np.uint8)
    background = np.repeat(np.repeat(small, 8, 0), 8, 1)[:height, :width]
    n = int(round(seconds * fps))
    side = height // 4
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"preset": "ultrafast", "crf": "23"}
        for t in range(n):
            frame = background.copy()
            x = int((width - side) * t / max(1, n - 1))
            frame[height // 3:height // 3 + side, x:x + side] = (230, 60, 40)
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def build_models(base: Path, gpu: bool) -> tuple[Path, Path, Path]:
    from stages.params.tiny_models import TinyModelsParams
    from stages.tiny_models.tiny_qwen import build_tiny_qwen
    from stages.tiny_models.tiny_sam2 import build_tiny_sam2

    if gpu:  # the shapes bench_metrics times on a GPU: Qwen2.5-VL-3B and SAM2.1-large, random weights
        from bench.bench_metrics import _qwen_3b, _sam2_large

        (base / "qwen").mkdir(parents=True)
        (base / "sam2").mkdir(parents=True)
        _qwen_3b(False, base / "qwen")
        checkpoint, config = _sam2_large(False, base / "sam2")
        return base / "qwen", Path(checkpoint), Path(config)
    params = TinyModelsParams()
    build_tiny_qwen(params, base / "qwen")
    checkpoint, config = build_tiny_sam2(base / "sam2", params.sam2_image_size, params.seed)
    return base / "qwen", checkpoint, config


def child(args: argparse.Namespace) -> None:
    """One clip in this process: `run_video` with the model answering; prints timings and peak RSS."""
    import torch

    from schemas.answer import parse_answer
    from stages.evaluate import model_policy
    from stages.evaluate.infer import Reply
    from stages.params import Params
    from stages.params.evaluate import EvaluateParams
    from stages.params.sam2 import Sam2Params
    from stages.segment_video import Engine, Request, run_video

    torch.set_num_threads(args.threads)
    params = Params(sam2=Sam2Params(checkpoint=args.sam2_checkpoint, config=args.sam2_config),
                    evaluate=EvaluateParams(max_new_tokens=args.max_new_tokens))
    model_answer = model_policy(params.evaluate, args.qwen, params.model.dtype)

    def policy(queries):
        replies = model_answer(queries)
        out = []
        for query, reply in zip(queries, replies, strict=True):
            if reply.answer is None:  # a random model: a fixed box, so that SAM2 has something to track
                t = query.timestamps[len(query.timestamps) // 2]
                side = query.images[0].width
                text = (f'{reply.response}<answer>{{"keyframe_timestamp": {t}, "bbox_2d_list": '
                        f'[[{side // 3}, {side // 3}, {2 * side // 3}, {2 * side // 3}]]}}</answer>')
                reply = Reply(text, parse_answer(text), [t])
            out.append(reply)
        return out

    engine = Engine(params, Path(args.qwen), policy=policy)
    started = time.perf_counter()
    record = run_video(engine, Path(args.clip), [Request(Path(args.clip), "the moving box", Path(args.out_dir))])[0]
    wall = time.perf_counter() - started
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    sys.stdout.write(json.dumps({"timings": record["timings"], "n_frames": record["video_info"]["n_frames"],
                                 "frames_with_mask": record["frames_with_mask"], "wall_s": wall,
                                 "peak_rss_mb": peak_kb / 1024, "status": record["status"]}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fps", type=int, default=5)
    parser.add_argument("--short", type=float, default=10.0, help="seconds of the short clips")
    parser.add_argument("--long", type=float, default=60.0, help="seconds of the long 1080p clip")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=64, help="evaluate.max_new_tokens (stage: 256)")
    parser.add_argument("--gpu", action="store_true", help="3B-shaped Qwen2.5-VL + SAM2.1-large on CUDA")
    parser.add_argument("--out", default="")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--qwen", default="", help=argparse.SUPPRESS)
    parser.add_argument("--sam2-checkpoint", default="", help=argparse.SUPPRESS)
    parser.add_argument("--sam2-config", default="", help=argparse.SUPPRESS)
    parser.add_argument("--clip", default="", help=argparse.SUPPRESS)
    parser.add_argument("--out-dir", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    from bench.results_io import write_result

    runs = {}
    with tempfile.TemporaryDirectory(prefix="bench-segment-") as tmp:
        tmp = Path(tmp)
        qwen, checkpoint, config = build_models(tmp / "models", args.gpu)
        clips = {"480p_short": ("480p", args.short), "1080p_short": ("1080p", args.short),
                 "1080p_long": ("1080p", args.long)}
        for name, (size, seconds) in clips.items():
            height, width = SIZES[size]
            clip = write_clip(tmp / f"{name}.mp4", height, width, seconds, args.fps)
            command = [sys.executable, __file__, "--child", name, "--qwen", str(qwen), "--sam2-checkpoint",
                       str(checkpoint), "--sam2-config", str(config), "--clip", str(clip), "--out-dir",
                       str(tmp / "out" / name), "--threads", str(args.threads), "--max-new-tokens",
                       str(args.max_new_tokens)]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                sys.stderr.write(done.stderr[-3000:])
                raise SystemExit(f"bench_segment: {name} failed")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            n = result["n_frames"]
            t = result["timings"]
            runs[name] = {
                "size": size, "seconds_of_video": seconds, "fps": args.fps, "n_frames": n,
                "seconds_per_frame": {"decode": round(t["decode_s"] / n, 4), "generate": round(t["generate_s"] / n, 4),
                                      "propagate": round(t["propagate_s"] / n, 4),
                                      "write": round(t["write_s"] / n, 4)},
                "generate_s": round(t["generate_s"], 2), "total_s": round(result["wall_s"], 2),
                "peak_rss_mb": round(result["peak_rss_mb"], 1), "frames_with_mask": result["frames_with_mask"],
            }
            sys.stderr.write(f"bench_segment: {name}: {json.dumps(runs[name])}\n")
    short, long = runs["1080p_short"]["peak_rss_mb"], runs["1080p_long"]["peak_rss_mb"]
    figures = {"clips": runs, "rss_1080p_long_over_short": round(long / short, 3), "rss_target_ratio": 1.2,
               "rss_within_target": bool(long / short <= 1.2 and short / long <= 1.2),
               "models": "3B-shaped Qwen2.5-VL + SAM2.1-large, random weights (cuda)" if args.gpu else
               "tiny random Qwen2.5-VL + micro SAM2 (tiny_models defaults), CPU",
               "threads": args.threads, "max_new_tokens": args.max_new_tokens}
    if args.gpu:
        frames_100 = {k: round(100 * sum(v["seconds_per_frame"].values()), 2) for k, v in runs.items()}
        figures.update({"seconds_per_100_frames": frames_100, "published_100_frames_s": PUBLISHED_100_FRAMES_S})
    name = "gpu-segment" if args.gpu else "segment"
    write_result(name, figures, "none: absolute seconds per frame and the peak RSS of a 10 s vs a 60 s 1080p clip "
                 "(ratio ≤ 1.2); each clip in a fresh process", out=Path(args.out) if args.out else None)


if __name__ == "__main__":
    main()
