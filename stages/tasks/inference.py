"""VideoSeg-R1's hierarchical text-guided frame sampler (HTFS), used at inference only.

1. A video LLM is asked K times for the time interval (start, end) where the expression's target appears;
   the K intervals are averaged into the key segment. While the key segment is longer than δ·T frames (T:
   the whole video), the question is asked again inside the key segment (at most `max_rounds` times).
2. Inside the key segment the LLM is asked M times for the target frame's position as a percentage of the
   segment; the mean p̄ gives the target frame: start + round(p̄ / 100 · (T_key − 1)).

The LLM is either the policy model itself or any OpenAI-compatible endpoint (the teacher client): both
are a `Generate` callable, chats + images → texts. Each question shows at most `max_shown` frames of the
current segment, spread evenly. Unparseable answers are ignored; when none of the K parses, the segment
stops narrowing (and with no position answer, the segment's middle frame is taken).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from PIL import Image

from stages.tasks.base import PROMPTS, user_content

Generate = Callable[[list[list[dict]], list[list[Image.Image]]], list[str]]
INTERVAL_VERSION = "interval_v1"
POSITION_VERSION = "position_v1"


@cache
def _prompt(name: str) -> str:
    return (PROMPTS / "htfs" / f"{name}.txt").read_text()


@dataclass(frozen=True)
class HtfsParams:
    """K interval predictions, the relative length threshold δ, M position predictions, bounds."""

    k: int = 4
    delta: float = 0.25
    m: int = 4
    max_rounds: int = 3
    max_shown: int = 16


@dataclass
class HtfsTrace:
    """What HTFS decided, for reports and tests."""

    segments: list[tuple[int, int]] = field(default_factory=list)  # key segment after each round (frame indices)
    intervals: list[list[tuple[float, float] | None]] = field(default_factory=list)  # parsed per round
    positions: list[float | None] = field(default_factory=list)  # parsed percentages
    target: int = 0  # index into the video's frames


def spread(start: int, end: int, n: int) -> list[int]:
    """At most n frame indices spread evenly over [start, end] (both ends included)."""
    count = end - start + 1
    if count <= n:
        return list(range(start, end + 1))
    return sorted({start + round(i * (count - 1) / (n - 1)) for i in range(n)}) if n > 1 else [start]


def _answer_json(text: str) -> dict | None:
    start = text.find("<answer>")
    end = text.find("</answer>", start + 8)
    payload = text[start + 8:end] if start >= 0 and end > start else text
    left, right = payload.find("{"), payload.rfind("}")
    if left < 0 or right <= left or right - left > 500:
        return None
    try:
        data = json.loads(payload[left:right + 1])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _finite(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def parse_interval(text: str) -> tuple[float, float] | None:
    """(start, end) seconds from `{"start": s, "end": e}` with s ≤ e, else None."""
    data = _answer_json(text)
    if data is None:
        return None
    start, end = _finite(data.get("start")), _finite(data.get("end"))
    return (start, end) if start is not None and end is not None and start <= end else None


def parse_percent(text: str) -> float | None:
    """A percentage in [0, 100] from `{"percent": p}`, else None."""
    data = _answer_json(text)
    value = None if data is None else _finite(data.get("percent"))
    return value if value is not None and 0 <= value <= 100 else None


def _frames_note(timestamps: Sequence[int]) -> str:
    return (f"You are given {len(timestamps)} frames of a video at 1 frame per second; each frame is preceded by "
            f"its timestamp, like <{int(timestamps[0])}s>.")


def _chat(name: str, expression: str, timestamps: Sequence[int]) -> list[dict]:
    question = _prompt(name).format(frames_note=_frames_note(timestamps), expression=expression).strip()
    return [{"role": "user", "content": user_content(timestamps, question)}]


def _nearest(timestamps: Sequence[int], seconds: float, lo: int, hi: int) -> int:
    """The index in [lo, hi] whose timestamp is nearest `seconds` (earlier on a tie)."""
    return min(range(lo, hi + 1), key=lambda i: (abs(timestamps[i] - seconds), i))


def htfs(expression: str, timestamps: Sequence[int], images: Sequence[Image.Image], generate: Generate,
         params: HtfsParams | None = None) -> HtfsTrace:
    """Find the target frame of `expression` among a video's frames (see the module docstring).

    Args:
        expression: the referring / reasoning text.
        timestamps: every frame's timestamp in seconds (increasing).
        images: the frames, same order.
        generate: chats + images → one text each (sampling gives the K / M predictions their spread).
        params: K, δ, M and bounds.
    """
    params = params or HtfsParams()
    if len(timestamps) != len(images) or not timestamps:
        raise ValueError(f"HTFS needs one image per timestamp, got {len(images)} images, {len(timestamps)} timestamps")
    total = len(timestamps)
    lo, hi = 0, total - 1
    trace = HtfsTrace()
    for _ in range(params.max_rounds):
        if hi - lo + 1 <= params.delta * total:
            break
        shown = spread(lo, hi, params.max_shown)
        chat = _chat(INTERVAL_VERSION, expression, [timestamps[i] for i in shown])
        texts = generate([chat] * params.k, [[images[i] for i in shown]] * params.k)
        intervals = [parse_interval(t) for t in texts]
        trace.intervals.append(intervals)
        valid = [iv for iv in intervals if iv is not None]
        if not valid:
            break
        start = sum(s for s, _ in valid) / len(valid)
        end = sum(e for _, e in valid) / len(valid)
        new_lo = _nearest(timestamps, start, lo, hi)
        new_hi = max(new_lo, _nearest(timestamps, end, lo, hi))
        if (new_lo, new_hi) == (lo, hi):
            break
        lo, hi = new_lo, new_hi
        trace.segments.append((lo, hi))
    shown = spread(lo, hi, params.max_shown)
    chat = _chat(POSITION_VERSION, expression, [timestamps[i] for i in shown])
    texts = generate([chat] * params.m, [[images[i] for i in shown]] * params.m)
    trace.positions = [parse_percent(t) for t in texts]
    valid = [p for p in trace.positions if p is not None]
    mean = sum(valid) / len(valid) if valid else 50.0
    trace.target = lo + round(mean / 100 * (hi - lo))
    return trace


def policy_generate(model, processor, max_new_tokens: int, temperature: float = 1.0) -> Generate:
    """The policy model as HTFS's video LLM (sampled, so the K answers differ)."""
    import torch

    @torch.inference_mode()
    def run(chats: list[list[dict]], images: list[list[Image.Image]]) -> list[str]:
        texts = [processor.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]
        processor.tokenizer.padding_side = "left"
        inputs = processor(text=texts, images=[list(i) for i in images], padding=True, return_tensors="pt")
        inputs = {k: v.to(model.device) for k, v in inputs.items()}
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=temperature > 0,
                             temperature=temperature if temperature > 0 else None)
        return processor.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)

    return run


