"""Benchmark: seconds per training clip of the tiny SAM2 at several `pretrain_sam2.clips_per_step`, on whatever
device torch finds — which batch size to pre-train with there.

One clip per step leaves a GPU waiting on kernel launches (an H200 ran 1.48 steps/s per seed,
`gpu-h200-pretrain-throughput.json`, against 0.4 on one CPU core): a step is a chain of small kernels (the frames in
turn, memory attention, 7 correction clicks one after another). Batching the objects of several clips into one
SAM2 batch (`clips_per_step`) makes each kernel larger without adding launches. This times the stage's own step
(`stages.pretrain_sam2.step_clips` → `clip_loss` → backward → AdamW), params.yaml's recipe, from the random tiny
SAM2 (`models/tiny/sam2`, built by the tiny_models stage's function when missing), after one warm-up step; the
baseline is one clip per step (the stage's default), in the same run.

    python bench/sam2_clips_per_step.py [--clips 1 4 16] [--steps 5] [--out bench/results/sam2-clips-per-step-cpu.json]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.results_io import write_result  # noqa: E402


def time_clips_per_step(clips_per_step: int, steps: int, device: str) -> dict:
    """Seconds per step and per clip of `steps` optimizer steps (after one warm-up step) at `clips_per_step`."""
    import stages.pretrain_sam2 as stage
    from stages.params import load_params
    from stages.params.synth import SynthScale
    from stages.sam2_wrapper import load_video_predictor

    params = replace(load_params(REPO / "params.yaml").pretrain_sam2, clips_per_step=clips_per_step)
    base = REPO / params.base
    model = load_video_predictor(str(base / stage.CHECKPOINT), str(base / stage.CONFIG), device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=params.learning_rate)
    scale, seconds, objects = SynthScale(), [], []
    for step in range(steps + 1):
        clips = stage.step_clips(params, 0, step, scale)
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        terms = stage.clip_loss(model, clips, stage.prompt_kind(0, step, params.point_prompt_share),
                                params.box_noise, params.correction_clicks, params.iou_loss_weight)
        optimizer.zero_grad(set_to_none=True)
        terms["loss"].backward()
        optimizer.step()
        if device == "cuda":
            torch.cuda.synchronize()
        if step:  # the first step warms up (allocator, kernels' autotuning)
            seconds.append(time.perf_counter() - started)
            objects.append(sum(c.n_targets for c in clips))
    per_step = sum(seconds) / len(seconds)
    return {"clips_per_step": clips_per_step, "s_per_step": round(per_step, 4),
            "s_per_clip": round(per_step / clips_per_step, 4),
            "objects_per_step": round(sum(objects) / len(objects), 2),
            "clip_frames": params.clip_frames, "correction_clicks": params.correction_clicks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clips", type=int, nargs="+", default=[1, 4], help="clips_per_step values (1 first)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per value (one more warms up)")
    parser.add_argument("--threads", type=int, default=1, help="CPU: torch threads (the stage's cpu_threads)")
    parser.add_argument("--out", type=Path, default=None, help="results file (default: bench/results/<name>.json)")
    args = parser.parse_args()
    if args.clips[0] != 1:
        parser.error("--clips: the first value is the baseline, 1")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        torch.set_num_threads(args.threads)
    if not (REPO / "models" / "tiny" / "sam2").is_dir():
        from stages.params import load_params
        from stages.tiny_models import build_tiny_models

        tiny = load_params(REPO / "params.yaml").tiny_models
        build_tiny_models(tiny, REPO / tiny.out_dir)
    rows = []
    for clips in args.clips:
        rows.append(time_clips_per_step(clips, args.steps, device))
        print(f"sam2_clips_per_step: {rows[-1]}", flush=True)
    one = rows[0]["s_per_clip"]
    for row in rows:
        row["clips_per_s_vs_one"] = round(one / row["s_per_clip"], 3)
    name = args.out.stem if args.out else f"sam2-clips-per-step-{device}"
    figures = {"device": torch.cuda.get_device_name() if device == "cuda" else f"cpu, {args.threads} thread(s)",
               "steps_timed": args.steps, "rows": rows,
               "best": max(rows, key=lambda r: r["clips_per_s_vs_one"])}
    write_result(name, figures, "one clip per step (the stage's default), same run", out=args.out)


if __name__ == "__main__":
    main()
