"""`difficulty` stage: VideoSeg-R1's five 1–10 ratings per sample, mean D, level and token budget L(D).

Backends: `heuristic` (offline default) rates from the annotations — scene complexity from the number
of annotated objects, segmentation challenge from the target's size, temporal ambiguity from frames
where the target is absent or partly hidden, motion complexity from the target's travel, linguistic
ambiguity from expression length and type; `mllm` asks the teacher client for JSON ratings, validates
them and asks again (a new request) when they do not validate, falling back to the heuristic (recorded
in `backend`). A sample whose request went unanswered keeps the heuristic too, unless the teacher cannot answer:
the client's pre-flight and circuit breaker stop the stage, and more unanswered samples than
`difficulty.max_error_share` fail it (one line; the answers stay cached and the rerun sends only the rest).
L(D) is linear from `min_budget` at D = 1 to `max_budget` at D = 10, in steps of 16 tokens.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from schemas.difficulty import DifficultySchema
from schemas.index import ExpressionsSchema
from schemas.sample import POOLS, KeyframesSchema
from stages.core import revos
from stages.core.io import read_table, write_table
from stages.core.lineage import write_lineage
from stages.core.progress import ProgressReporter
from stages.core.report import StageReport
from stages.params.difficulty import DifficultyParams
from stages.params.teacher import TeacherParams
from stages.tasks import timestamp_tag
from stages.teacher.cache import ResponseCache, request_key
from stages.teacher.client import ChatRequest, TeacherClient, cache_key, refuse_failures
from stages.teacher.prompts import render_difficulty_prompt

log = logging.getLogger(__name__)
DIMENSIONS = ("scene_complexity", "segmentation_challenge", "temporal_ambiguity", "motion_complexity",
              "linguistic_ambiguity")


def parse_ratings(text: str) -> dict[str, int] | None:
    """The five ratings from an MLLM's JSON answer, or None unless it is exactly five integers in 1–10."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start or end - start > 2000:
        return None
    try:
        data = json.loads(text[start:end + 1])
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or set(data) != set(DIMENSIONS):
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 10 for v in data.values()):
        return None
    return {k: int(data[k]) for k in DIMENSIONS}


def level_of(d: float, params: DifficultyParams) -> str:
    """easy / medium / hard by the two thresholds."""
    return "easy" if d < params.easy_below else "hard" if d >= params.hard_from else "medium"


def token_budget(d: float, params: DifficultyParams) -> int:
    """L(D): linear in D between the budgets at D = 1 and D = 10, rounded to a multiple of 16."""
    raw = params.min_budget + (params.max_budget - params.min_budget) * (min(max(d, 1.0), 10.0) - 1.0) / 9.0
    return int(16 * round(raw / 16))


def _scale(x: float) -> int:
    """[0, 1] → integer rating 1–10."""
    return int(np.clip(round(1 + 9 * float(np.clip(x, 0.0, 1.0))), 1, 10))


def heuristic_ratings(sample: dict, n_objects: int, absent_fraction: float, visible_ratio: float) -> dict[str, int]:
    """Ratings from annotations (see module docstring); inputs in [0, 1] except n_objects."""
    size = float(sample["train_size"]) ** 2
    areas = [a for a in sample["union_areas"] if a > 0]
    area_fraction = float(np.mean(areas)) / size if areas else 0.0
    words = len(str(sample["text"]).split())
    linguistic = min(words / 16, 0.5) + (0.3 if sample["type"] == "reasoning" else 0.0) \
        + (0.1 if sample["n_instances"] > 1 else 0.0) + (0.2 if sample["type"] == "no_target" else 0.0)
    return {
        "scene_complexity": _scale((n_objects - 1) / 5),
        "segmentation_challenge": _scale(1 - np.sqrt(min(area_fraction / 0.25, 1.0))),
        "temporal_ambiguity": _scale(0.6 * absent_fraction + 0.4 * (1 - visible_ratio)),
        "motion_complexity": _scale(float(sample["motion"]) / 0.6),
        "linguistic_ambiguity": _scale(linguistic),
    }


