"""The `vrsflow segment` and `vrsflow demo` commands (flows/cli.py registers them; errors are `InputError`s,
which the CLI prints as one line with a non-zero exit)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from stages.segment_video.source import InputError, probe


def add_arguments(parser: argparse.ArgumentParser, demo: bool = False) -> None:
    """Options shared by both commands (model, mode, params) and each command's own."""
    parser.add_argument("--model", default="", help="Qwen2.5-VL checkpoint folder (default: the pipeline's "
                                                    "models/grpo/merged, else models/sft/merged)")
    parser.add_argument("--mode", choices=["veason", "rcot", "videoseg"], default=None,
                        help="inference: Veason-R1 (one answer), RCoT-Seg (keyframe judged, re-selected) or "
                             "VideoSeg-R1 (HTFS frame search); default: the mode the checkpoint was trained for "
                             "(its lineage), else evaluate.mode")
    parser.add_argument("--params", default="params.yaml", help="params file for the evaluate.* and sam2.* settings "
                                                                "(default: params.yaml; defaults when absent)")
    parser.add_argument("-S", "--set-param", action="append", default=[], metavar="KEY=VALUE",
                        help="a params override, e.g. -S evaluate.n_frames=8 (repeatable)")
    if demo:
        parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine "
                                                                 "only)")
        parser.add_argument("--port", type=int, default=7860)
        parser.add_argument("--max-mb", type=float, default=200.0, help="largest upload accepted, MB (default 200)")
        parser.add_argument("--examples", default="", help="a ReVOS-layout root whose videos are offered as "
                                                           "examples (default: data.root, else a few generated "
                                                           "synthetic clips)")
        parser.add_argument("--work", default="", help="folder for uploads and results (default: a temporary one)")
        return
    parser.add_argument("--video", default="", help="video file (mp4, mov, webm, mkv, …) or a folder of frames")
    parser.add_argument("--query", default=None, help="what to segment, in words")
    parser.add_argument("--out", default="", help="output folder (default: segment/<video name>/<query>)")
    parser.add_argument("--batch", default="", help="JSONL file, one {\"video\": …, \"query\": …} per line; "
                                                    "resumable (done results are skipped)")


def load_settings(args: argparse.Namespace):
    """The params the commands use: the params file (defaults when it does not exist) with -S overrides."""
    from stages.core.params import Params, apply_overrides, read_params_file

    overrides = {}
    for item in args.set_param:
        key, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"-S {item!r}: expected key=value")
        overrides[key] = value
    raw = read_params_file(args.params) if Path(args.params).is_file() else {}
    if not raw and not overrides:
        return Params()
    return apply_overrides(raw, overrides)[0]


def resolve_model(args: argparse.Namespace, params) -> Path:
    from stages.segment_video import check_model, default_model

    model = Path(args.model) if args.model else default_model(params)
    check_model(model)
    return model


def run_segment(args: argparse.Namespace) -> int:
    from stages.segment_video import Engine, Progress, Request, check_query, done, read_batch, run_batch, run_video

    if bool(args.batch) == bool(args.video):
        raise InputError("give --video PATH with --query TEXT, or --batch FILE.jsonl")
    params = load_settings(args)
    if args.batch:
        requests = read_batch(Path(args.batch), Path(args.out or "segment"))
    else:
        if args.query is None:
            raise InputError("--query: missing (what should be segmented?)")
        query = check_query(args.query)
        video = Path(args.video)
        if not video.exists():
            raise InputError(f"--video {video}: no such file or folder")
        out = Path(args.out) if args.out else Path("segment") / (video.stem or video.name)
        requests = [Request(video, query, out)]
    model = resolve_model(args, params)
    for request in requests:  # before the model loads: bad input and an --out holding another run, at once
        done(request, model)
    for video in dict.fromkeys(r.video for r in requests):
        probe(video)
    engine = Engine(params, model, args.mode)
    if args.batch:
        counts = run_batch(engine, requests, lambda video: Progress(Path(video).name))
        sys.stdout.write(json.dumps(counts) + "\n")
        return 0
    progress = Progress(requests[0].video.name)
    try:
        record = run_video(engine, requests[0].video, requests, progress, replace=True)[0]
    finally:
        progress.close()
    key = record["keyframe"]
    sys.stdout.write(f"{requests[0].out}: {record['status']}, keyframe "
                     f"{key['name'] + ' (' + str(key['time_s']) + ' s)' if key else '-'}, "
                     f"mask on {record['frames_with_mask']}/{record['video_info']['n_frames']} frames\n")
    return 0


def run_demo(args: argparse.Namespace) -> int:
    from stages.segment_video.demo import serve

    params = load_settings(args)
    model = resolve_model(args, params)
    serve(params, model, args.mode, host=args.host, port=args.port, max_mb=args.max_mb,
          examples=Path(args.examples) if args.examples else None, work=Path(args.work) if args.work else None)
    return 0
