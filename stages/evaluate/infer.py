"""The model's side of evaluation: show N frames, get keyframe + boxes (batched), parse.

Veason-R1 mode: one answer per expression. RCoT-Seg mode (agentic keyframe selection, its own tasks'
questions): the model describes the video (VDG), picks a keyframe (KFG), judges that frame alone with the
description (AKS: A valid, B not); on B it selects again with the rejected timestamps listed, for at most
`max_rounds` selections, the last kept; then it boxes the targets on that frame (KTG). A judgment that does
not parse ends the loop (the selection is kept). VideoSeg-R1 mode: HTFS finds the target frame, the
videoseg task answers on it (`stages.tasks.inference`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from PIL import Image

from schemas.answer import Answer, parse_answer
from stages.tasks import get_task, timestamp_tag

log = logging.getLogger(__name__)

JUDGE_VERSION = "rcot_aks/v1"  # RCoT mode asks its tasks' own questions (stages/tasks: rcot_vdg, _kfg, _aks, _ktg)
RESELECT_NOTE = "These frames were judged not to be valid keyframes: {rejected}. Choose a different keyframe."


@dataclass
class Query:
    """One expression to answer: its text and the frames shown (PIL, at the shown size) with timestamps."""

    key: str
    text: str
    timestamps: list[int]
    images: list[Image.Image]
    rejected: list[int] = field(default_factory=list)  # RCoT: keyframes judged invalid so far
    # the frame at a timestamp at the keyframe size (RCoT-Seg AKS / KTG, VideoSeg-R1's target frame); None: shown
    frame_at: Callable[[int], Image.Image] | None = None


@dataclass
class Reply:
    """The model's final answer for a query and how it was reached."""

    response: str
    answer: Answer | None
    rounds: list[int] = field(default_factory=list)  # keyframe timestamps selected, in order
    judgments: list[str | None] = field(default_factory=list)  # RCoT: "A", "B" or None (unparseable)
    answer_size: int | None = None  # side of the frame the answer's pixels refer to; None: the shown size

    @property
    def n_rounds(self) -> int:
        """Keyframe selections made (1 in Veason-R1 mode, or when the answer did not parse)."""
        return max(1, len(self.rounds))


def selection_messages(query: Query) -> list[dict]:
    """The chat asking for keyframe + boxes (the SFT/GRPO question; the rejected frames noted in RCoT mode)."""
    content = get_task("veason").question_content(query.text, query.timestamps)
    if query.rejected:
        rejected = ", ".join(timestamp_tag(t) for t in query.rejected)
        content.append({"type": "text", "text": "\n" + RESELECT_NOTE.format(rejected=rejected)})
    return [{"role": "user", "content": content}]


def parse_option(text: str) -> str | None:
    """"A" / "B" from `<answer>{"option": …}</answer>`, or from a closing "Answer: A"; None otherwise."""
    start = text.find("<answer>")
    end = text.find("</answer>", start + 8)
    if start >= 0 and end > start:
        try:
            data = json.loads(text[start + 8:end].strip())
        except ValueError:
            data = None
        if isinstance(data, dict) and data.get("option") in ("A", "B"):
            return data["option"]
    tail = text.rstrip().rsplit("Answer:", 1)
    if len(tail) == 2 and tail[1].strip() in ("A", "B"):
        return tail[1].strip()
    return None


@torch.inference_mode()
def generate(model, processor, chats: Sequence[list[dict]], images: Sequence[list[Image.Image]],
             max_new_tokens: int) -> list[str]:
    """Greedy completions for a batch of chats (left-padded), decoded without special tokens.

    When every chat shows the same images (the same PIL objects: one video's expressions), the images are
    processed and run through the vision tower once for the whole batch (`shared_image_inputs`), and the
    tokens the chats share up to where they differ (system turn, frames, the question's opening) are run
    through the language model once (`shared_prefix_inputs`).
    """
    texts = [processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) for chat in chats]
    processor.tokenizer.padding_side = "left"  # not saved with the processor; generation needs it
    if len(chats) > 1 and _same_images(images) and _accepts_encoder_outputs(model):
        inputs = shared_image_inputs(model, processor, texts, images[0])
        inputs = shared_prefix_inputs(model, inputs, len(images[0])) or inputs
    else:
        inputs = processor(text=texts, images=[list(i) for i in images], padding=True, return_tensors="pt")
        inputs = {k: v.to(model.device) for k, v in inputs.items()}
    # a cache the shared prefix already filled is handed over, and the model's own cache setting (a static cache,
    # `use_static_cache`) yields to it: transformers refuses both at once
    handed_over = {"cache_implementation": None} if "past_key_values" in inputs else {}
    out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, **handed_over)
    return processor.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)