def score_difficulty(params: DifficultyParams, teacher: TeacherParams, data_root: Path, index_dir: Path,
                     keyframes_dir: Path, out_dir: Path) -> StageReport:
    """Write `out_dir/scores.parquet` (DifficultySchema) for every sample of every pool.

    Args:
        params: the `difficulty` block.
        teacher: the client settings (used by the mllm backend).
        data_root: ReVOS-layout root (frames for the mllm backend).
        index_dir: ingest tables (objects per video, per-frame areas).
        keyframes_dir: keyframes tables (the samples).
        out_dir: `data/difficulty`.

    Raises:
        TeacherUnavailable: mllm backend only: the teacher cannot be reached or answer (pre-flight, circuit
            breaker), or more than `difficulty.max_error_share` of the samples went unanswered; nothing is written.
    """
    samples = pd.concat([read_table(Path(keyframes_dir) / f"{p}.parquet", KeyframesSchema) for p in POOLS],
                        ignore_index=True)
    # with `sample.disjoint: false` an expression can sit in two pools: it is rated once (same sample id)
    samples = samples.drop_duplicates("sample_id", keep="first").reset_index(drop=True)
    expressions = read_table(Path(index_dir) / "expressions.parquet", ExpressionsSchema)
    annotated = expressions.explode("anno_ids").dropna(subset=["anno_ids"])
    objects_per_video = annotated.groupby("video")["anno_ids"].nunique()
    rows = []
    for sample in samples.to_dict("records"):
        # the UNION area of the targets per video frame (keyframes stage; overlapping objects count once)
        per_frame = np.asarray(sample["video_union_areas"], dtype=float)
        present = per_frame[per_frame > 0]
        absent = 1.0 - present.size / max(per_frame.size, 1)
        visible_ratio = float(present.min() / present.max()) if present.size else 0.0
        ratings = heuristic_ratings(sample, int(objects_per_video.get(sample["video"], 0)), absent, visible_ratio)
        rows.append({"sample_id": sample["sample_id"], "pool": sample["pool"], "expression_id": sample["expression_id"],
                     **ratings, "backend": "heuristic"})
    fallbacks = 0
    # the response cache is a DVC output (persist: true) whichever backend runs: it must exist
    Path(params.cache_dir).mkdir(parents=True, exist_ok=True)
    if params.backend == "mllm":
        rows, fallbacks = _rate_with_mllm(rows, samples, params, teacher, Path(data_root))
    table = pd.DataFrame(rows)
    table["difficulty"] = table[list(DIMENSIONS)].mean(axis=1).round(3)
    table["level"] = table["difficulty"].map(lambda d: level_of(d, params))
    table["token_budget"] = table["difficulty"].map(lambda d: token_budget(d, params))
    table = table[list(DifficultySchema.to_schema().columns)].sort_values("sample_id")
    write_table(table, DifficultySchema, Path(out_dir) / "scores.parquet")
    levels = table.groupby(["pool", "level"]).size().rename("samples").reset_index()
    metrics: dict[str, float | int] = {"samples": len(table), "mllm_fallbacks": fallbacks,
                                       "mean_difficulty": round(float(table["difficulty"].mean()), 3)}
    metrics.update({f"{r.pool}.{r.level}": int(r.samples) for r in levels.itertuples(index=False)})
    write_lineage(Path(out_dir), "difficulty", params,
                  inputs={"keyframes": Path(keyframes_dir), "index": Path(index_dir)},
                  counts={"samples": len(table)}, code_modules=["stages.difficulty"])
    return StageReport("difficulty", metrics=dict(sorted(metrics.items())), tables={"levels per pool": levels})


