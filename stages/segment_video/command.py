"""The `vrsflow segment` and `vrsflow demo` commands (flows/cli.py registers them; errors are `InputError`s,
which the CLI prints as one line with a non-zero exit). Their options are defined in flows/cli.py
(`_segment_arguments`), so building the parser imports nothing of this package."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def load_settings(args: argparse.Namespace):
    """The params the commands use: the params file (defaults when it does not exist) with -S overrides."""
    from stages.params import Params, apply_overrides, cli_overrides, read_params_file
    from stages.segment_video.source import InputError

    overrides = cli_overrides(args.set_param, InputError)
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
    from stages.segment_video.source import InputError, probe

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
          examples=Path(args.examples or params.data.root), work=Path(args.work) if args.work else None)
    return 0