def use_static_cache(model, setting: str, key: str = "evaluate.kv_cache") -> bool:
    """Decode with a static KV cache when `setting` is "static", or "auto" with CUDA ("dynamic": transformers'
    default, left as it is). On CUDA transformers then compiles the decode step with torch.compile (its own
    auto-compile of a compileable cache), where a dynamic cache runs a step's kernels one by one. Set through the
    model's generation config, so every `generate` of the model uses it, except one handed a cache already filled
    (`generate`). On the CPU a static cache only preallocates, so auto leaves it dynamic. Returns whether it is on.

    Raises:
        ValueError: an unknown setting (one line naming `key`).
    """
    import torch

    if setting not in ("dynamic", "static", "auto"):
        raise ValueError(f"{key}: expected one of ['dynamic', 'static', 'auto'], got {setting!r}")
    on = setting == "static" or (setting == "auto" and torch.cuda.is_available())
    if on:
        model.generation_config.cache_implementation = "static"
    return on


def _same_images(images: Sequence[Sequence[Image.Image]]) -> bool:
    first = list(images[0])
    return bool(first) and all(len(i) == len(first) and all(a is b for a, b in zip(i, first, strict=True))
                               for i in images[1:])


def _accepts_encoder_outputs(model) -> bool:
    """The model takes precomputed vision-tower outputs (`mm_encoder_outputs`, transformers ≥ 5)."""
    import inspect

    return "mm_encoder_outputs" in inspect.signature(model.forward).parameters and hasattr(model,
                                                                                          "get_image_features")


def shared_image_inputs(model, processor, texts: Sequence[str], images: Sequence[Image.Image]) -> dict:
    """`model.generate` inputs for texts that all show the same images, the images processed and encoded once.

    Equal to what `processor(text=texts, images=[images] * len(texts), padding=True)` gives and the model's
    vision tower computes for it (one copy of the images' features per text), without the repeats: the
    image processor runs on one copy, the placeholder expansion per text follows the processor's own
    `replace_image_token`, and the vision tower's output for that copy is passed to every text as
    `mm_encoder_outputs` (no `pixel_values`: the model does not encode again).
    """
    pixels = processor.image_processor(images=list(images), return_tensors="pt")
    replacements = [processor.replace_image_token(pixels, i) for i in range(len(images))]
    expanded, _ = processor.get_text_with_replacements(list(texts), replacements * len(texts))
    tokens = processor.tokenizer(expanded, padding=True, return_tensors="pt")
    mm_types = torch.as_tensor(processor.create_mm_token_type_ids(tokens["input_ids"].tolist()))
    grid = pixels["image_grid_thw"].to(model.device)
    features = model.get_image_features(pixels["pixel_values"].to(model.device), grid, return_dict=True)
    features.pooler_output = tuple(features.pooler_output) * len(texts)
    device = model.device
    return {"input_ids": tokens["input_ids"].to(device), "attention_mask": tokens["attention_mask"].to(device),
            "mm_token_type_ids": mm_types.to(device), "image_grid_thw": grid.repeat(len(texts), 1),
            "mm_encoder_outputs": {"image": features}}


