"""`cot` stage: the teacher writes three-step reasoning for every sample of the CoT pools.

Per sample (and trace index) one of the set's three templates is drawn with a seed derived from the
sample id, and recorded. The request carries the sampled frames (resized for the teacher, targets
marked with red rectangles) with their timestamps, the expression and the chosen keyframe timestamp.
Every answer is cached by a key hashing everything that determines it (provider fields too: `cache_key`), so
reruns and resumed runs send nothing twice; a failed request is recorded with its error and the stage goes on —
unless the teacher cannot answer: the client's pre-flight and circuit breaker stop the stage, and more unanswered
requests than `cot.max_error_share` fail it (one line; the answers stay cached and the rerun sends only the rest).
A thinking teacher's hidden reasoning stays in the cache (the trace is the reply's content); its tokens are
counted in the table, the metrics and the cost estimate.
"""

from __future__ import annotations

import asyncio
import base64
import io
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from PIL import Image, ImageDraw

from schemas.cot import GenerationsSchema
from schemas.sample import KeyframesSchema
from stages.core import revos
from stages.core.io import derive_seed, read_table, write_table
from stages.core.lineage import write_lineage
from stages.core.pixel_box import outline_rect
from stages.core.progress import ProgressReporter
from stages.core.report import StageReport, summary_line
from stages.params.cot import CotParams
from stages.params.teacher import TeacherParams
from stages.tasks import Task, get_task, timestamp_tag
from stages.teacher.cache import ResponseCache, request_key
from stages.teacher.client import (
    REASONING_BUDGET_EXHAUSTED,
    ChatRequest,
    ChatResult,
    TeacherClient,
    cache_key,
    outcome,
    refuse_failures,
)
from stages.teacher.prompts import cot_template_ids, render_cot_prompt
from stages.teacher.template_teacher import TEACHER_NAME, template_writer

log = logging.getLogger(__name__)
# part of the request key: what `marked_frame` sends (v2: boxes drawn on whole pixels by stages/core/pixel_box)
FRAME_ENCODING = "jpeg-q90-red-rect-v2"


def generate_cot(teacher: TeacherParams, params: CotParams, seed: int, data_root: Path, keyframes_dir: Path,
                 out_dir: Path) -> StageReport:
    """Write `out_dir/generations.parquet` (one row per request) and lineage; responses live in the cache.

    Args:
        teacher: client settings (backend, endpoint, model, key env var name, limits).
        params: the `cot` block (pools, traces per sample and task, cache folder); each sample's tasks
            (keyframes table `tasks`, plus the tasks they need) choose the template sets.
        seed: global seed (template draws use derive_seed(seed, "cot", sample_id, trace_index)).
        data_root: ReVOS-layout root holding the JPEG frames.
        keyframes_dir: the keyframes stage's tables.
        out_dir: `data/cot`.

    Raises:
        TeacherUnavailable: the teacher cannot be reached or answer (pre-flight, circuit breaker), or more than
            `cot.max_error_share` of the requests went unanswered; nothing is written to `out_dir`.
    """
    samples = pd.concat([read_table(Path(keyframes_dir) / f"{pool}.parquet", KeyframesSchema) for pool in params.pools],
                        ignore_index=True)
    teacher_name = TEACHER_NAME if teacher.backend == "template" else teacher.model
    requests, rows = [], []
    for sample in samples.to_dict("records"):
        for k, task in enumerate(trace_tasks(sample["tasks"])):
            template_ids = cot_template_ids(task.template_set)
            for j in range(params.traces_per_sample):
                trace_index = k * params.traces_per_sample + j  # unique per sample over its tasks
                rng = np.random.default_rng(derive_seed(seed, "cot", sample["sample_id"], trace_index))
                template_id = template_ids[int(rng.integers(len(template_ids)))]
                request = build_request(sample, template_id, trace_index, teacher, Path(data_root), task)
                requests.append(request)
                rows.append({"request_key": cache_key(request.key, teacher), "sample_id": sample["sample_id"],
                             "pool": sample["pool"],
                             "trace_index": trace_index, "task": task.name, "template_set": task.template_set,
                             "template_id": template_id, "teacher": teacher_name, "backend": teacher.backend,
                             "keyframe_timestamp": int(sample["keyframe_timestamp"])})
    cache = ResponseCache(Path(params.cache_dir))
    client = TeacherClient(teacher, cache, template_writer, stage="cot")
    progress = ProgressReporter(len(requests), desc="cot requests")
    try:
        results = asyncio.run(client.run_all(requests,
                                             on_done=lambda r: progress.advance(errors=int(not r.finish_reason))))
    finally:
        progress.close()
    refuse_failures("cot", [r.error for r in results if not r.finish_reason], len(results), params.max_error_share,
                    "cot.max_error_share", cache)
    table = pd.DataFrame([{**row, **_result_columns(result)} for row, result in zip(rows, results, strict=True)],
                         columns=list(GenerationsSchema.to_schema().columns))
    write_table(table, GenerationsSchema, Path(out_dir) / "generations.parquet")
    report = _report(table, results, client.sent, teacher)
    # TeacherParams holds the key's env var NAME, never the key: safe to record
    write_lineage(Path(out_dir), "cot", {"teacher": teacher, "cot": params}, seed=seed,
                  inputs={"keyframes": Path(keyframes_dir)}, counts={"requests": len(table)},
                  code_modules=["stages.cot", "stages.teacher"],
                  extra={"teacher": teacher_name, "template_counts": dict(Counter(table["template_id"]))})
    return report


