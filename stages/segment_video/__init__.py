"""`vrsflow segment`: a trained checkpoint on any video and query — the evaluate stage's own inference.

One path: a video's queries are answered by `stages.evaluate.answer_video` (frames sampled and shown as
evaluate shows them, the same policy, the same answer → SAM2 prompt conversion) and segmented by
`stages.evaluate.segment_answers` with the segmenter `stages.evaluate.segmenter` builds (SAM2 over every
frame, the encoding shared by all the video's queries), exactly as the evaluate stage does. What is added
here is only input and output: a video file decoded once (PyAV) into frames on disk or a folder of frames
read in place, and per query `masks/<frame>.png` (0/255, VISA's layout), `overlay.mp4`, `keyframe.png`,
`strip.png` and `answer.json`.

Memory does not grow with the video: frames are read from disk when needed, SAM2's shared encoding is kept
in a file, its memory bank keeps only what memory attention reads, and masks are written as SAM2 makes them.
Every result is written in a temporary folder beside its output folder and renamed at the end.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.params import Params
from stages.params.evaluate import EvaluateParams
from stages.segment_video.source import FrameSource, InputError, open_frames

log = logging.getLogger(__name__)

__all__ = ["Engine", "InputError", "Request", "checkpoint_info", "default_model", "open_frames", "read_batch",
           "run_batch", "run_video"]

MODES = {"veason": "veason", "rcot": "rcot", "videoseg": "htfs"}  # command's mode → evaluate.mode
ANSWER_FILE = "answer.json"
# answer.json's layout: 2 = "segmenter" names what made the masks (name, checkpoint) and "status" tells "no_boxes"
# from "degenerate_boxes"; a result of an older layout is made again, not skipped (`done`)
ANSWER_FORMAT = 2
QWEN_TYPES = ("qwen2_5_vl",)


@dataclass(frozen=True)
class Request:
    """One query on one video, and the folder its result goes to."""

    video: Path
    query: str
    out: Path


def default_model(params: Params, project: Path = Path(".")) -> Path:
    """The pipeline's GRPO output, else its SFT output.

    Raises:
        InputError: neither exists.
    """
    candidates = [project / params.grpo.out_dir / "merged", project / params.sft.out_dir / "merged"]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    raise InputError(f"no trained model: neither {candidates[0]} nor {candidates[1]} exists (run ./scripts/run.sh "
                     "first, or pass --model DIR, a Qwen2.5-VL checkpoint folder)")


def check_model(model: Path) -> None:
    """Refuse a folder that is not a Qwen2.5-VL checkpoint (one line naming it and why)."""
    config = Path(model) / "config.json"
    if not Path(model).is_dir():
        raise InputError(f"--model {model}: not a folder (a Qwen2.5-VL checkpoint folder is expected)")
    if not config.is_file():
        raise InputError(f"--model {model}: not a Qwen2.5-VL checkpoint (no config.json)")
    try:
        model_type = json.loads(config.read_text()).get("model_type")
    except (ValueError, AttributeError) as err:
        raise InputError(f"--model {model}: config.json is not valid JSON ({err})") from err
    if model_type not in QWEN_TYPES:
        raise InputError(f"--model {model}: not a Qwen2.5-VL checkpoint (config.json model_type is {model_type!r}, "
                         f"expected {QWEN_TYPES[0]!r})")
    if not any(Path(model).glob("*.safetensors")) and not any(Path(model).glob("*.bin")):
        raise InputError(f"--model {model}: no weights (*.safetensors / *.bin) in the checkpoint folder")


def checkpoint_info(model: Path) -> dict[str, Any]:
    """The checkpoint's lineage as its model card records it (`lineage.json` of its folder or the stage
    folder above it): stage, code commit, seed, the raw data and params it came from, and the inference
    mode its training tasks imply. Empty fields for a checkpoint vrsflow did not make."""
    from stages.core.model_card import LineageNotFound, find_lineage, raw_data, walk_chain

    info: dict[str, Any] = {"path": str(model), "made_by_vrsflow": False}
    card = Path(model) / "README.md"
    if not card.is_file():
        card = Path(model).parent / "README.md"
    if card.is_file():
        first = card.read_text().splitlines()[:1]
        info["model_card"] = {"path": str(card), "title": first[0].lstrip("# ").strip() if first else ""}
    try:
        path = find_lineage(Path(model), project_dir=Path(model).resolve().parent)
    except LineageNotFound:
        return info
    if path.parent.resolve() not in (Path(model).resolve(), Path(model).resolve().parent):
        return info  # a lineage of some folder far above: not this checkpoint's
    record = json.loads(path.read_text())
    chain = walk_chain(record)
    info.update({
        "made_by_vrsflow": True, "lineage": str(path), "stage": record.get("stage"),
        "code_version": record.get("code_version"), "seed": record.get("seed"), "counts": record.get("counts"),
        "params": record.get("params"),
        "chain": [{"stage": r.get("stage"), "git": (r.get("code_version") or {}).get("git")} for r in chain],
        "raw_data": raw_data(record),
    })
    tasks = _tasks(record)
    if tasks:
        info["tasks"] = tasks
        info["mode"] = mode_of_tasks(tasks)
    return info


def _tasks(record: Any) -> list[str]:
    """The tasks the checkpoint was trained on: `sample.grpo_tasks` (else `sft_tasks`) in its lineage."""
    found: dict[str, list[str]] = {}

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            for key in ("grpo_tasks", "sft_tasks"):
                if key in node and isinstance(node[key], list | tuple) and key not in found:
                    found[key] = [str(t) for t in node[key]]
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(record)
    stage = record.get("stage") if isinstance(record, dict) else None
    order = ("sft_tasks", "grpo_tasks") if stage == "sft" else ("grpo_tasks", "sft_tasks")
    return next((found[k] for k in order if k in found), [])


def mode_of_tasks(tasks: Iterable[str]) -> str:
    """veason | rcot | videoseg: the inference a checkpoint's training tasks belong to."""
    tasks = list(tasks)
    if any(t.startswith("rcot") for t in tasks):
        return "rcot"
    if any(t.startswith("videoseg") for t in tasks):
        return "videoseg"
    return "veason"


