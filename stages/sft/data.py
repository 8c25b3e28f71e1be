"""SFT data: WebDataset shards → chat examples → model inputs with loss on assistant tokens only."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import webdataset as wds

from stages.teacher.prompts import question_content


def read_shards(folder: Path) -> list[dict]:
    """Every sample of a pool's shards, in key order: {"key", "meta", "frames": [PIL images]}."""
    urls = sorted(str(p) for p in Path(folder).glob("shard-*.tar"))
    if not urls:
        return []
    samples = []
    for sample in wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode("pil"):
        frames = [sample[k] for k in sorted(k for k in sample if k.startswith("frame_"))]
        samples.append({"key": sample["__key__"], "meta": sample["json"], "frames": frames})
    return sorted(samples, key=lambda s: s["key"])


def messages(meta: dict, response: str | None = None) -> list[dict]:
    """The chat: user turn with `<Ns>` + image pairs and the question; the assistant response if given."""
    chat = [{"role": "user", "content": question_content(meta["expression"], meta["timestamps"])}]
    if response is not None:
        chat.append({"role": "assistant", "content": [{"type": "text", "text": response}]})
    return chat


def assistant_labels(input_ids: torch.Tensor, tokenizer) -> torch.Tensor:
    """Labels equal to input_ids on assistant turns (their text and closing <|im_end|>), -100 elsewhere.

    Found by token ids, not by string offsets: `<|im_start|>assistant\\n` opens a span that the next
    `<|im_end|>` closes.
    """
    im_start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    header = tokenizer("assistant\n", add_special_tokens=False)["input_ids"]
    labels = torch.full_like(input_ids, -100)
    for b in range(input_ids.shape[0]):
        row = input_ids[b].tolist()
        i = 0
        while i < len(row):
            if row[i] == im_start and row[i + 1:i + 1 + len(header)] == header:
                start = i + 1 + len(header)
                end = start
                while end < len(row) and row[end] != im_end:
                    end += 1
                labels[b, start:end + 1] = input_ids[b, start:end + 1]
                i = end
            i += 1
    return labels


def encode_example(processor, sample: dict) -> dict[str, torch.Tensor]:
    """Processor inputs + assistant-only labels for one SFT sample (batch of 1)."""
    text = processor.apply_chat_template(messages(sample["meta"], sample["meta"]["response"]), tokenize=False)
    inputs = processor(text=[text], images=[list(sample["frames"])], return_tensors="pt")
    inputs["labels"] = assistant_labels(inputs["input_ids"], processor.tokenizer)
    return dict(inputs)


def encode_prompt(processor, sample: dict) -> dict[str, torch.Tensor]:
    """Processor inputs of the question only, ending with the assistant header (for generation)."""
    return encode_prompts(processor, [sample])


def encode_prompts(processor, samples: list[dict]) -> dict[str, torch.Tensor]:
    """A left-padded batch of questions (generation continues every row from its last position)."""
    texts = [processor.apply_chat_template(messages(s["meta"]), tokenize=False, add_generation_prompt=True)
             for s in samples]
    # padding_side is not saved with the tokenizer, so it is set here, every time
    processor.tokenizer.padding_side = "left"
    return dict(processor(text=texts, images=[list(s["frames"]) for s in samples], padding=True,
                          return_tensors="pt"))


def meta_json(sample: dict) -> str:
    """Compact JSON of a sample's metadata (for fingerprints)."""
    return json.dumps(sample["meta"], sort_keys=True)