def trace_tasks(names) -> list[Task]:
    """The tasks a sample needs teacher traces for: the tasks it needs first (RCoT-Seg's VDG descriptions
    feed AKS and KTG), then its own tasks; each once."""
    out: list[Task] = []
    for name in names:
        task = get_task(str(name))
        for needed in (*task.needs_tasks, task.name):
            if all(t.name != needed for t in out):
                out.append(get_task(needed))
    return out


def build_request(sample: dict, template_id: str, trace_index: int, teacher: TeacherParams,
                  data_root: Path, task: Task | None = None) -> ChatRequest:
    """The chat request of one sample: interleaved timestamp + marked frame, then the instruction.

    For the openai backend the messages (base64 JPEGs) are built by `request.build()` only when the
    request is actually sent, so a run over thousands of samples does not hold every image in memory
    and a rerun of cached requests decodes no image.
    """
    timestamps = [int(t) for t in sample["timestamps"]]
    instruction = render_cot_prompt(template_id, expression=sample["text"], n_frames=len(timestamps),
                                    keyframe_timestamp=int(sample["keyframe_timestamp"]),
                                    candidate_timestamp=int(sample["aks_frame_idx"]))
    template_set = template_id.split("/")[0]
    task = task or get_task(str(sample["tasks"][0]))
    context = {"template_set": template_set, "expression": sample["text"], "timestamps": timestamps,
               "keyframe_timestamp": int(sample["keyframe_timestamp"]), "train_size": int(sample["train_size"]),
               "boxes": _lists(sample["boxes"]), "union_areas": [float(a) for a in sample["union_areas"]],
               "n_instances": int(sample["n_instances"]), "ktg_points": _scaled_points(sample, task),
               "aks_option": str(sample["aks_option"]), "aks_timestamp": int(sample["aks_frame_idx"])}
    if teacher.template_style != "full":  # absent when full, so that the cached full traces keep their keys
        context["template_style"] = teacher.template_style
    identity: dict[str, Any] = {"sample_id": sample["sample_id"], "backend": teacher.backend,
                                "template_id": template_id, "instruction": instruction, "trace_index": trace_index}
    if teacher.backend == "template":
        identity.update(teacher=TEACHER_NAME, context=context)
        return ChatRequest(key=request_key(identity), messages=[{"role": "user", "content": instruction}],
                           context=context)
    # frames are identified by (video, frame, boxes drawn, sizes), not by their encoded bytes: the raw data is
    # versioned by DVC, and this lets a rerun decide "cached" without decoding a single JPEG. Bump
    # FRAME_ENCODING when `marked_frame` changes what it sends.
    frames = [str(name) for name in sample["frame_names"]]
    candidate = str(sample["aks_frame_name"]) if task.view == "candidate" else None
    identity.update(model=teacher.model, temperature=teacher.temperature, max_tokens=teacher.max_tokens,
                    video=sample["video"], frames=frames, timestamps=timestamps, boxes=context["boxes"],
                    candidate_frame=candidate,
                    image_size=teacher.image_size, train_size=int(sample["train_size"]), encoding=FRAME_ENCODING)

    def build() -> list[dict]:
        content: list[dict] = []
        for t, name, boxes in zip(timestamps, frames, context["boxes"], strict=True):
            jpeg = marked_frame(revos.frame_path(data_root, sample["video"], name), boxes or [],
                                int(sample["train_size"]), teacher.image_size)
            content += [{"type": "text", "text": timestamp_tag(t)}, _image_part(jpeg)]
        if candidate is not None:  # the candidate frame itself, unmarked (it may not be among those shown)
            jpeg = marked_frame(revos.frame_path(data_root, sample["video"], candidate), [],
                                int(sample["train_size"]), teacher.image_size)
            content += [{"type": "text", "text": f"Candidate keyframe {timestamp_tag(int(sample['aks_frame_idx']))}"},
                        _image_part(jpeg)]
        content.append({"type": "text", "text": instruction})
        return [{"role": "user", "content": content}]

    return ChatRequest(key=request_key(identity), context=context, build=build)