def _rate_with_mllm(rows: list[dict], samples: pd.DataFrame, params: DifficultyParams, teacher: TeacherParams,
                    data_root: Path) -> tuple[list[dict], int]:
    """Ask the teacher for JSON ratings; invalid JSON → a new request (attempt index in the key). A request
    that went unanswered is not asked again as a new one: the rerun sends it (failed requests are not cached)."""
    by_id = {s["sample_id"]: s for s in samples.to_dict("records")}
    cache = ResponseCache(Path(params.cache_dir))
    client = TeacherClient(teacher, cache, stage="difficulty")
    # the endpoint is checked before any frame is encoded (thousands of samples take minutes), unless every
    # first rating is cached (a rerun that sends nothing needs no endpoint)
    if any(cache.get(cache_key(_rating_key(by_id[row["sample_id"]], teacher, 0), teacher)) is None for row in rows):
        asyncio.run(client.preflight())
    done: dict[str, dict[str, int]] = {}
    unanswered: dict[str, str] = {}  # sample id → the error of its request
    for attempt in range(params.json_retries + 1):
        requests = [_rating_request(by_id[row["sample_id"]], teacher, data_root, attempt) for row in rows
                    if row["sample_id"] not in done and row["sample_id"] not in unanswered]
        if not requests:
            break
        progress = ProgressReporter(len(requests), desc=f"difficulty ratings (try {attempt + 1})")
        try:
            results = asyncio.run(client.run_all(
                requests, on_done=lambda r, bar=progress: bar.advance(errors=int(not r.finish_reason))))
        finally:
            progress.close()
        for request, result in zip(requests, results, strict=True):
            if not result.finish_reason:
                unanswered[request.context["sample_id"]] = result.error
                continue
            ratings = parse_ratings(result.text) if not result.error else None
            if ratings is not None:
                done[request.context["sample_id"]] = ratings
    refuse_failures("difficulty", list(unanswered.values()), len(rows), params.max_error_share,
                    "difficulty.max_error_share", cache, unit="samples")
    if unanswered:
        log.warning("difficulty: %d samples went unanswered by the teacher and keep heuristic ratings", len(unanswered))
    out, fallbacks = [], 0
    for row in rows:
        if row["sample_id"] in done:
            out.append({**row, **done[row["sample_id"]], "backend": "mllm"})
        else:
            fallbacks += 1
            out.append(row)
    if fallbacks:
        log.warning("difficulty: %d samples kept heuristic ratings (MLLM JSON never validated)", fallbacks)
    return out, fallbacks


def _rating_request(sample: dict, teacher: TeacherParams, data_root: Path, attempt: int) -> ChatRequest:
    content: list[dict] = []
    for t, name in zip(sample["timestamps"], sample["frame_names"], strict=True):
        with Image.open(revos.frame_path(data_root, sample["video"], name)) as img:
            img = img.convert("RGB")
            img.thumbnail((teacher.image_size, teacher.image_size))
            buffer = io.BytesIO()
            img.save(buffer, format="JPEG", quality=85)
        url = "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
        content += [{"type": "text", "text": timestamp_tag(int(t))}, {"type": "image_url", "image_url": {"url": url}}]
    content.append({"type": "text", "text": render_difficulty_prompt(sample["text"], len(sample["timestamps"]))})
    return ChatRequest(key=_rating_key(sample, teacher, attempt), messages=[{"role": "user", "content": content}],
                       context={"sample_id": sample["sample_id"]}, response_format={"type": "json_object"})


def _rating_key(sample: dict, teacher: TeacherParams, attempt: int) -> str:
    """The request key of a sample's rating, known without encoding a frame. Every field that changes the reply
    is in it: what is sent (model, sampling, token limit, the frames at the size sent); provider fields are added
    by the client's cache_key."""
    prompt = render_difficulty_prompt(sample["text"], len(sample["timestamps"]))
    return request_key({"task": "difficulty", "model": teacher.model, "prompt": prompt, "video": sample["video"],
                        "frames": list(sample["frame_names"]), "attempt": attempt, "temperature": teacher.temperature,
                        "max_tokens": teacher.max_tokens, "image_size": teacher.image_size})