def shared_prefix_inputs(model, inputs: dict, n_images: int) -> dict | None:
    """`shared_image_inputs` with the texts' common prefix prefilled once: the prefix (every image token
    included) runs through the model at batch 1, its KV cache is repeated for every text, and each text's
    remaining tokens follow the prefix after the padding (the padding moves between prefix and rest; the
    attention mask hides it, so positions and attention are those of the unpadded text). None when the
    common prefix does not hold every image token or leaves a text without a token of its own.
    """
    from transformers import DynamicCache

    ids, mask, types = inputs["input_ids"], inputs["attention_mask"], inputs["mm_token_type_ids"]
    rows = [mask[i].bool() for i in range(len(ids))]
    seqs, kinds = [ids[i][r] for i, r in enumerate(rows)], [types[i][r] for i, r in enumerate(rows)]
    n = min(len(s) for s in seqs) - 1
    same = torch.stack([s[:n] == seqs[0][:n] for s in seqs]).all(0)
    prefix = int(same.long().cumprod(0).sum())
    vision = torch.nonzero(kinds[0]).flatten()
    if not len(vision) or prefix <= int(vision.max()) or any(bool(k[prefix:].any()) for k in kinds):
        return None
    features = inputs["mm_encoder_outputs"]["image"]
    one = type(features)(**{k: v for k, v in features.items() if k != "pooler_output"})
    one.pooler_output = tuple(features.pooler_output[:n_images])
    grid = inputs["image_grid_thw"][:n_images]
    cache = DynamicCache(config=model.config)
    model(input_ids=seqs[0][None, :prefix], attention_mask=torch.ones_like(seqs[0][None, :prefix]),
          mm_token_type_ids=kinds[0][None, :prefix], image_grid_thw=grid, mm_encoder_outputs={"image": one},
          past_key_values=cache, use_cache=True, logits_to_keep=1)
    cache.batch_repeat_interleave(len(seqs))
    width = max(len(s) for s in seqs)
    out_ids, out_mask, out_types = (torch.zeros((len(seqs), width), dtype=t.dtype, device=t.device)
                                    for t in (ids, mask, types))
    out_ids[:] = ids[~mask.bool()][0] if (~mask.bool()).any() else 0  # the pad token
    for i, (seq, kind) in enumerate(zip(seqs, kinds, strict=True)):
        for part in (slice(0, prefix), slice(width - (len(seq) - prefix), width)):
            src = slice(0, prefix) if part.start == 0 else slice(prefix, len(seq))
            out_ids[i, part], out_types[i, part], out_mask[i, part] = seq[src], kind[src], 1
    return {"input_ids": out_ids, "attention_mask": out_mask, "mm_token_type_ids": out_types,
            "image_grid_thw": inputs["image_grid_thw"], "past_key_values": cache}


def _batched(model, processor, queries: list[Query], chats: list[list[dict]], max_new_tokens: int,
             batch_size: int) -> list[str]:
    """Completions in ceil(n / batch_size) batches of near-equal size, consecutive queries together."""
    out: list[str] = []
    n_batches = -(-len(queries) // batch_size)
    bounds = [round(i * len(queries) / n_batches) for i in range(n_batches + 1)] if queries else [0]
    for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
        out += generate(model, processor, chats[start:stop], [q.images for q in queries[start:stop]], max_new_tokens)
    return out


def _side(query: Query, timestamps: list[int]) -> int | None:
    """The side of the single frame a task answered on (`frame_at`), None when it was a shown frame."""
    if query.frame_at is None or not timestamps:
        return None
    return query.frame_at(timestamps[-1]).width


def answer_queries(model, processor, queries: list[Query], max_new_tokens: int, batch_size: int,
                   mode: str = "veason", max_rounds: int = 5, htfs_params=None) -> list[Reply]:
    """Answer every query: "veason" asks the Veason-R1 question once (batched); "rcot" runs RCoT-Seg's inference
    with its tasks' questions (VDG → KFG → AKS judgment and re-selection → KTG; `stages.tasks.inference`); "htfs"
    lets VideoSeg-R1's sampler pick the target frame among the query's frames, and the videoseg task answers on it.

    Returns:
        One Reply per query, in order.
    """
    if mode not in ("veason", "rcot", "htfs"):
        raise ValueError(f"unknown evaluate.mode {mode!r} (veason | rcot | htfs)")
    if mode == "htfs":
        from stages.tasks.inference import htfs_answer, policy_generate

        generate_fn = policy_generate(model, processor, max_new_tokens)
        replies = []
        for query in queries:
            text, answer, trace = htfs_answer(query.text, query.timestamps, query.images, generate_fn, htfs_params,
                                              keyframe_image=query.frame_at)
            t = query.timestamps[trace.target]
            replies.append(Reply(text, answer, rounds=[t], answer_size=_side(query, [t])))
        return replies
    if mode == "rcot":
        from stages.tasks.inference import rcot_answer

        def generate_fn(chats, images):
            return generate(model, processor, chats, images, max_new_tokens)

        replies = []
        for query in queries:
            text, answer, trace = rcot_answer(query.text, query.timestamps, query.images, generate_fn, max_rounds,
                                              keyframe_image=query.frame_at)
            query.rejected = [t for t, j in zip(trace.selections, trace.judgments, strict=False) if j == "B"]
            replies.append(Reply(text, answer, rounds=list(trace.selections), judgments=list(trace.judgments),
                                 answer_size=_side(query, trace.selections)))
        return replies
    chats = [selection_messages(q) for q in queries]
    texts = _batched(model, processor, queries, chats, max_new_tokens, batch_size)
    replies = []
    for text in texts:
        answer = parse_answer(text)
        replies.append(Reply(text, answer, rounds=[] if answer is None else [answer.keyframe_timestamp]))
    return replies