class Engine:
    """The model and SAM2, loaded once, answering and segmenting videos exactly as the evaluate stage does.

    `policy` / `segment` may be given (a scripted policy, the box segmenter: tests); otherwise they are the
    evaluate stage's `model_policy` for `model` and its `segmenter`.
    """

    def __init__(self, params: Params, model: Path, mode: str | None = None, policy=None, segment=None) -> None:
        from stages.evaluate import describe_segmenter, model_policy, segmenter

        self.model = Path(model)
        self.checkpoint = checkpoint_info(self.model)
        if mode is not None and mode not in MODES:
            raise InputError(f"--mode {mode}: unknown (one of {', '.join(MODES)})")
        recorded = self.checkpoint.get("mode")
        configured = {v: k for k, v in MODES.items()}[params.evaluate.mode]
        self.mode = mode or recorded or configured
        self.mode_source = "--mode" if mode else "checkpoint lineage" if recorded else "params evaluate.mode"
        self.params: EvaluateParams = dataclasses.replace(params.evaluate, mode=MODES[self.mode],
                                                          model_path=str(self.model))
        self.size = self.params.frame_size or params.keyframes.train_size
        self.sam2 = params.sam2
        started = time.perf_counter()
        if policy is None:
            check_model(self.model)
            policy = model_policy(self.params, self.model, params.model.dtype)
        self.policy = policy
        self.segment = segment or segmenter(self.params, params.sam2)
        self.segmenter = describe_segmenter(self.segment)  # what makes the masks: answer.json, the demo page
        self.load_seconds = time.perf_counter() - started


def slug(text: str, n: int = 40) -> str:
    """A folder name for a query: its first words and a short hash of the whole."""
    words = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:n].strip("-") or "query"
    return f"{words}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def video_folder(video: Path) -> str:
    """A folder name for a video's results: its file name and a short hash of its absolute path (two videos
    of the same name in different folders do not share one)."""
    resolved = str(Path(video).resolve())
    return f"{Path(video).name or 'video'}-{hashlib.sha256(resolved.encode()).hexdigest()[:6]}"


def _identity(request: Request, model: Path) -> dict[str, str]:
    return {"video": str(Path(request.video).resolve()), "query": request.query, "model": str(Path(model).resolve())}


def done(request: Request, model: Path) -> bool:
    """The request's output folder holds its finished result (a rerun skips it).

    Raises:
        InputError: the folder holds another run's result, or something else.
    """
    out = Path(request.out)
    if not out.exists():
        return False
    answer = out / ANSWER_FILE
    if not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a folder")
    if not answer.is_file():
        if any(out.iterdir()):
            raise InputError(f"--out {out}: not empty and not a vrsflow segment result (no {ANSWER_FILE}); "
                             "choose another --out")
        return False
    try:
        record = json.loads(answer.read_text())
    except ValueError:
        record = {}
    recorded = record.get("run", {}) if isinstance(record, dict) else {}
    mine = _identity(request, model)
    if recorded != mine:
        differ = next((k for k in ("video", "query", "model") if recorded.get(k) != mine[k]), "video")
        raise InputError(f"--out {out}: holds another run ({differ} {recorded.get(differ)!r}, not {mine[differ]!r}); "
                         "choose another --out or remove it")
    if record.get("format") != ANSWER_FORMAT:
        log.info("segment: %s holds an older result (answer.json format %s, now %d): making it again", out,
                 record.get("format", 1), ANSWER_FORMAT)
        return False
    return True