def openai_generate(teacher, cache_dir: Path, image_size: int | None = None) -> Generate:
    """Any OpenAI-compatible endpoint as HTFS's video LLM, through the teacher client (`teacher`: the
    `teacher` params block; retries, rate limit and the response cache as for CoT). Identical chats get
    distinct request keys (their index), so the K answers are K samples."""
    from stages.teacher.cache import ResponseCache, request_key
    from stages.teacher.client import ChatRequest, TeacherClient

    client = TeacherClient(teacher, ResponseCache(Path(cache_dir)))
    image_size = teacher.image_size if image_size is None else image_size  # longest side sent, pixels

    def encode(image: Image.Image) -> dict:
        img = image.convert("RGB")
        img.thumbnail((image_size, image_size))
        buffer = io.BytesIO()
        img.save(buffer, format="JPEG", quality=90)
        return {"type": "image_url",
                "image_url": {"url": "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()}}

    def run(chats: list[list[dict]], images: list[list[Image.Image]]) -> list[str]:
        requests = []
        for i, (chat, frames) in enumerate(zip(chats, images, strict=True)):
            pictures = iter(frames)
            content = [encode(next(pictures)) if c["type"] == "image" else c for c in chat[0]["content"]]
            digest = [hashlib.sha256(f.tobytes()).hexdigest() for f in frames]  # the frames' pixels, with the text
            key = request_key({"task": "htfs", "model": teacher.model, "chat": chat, "frames": digest, "index": i,
                               "temperature": teacher.temperature, "max_tokens": teacher.max_tokens,
                               "image_size": image_size})  # every field that changes the reply, and no other
            requests.append(ChatRequest(key=key, messages=[{"role": "user", "content": content}]))
        results = asyncio.run(client.run_all(requests))
        return [r.text if not r.error else "" for r in results]

    return run


def htfs_answer(expression: str, timestamps: Sequence[int], images: Sequence[Image.Image], generate: Generate,
                params: HtfsParams | None = None, task_name: str = "videoseg",
                keyframe_image: Callable[[int], Image.Image] | None = None):
    """HTFS, then the task's question on the target frame alone (`keyframe_image(t)`: that frame at the task's
    keyframe size; default the shown image): (completion, Answer with the target frame's timestamp as its
    keyframe | None, trace)."""
    from dataclasses import replace

    from stages.tasks import get_task

    trace = htfs(expression, timestamps, images, generate, params)
    task = get_task(task_name)
    t = int(timestamps[trace.target])
    chat = [{"role": "user", "content": task.question_content(expression, [t])}]
    text = generate([chat], [[keyframe_image(t) if keyframe_image else images[trace.target]]])[0]
    answer = task.parse(text)
    return text, None if answer is None else replace(answer, keyframe_timestamp=t), trace


@dataclass
class RcotTrace:
    """RCoT-Seg's inference, step by step."""

    description: str = ""
    selections: list[int] = field(default_factory=list)  # KFG keyframe timestamps, in order
    judgments: list[str | None] = field(default_factory=list)  # AKS options ("A" | "B" | None unparsed)


RESELECT_NOTE = "These frames were judged not to be valid keyframes: {rejected}. Choose a different keyframe."


def rcot_answer(expression: str, timestamps: Sequence[int], images: Sequence[Image.Image], generate: Generate,
                max_rounds: int = 5, keyframe_image: Callable[[int], Image.Image] | None = None):
    """RCoT-Seg's inference with its own tasks' questions: VDG describes the video; KFG picks a keyframe over
    the frames; AKS judges that frame alone (with the description) — on B the keyframe is re-selected with the
    rejected frames named, at most `max_rounds` selections, the last one kept; KTG then boxes the targets on
    that frame alone (with the description).

    Args:
        keyframe_image: the frame at a timestamp at the keyframe size (RCoT-Seg: 840²); default the shown image.

    Returns:
        (KTG completion, Answer with the keyframe's timestamp | None, trace).
    """
    from dataclasses import replace

    from stages.tasks import get_task

    vdg, kfg, aks, ktg = (get_task(n) for n in ("rcot_vdg", "rcot_kfg", "rcot_aks", "rcot_ktg"))
    frames = list(images)
    at = keyframe_image or (lambda t: frames[list(timestamps).index(t)])
    trace = RcotTrace()
    described = vdg.parse(generate([[{"role": "user", "content": vdg.question_content(expression, timestamps)}]],
                                   [frames])[0])
    trace.description = described.description if described is not None else ""
    rejected: list[int] = []
    keyframe: int | None = None
    for _ in range(max_rounds):
        content = kfg.question_content(expression, timestamps)
        if rejected:
            note = RESELECT_NOTE.format(rejected=", ".join(f"<{t}s>" for t in rejected))
            content[-1] = {"type": "text", "text": content[-1]["text"] + "\n" + note}
        chosen = kfg.parse(generate([[{"role": "user", "content": content}]], [frames])[0])
        if chosen is None or chosen.keyframe_timestamp not in timestamps:
            break  # an unusable selection ends the loop (the last usable one is kept)
        keyframe = chosen.keyframe_timestamp
        trace.selections.append(keyframe)
        if len(trace.selections) == max_rounds:
            break  # λ selections: the last is kept without another judgment
        chat = [{"role": "user", "content": aks.question_content(expression, [keyframe], trace.description)}]
        judged = aks.parse(generate([chat], [[at(keyframe)]])[0])
        trace.judgments.append(judged.option if judged is not None else None)
        if judged is None or judged.option != "B":
            break
        rejected.append(keyframe)
    if keyframe is None:
        return "", None, trace
    chat = [{"role": "user", "content": ktg.question_content(expression, [keyframe], trace.description)}]
    text = generate([chat], [[at(keyframe)]])[0]
    answer = ktg.parse(text)
    return text, None if answer is None else replace(answer, keyframe_timestamp=keyframe), trace