def _scaled_points(sample: dict, task: Task | None) -> list | None:
    """KTG points at the size the task shows its frame (a trace that names a point must agree with the answer)."""
    points = _lists(sample["ktg_points"])
    size = int(sample["train_size"]) if task is None or task.view == "sampled" else int(sample["keyframe_size"])
    factor = size / int(sample["train_size"])
    return None if points is None else [None if p is None else [v * factor for v in p] for p in points]


def _image_part(jpeg: bytes) -> dict:
    url = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")
    return {"type": "image_url", "image_url": {"url": url}}


def marked_frame(path: Path, boxes: list, train_size: int, image_size: int) -> bytes:
    """The frame resized so its longest side is `image_size`, targets in red rectangles, as JPEG bytes."""
    with Image.open(path) as img:
        img = img.convert("RGB")
        scale = image_size / max(img.size)
        size = (max(1, round(img.width * scale)), max(1, round(img.height * scale)))
        img = img.resize(size)
    draw = ImageDraw.Draw(img)
    scale = (img.width / train_size, img.height / train_size)
    for box in boxes:
        if box is not None:  # a sliver or zero-area box still gets a mark, inside the frame (stages/core/pixel_box)
            draw.rectangle(outline_rect(box, scale, img.width, img.height), outline=(255, 0, 0),
                           width=max(2, img.width // 150))
    buffer = io.BytesIO()
    img.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def _lists(value: Any) -> Any:
    """Nested numpy arrays from parquet → plain lists (None kept)."""
    if value is None:
        return None
    if isinstance(value, np.ndarray | list | tuple):
        return [_lists(v) for v in value]
    return float(value) if isinstance(value, np.floating | float) else value


def _result_columns(result: ChatResult) -> dict:
    return {"text": result.text, "finish_reason": result.finish_reason, "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens, "reasoning_tokens": result.reasoning_tokens,
            "latency_s": result.latency_s, "attempts": result.attempts, "error": result.error}


def _report(table: pd.DataFrame, results: list[ChatResult], sent: int, teacher: TeacherParams) -> StageReport:
    """Counts, tokens and the cost estimate. `completion_tokens` is every billed output token, the hidden
    reasoning included (OpenAI's and Ark's usage count it there; `reasoning_tokens` is its share), so the cost is
    prompt × price_in + completion × price_out, and `estimated_reasoning_cost_usd` the reasoning's part of it."""
    prompt_tokens = int(table["prompt_tokens"].sum())
    completion_tokens = int(table["completion_tokens"].sum())
    reasoning_tokens = int(table["reasoning_tokens"].sum())
    cost = prompt_tokens / 1e6 * teacher.price_in_per_m + completion_tokens / 1e6 * teacher.price_out_per_m
    metrics = {"requests": len(table), "errors": int((table["error"] != "").sum()),
               "from_cache": sum(r.from_cache for r in results), "sent": sent,
               "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
               "reasoning_tokens": reasoning_tokens, "answer_tokens": max(completion_tokens - reasoning_tokens, 0),
               "reasoning_budget_exhausted": int(table["error"].str.startswith(REASONING_BUDGET_EXHAUSTED).sum()),
               "estimated_cost_usd": round(cost, 4),
               "estimated_reasoning_cost_usd": round(reasoning_tokens / 1e6 * teacher.price_out_per_m, 4)}
    templates = table.groupby("template_id").size().rename("requests").reset_index()
    failed = table.loc[table["error"] != "", "error"].map(outcome).rename("error")  # counts stay out of the key
    errors = failed.to_frame().groupby("error").size().rename("requests").reset_index()
    log.info(summary_line("cot", metrics))  # one short line; all values in the metrics file
    return StageReport("cot", metrics=metrics, tables={"template choices": templates, "errors": errors})