def check_query(query: str, where: str = "--query") -> str:
    if not isinstance(query, str) or not query.strip():
        raise InputError(f"{where}: the query is empty (ask about the video, e.g. \"the car that overtakes\")")
    return query.strip()


def run_video(engine: Engine, video: Path, requests: list[Request], progress: Progress | None = None,
              replace: bool = False) -> list[dict]:
    """Answer and segment every request of one video (decoded once, encoded once); returns their answer.json
    records. A request already done is skipped unless `replace`.

    Raises:
        InputError: bad video or output folder (nothing is written for that video).
    """
    todo = [r for r in requests if replace or not done(r, engine.model)]
    if not todo:
        return []
    progress = progress or Progress(None)
    timings: dict[str, float] = {}
    work = Path(tempfile.mkdtemp(prefix="vrsflow-segment-"))
    partial = [Path(r.out).parent / f".{Path(r.out).name}.partial-{os.getpid()}" for r in todo]
    try:
        started = time.perf_counter()
        progress.phase("decode", None)
        frames = open_frames(Path(video), work, progress.advance)
        timings["decode_s"] = time.perf_counter() - started
        n = len(frames)
        for folder in partial:
            shutil.rmtree(folder, ignore_errors=True)
            (folder / "masks").mkdir(parents=True)
        records = _segment(engine, frames, todo, partial, progress, timings, work)
        for request, folder in zip(todo, partial, strict=True):
            out = Path(request.out)
            if out.exists():
                shutil.rmtree(out)
            out.parent.mkdir(parents=True, exist_ok=True)
            os.replace(folder, out)
        log.info("segment: %s, %d frames, %d quer%s in %.1f s", video, n, len(todo), "y" if len(todo) == 1 else "ies",
                 sum(v for k, v in timings.items() if k.endswith("_s")))
        return records
    finally:
        for folder in partial:
            shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def _segment(engine: Engine, frames: FrameSource, todo: list[Request], partial: list[Path], progress: Progress,
             timings: dict[str, float], work: Path) -> list[dict]:
    from stages.evaluate import answer_video, segment_answers, write_mask
    from stages.segment_video.outputs import keyframe_picture, read_mask, write_overlay, write_strip

    n = len(frames)
    progress.phase("generate", 1)
    answers = answer_video(engine.params, engine.size, engine.policy, frames,
                           [(slug(r.query), r.query) for r in todo])
    progress.advance(1)
    timings["generate_s"] = answers.seconds
    areas = [[0] * n for _ in todo]
    progress.phase("propagate", n * len(todo))
    started = time.perf_counter()

    def sink(i: int, t: int, mask) -> None:
        write_mask(partial[i] / "masks", frames.names[t], mask)
        areas[i][t] = int(mask.sum())
        progress.advance(1)

    segment_answers(engine.segment, frames, answers, sink, spill_dir=work)
    timings["propagate_s"] = time.perf_counter() - started
    started = time.perf_counter()
    progress.phase("write", len(todo))
    records = []
    for i, (request, folder) in enumerate(zip(todo, partial, strict=True)):
        reply, (_, key, boxes) = answers.replies[i], answers.picks[i]
        mask_paths = [folder / "masks" / f"{name}.png" for name in frames.names]
        answered = reply.answer is not None
        labels = [f"{frames.time_of(t):.1f}s" if frames.times else f"#{t}" for t in range(n)]
        write_overlay(folder / "overlay.mp4", frames, mask_paths, frames.fps, key if answered else None, boxes)
        write_strip(folder / "strip.png", frames, mask_paths, answers.shown_idx, key if answered else None, boxes,
                    labels)
        if answered:
            keyframe_picture(frames[key], read_mask(mask_paths[key]), boxes, f"keyframe {labels[key]}").save(
                folder / "keyframe.png")
        record = _record(engine, request, frames, answers, i, areas[i], timings, n)
        (folder / ANSWER_FILE).write_text(json.dumps(record, indent=1) + "\n")
        records.append(record)
        progress.advance(1)
    timings["write_s"] = time.perf_counter() - started
    for record in records:  # the write time is known only now
        record["timings"]["write_s"] = round(timings["write_s"], 3)
    for folder, record in zip(partial, records, strict=True):
        (folder / ANSWER_FILE).write_text(json.dumps(record, indent=1) + "\n")
    return records


def _reasoning(text: str) -> str:
    start, end = text.find("<think>"), text.find("</think>")
    return text[start + 7:end].strip() if start >= 0 and end > start else ""


def _record(engine: Engine, request: Request, frames: FrameSource, answers, i: int, areas: list[int],
            timings: dict[str, float], n: int) -> dict:
    reply, (status, key, boxes), points = answers.replies[i], answers.picks[i], answers.points[i]
    answered = reply.answer is not None

    def frame(t: int) -> dict:
        return {"index": int(t), "name": frames.names[t], "time_s": round(frames.time_of(t), 4)}

    return {
        "format": ANSWER_FORMAT, "run": _identity(request, engine.model),
        "query": request.query, "video": str(request.video), "mode": engine.mode, "mode_source": engine.mode_source,
        "video_info": {"kind": frames.kind, "n_frames": n, "width": frames.width, "height": frames.height,
                       "fps": frames.fps, **frames.extra},
        "frame_size_shown": engine.size, "frames_shown": [frame(t) for t in answers.shown_idx],
        "response": reply.response, "reasoning": _reasoning(reply.response), "status": status,
        "keyframe": frame(key) if answered else None,
        "keyframe_timestamp": frame(key)["time_s"] if answered else None,
        "boxes": [[round(float(v), 2) for v in b] for b in boxes],
        "answer_boxes": [list(map(float, b)) for b in reply.answer.boxes] if answered else [],
        "points": [[list(map(float, p)) for p in box] for box in points],
        "rounds": [int(r) for r in reply.rounds], "judgments": list(reply.judgments),
        "mask_area": areas, "frames_with_mask": int(sum(a > 0 for a in areas)),
        "timings": {**{k: round(v, 3) for k, v in timings.items()},
                    "seconds_per_frame": {k[:-2]: round(v / n, 5) for k, v in timings.items()
                                          if k in ("decode_s", "propagate_s")},
                    "queries_sharing_the_video": len(answers.replies)},
        "segmenter": engine.segmenter,  # name, description, checkpoint and config of what made the masks
        "checkpoint": engine.checkpoint,
        "outputs": {"masks": "masks/", "overlay": "overlay.mp4", "strip": "strip.png",
                    **({"keyframe": "keyframe.png"} if answered else {})},
    }


def read_batch(path: Path, out_root: Path) -> list[Request]:
    """`--batch FILE.jsonl`: one `{"video": …, "query": …[, "out": …]}` per line (blank lines skipped); videos
    relative to the file's folder; each result in `out` or `<out_root>/<video name>-<hash>/<query slug>`.

    Raises:
        InputError: a line that is not such an object (names the line).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"--batch {path}: no such file")
    requests, seen = [], set()
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as err:
            raise InputError(f"{path}:{number}: not JSON ({err})") from err
        if not isinstance(item, dict) or not isinstance(item.get("video"), str) or "query" not in item:
            raise InputError(f"{path}:{number}: expected {{\"video\": PATH, \"query\": TEXT}}")
        query = check_query(item["query"], f"{path}:{number}")
        video = Path(item["video"]) if Path(item["video"]).is_absolute() else path.parent / item["video"]
        if not video.exists():
            raise InputError(f"{path}:{number}: video {video}: no such file or folder")
        out = Path(item["out"]) if item.get("out") else Path(out_root) / video_folder(video) / slug(query)
        if out in seen:
            raise InputError(f"{path}:{number}: the same output folder as an earlier line ({out})")
        seen.add(out)
        requests.append(Request(video, query, out))
    if not requests:
        raise InputError(f"--batch {path}: no requests")
    return requests


def run_batch(engine: Engine, requests: list[Request], progress_factory: Callable[[str], Progress] | None = None
              ) -> dict[str, int]:
    """Every request, grouped by video (each video decoded and encoded once for all its queries); what is
    already done is skipped. Returns counts."""
    by_video: dict[Path, list[Request]] = {}
    for request in requests:
        by_video.setdefault(Path(request.video), []).append(request)
    counts = {"requests": len(requests), "done_before": 0, "written": 0, "videos_decoded": 0}
    for video, group in by_video.items():
        pending = [r for r in group if not done(r, engine.model)]
        counts["done_before"] += len(group) - len(pending)
        if not pending:
            continue
        progress = progress_factory(str(video)) if progress_factory else Progress(None)
        try:
            counts["written"] += len(run_video(engine, video, pending, progress))
        finally:
            progress.close()
        counts["videos_decoded"] += 1
    return counts


class Progress:
    """One tqdm bar over decode → generate → propagate → write (`desc` None: silent)."""

    def __init__(self, desc: str | None) -> None:
        self.bar = None
        if desc is not None:
            from tqdm import tqdm

            self.bar = tqdm(desc=desc, unit="step", dynamic_ncols=True, mininterval=0.5)
        self.desc = desc

    def phase(self, name: str, total: int | None) -> None:
        if self.bar is not None:
            self.bar.reset(total=total)
            self.bar.set_description(f"{self.desc} [{name}]")

    def advance(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
