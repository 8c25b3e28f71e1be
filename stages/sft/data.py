"""SFT data: WebDataset shards → chat examples → model inputs with loss on assistant tokens only.

Shards are *indexed*, not decoded: `index_shards` records where each frame's JPEG bytes sit in its tar
(offset, size) and keeps only the small JSON metadata in memory. Frames are read and decoded when a
sample is encoded, so memory stays bounded by the batch, not the pool (the paper's 5.8K samples at
560 px would be ~33 GB decoded). Encoded samples (the processor's output) are kept in memory up to a
byte budget and reused in later epochs.

Two collators make a micro-batch: `PadCollator` right-pads the samples into rows of the longest one;
`PackCollator` (`sft.packing`) puts them end to end in ONE row with no padding, each sample keeping its own
positions, and no token attending across samples (transformers' padding-free format for Qwen2.5-VL, below).
Both count the padding they would and do feed (`padding_stats`).
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image

from stages.tasks import frame_key_order, meta_content

IGNORE_INDEX = -100  # label of tokens that carry no loss (PyTorch cross-entropy's ignore_index)


@dataclass(frozen=True)
class ShardSample:
    """One sample of a shard: its key, metadata and where its frames' JPEG bytes lie (tar, offset, size)."""

    key: str
    meta: dict
    frames: tuple[tuple[str, int, int], ...]

    def load_frames(self) -> list[Image.Image]:
        """The frames, read from their tars and decoded (RGB)."""
        images = []
        handles: dict[str, io.BufferedReader] = {}
        try:
            for path, offset, size in self.frames:
                handle = handles.get(path) or handles.setdefault(path, open(path, "rb"))  # noqa: SIM115
                handle.seek(offset)
                image = Image.open(io.BytesIO(handle.read(size)))
                images.append(image.convert("RGB"))
        finally:
            for handle in handles.values():
                handle.close()
        return images


def _frame_index(suffix: str) -> tuple:
    """`frame_12.jpg` → its numeric order (frame_10 after frame_9): `stages.tasks.frame_key_order`."""
    return frame_key_order(suffix)


def index_shards(folder: Path) -> list[ShardSample]:
    """Every sample of a pool's `shard-*.tar`, in key order, without decoding a frame.

    Raises:
        ValueError: a sample without its `.json` metadata (names the tar and the key).
    """
    found: dict[str, dict] = {}
    for path in sorted(Path(folder).glob("shard-*.tar")):
        with tarfile.open(path, "r:") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                key, _, suffix = member.name.partition(".")
                entry = found.setdefault(key, {"meta": None, "frames": [], "tar": str(path)})
                if suffix == "json":
                    entry["meta"] = json.loads(tar.extractfile(member).read())
                elif suffix.startswith("frame_"):
                    entry["frames"].append((_frame_index(suffix), str(path), member.offset_data, member.size))
    samples = []
    for key in sorted(found):
        entry = found[key]
        if entry["meta"] is None:
            raise ValueError(f"{entry['tar']}: sample {key} has no .json metadata")
        frames = tuple((p, o, s) for _, p, o, s in sorted(entry["frames"]))
        samples.append(ShardSample(key, entry["meta"], frames))
    return samples


def read_shards(folder: Path) -> list[dict]:
    """Every sample of a pool's shards, in key order, decoded: {"key", "meta", "frames": [PIL images]}.

    Decodes everything: for small pools (the held-out format check, tests); training uses `index_shards`.
    """
    return [{"key": s.key, "meta": s.meta, "frames": s.load_frames()} for s in index_shards(folder)]


def messages(meta: dict, response: str | None = None) -> list[dict]:
    """The chat of one sample from its metadata: user turn with `<Ns>` + image pairs and the question; the
    assistant response if given."""
    chat = [{"role": "user", "content": meta_content(meta)}]  # the task's question, recorded by the shard stage
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
    labels = torch.full_like(input_ids, IGNORE_INDEX)
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


def meta_json(sample: dict | ShardSample) -> str:
    """Compact JSON of a sample's metadata (for fingerprints)."""
    meta = sample.meta if isinstance(sample, ShardSample) else sample["meta"]
    return json.dumps(meta, sort_keys=True)


def _nbytes(encoded: dict[str, torch.Tensor]) -> int:
    return sum(v.numel() * v.element_size() for v in encoded.values())


class SftDataset(torch.utils.data.Dataset):
    """Map-style dataset over indexed shard samples: each item is `encode_example`'s output.

    Frames are read from the tars when an item is first encoded. Encoded items are kept while their total
    size stays under `cache_bytes`, so later epochs skip the JPEG decode and the processor; items beyond
    the budget are encoded again each time (memory stays bounded).
    """

    def __init__(self, samples: Sequence[ShardSample], processor, cache_bytes: int) -> None:
        self.samples = list(samples)
        self.processor = processor
        self.cache_bytes = cache_bytes
        self.cached_bytes = 0
        self.cache: dict[int, dict[str, torch.Tensor]] = {}
        self.encodes = 0  # processor calls (reported by the benchmark)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        hit = self.cache.get(index)
        if hit is not None:
            return hit
        sample = self.samples[index]
        encoded = encode_example(self.processor, {"meta": sample.meta, "frames": sample.load_frames()})
        self.encodes += 1
        size = _nbytes(encoded)
        if self.cached_bytes + size <= self.cache_bytes:
            self.cache[index] = encoded
            self.cached_bytes += size
        return encoded


class PaddingCount:
    """Tokens of the samples, the slots of padded rows (samples × longest) and the slots actually fed, summed over
    the micro-batches a collator made (this process's)."""

    def __init__(self) -> None:
        self.tokens = self.padded_slots = self.fed_slots = 0

    def add(self, lengths: list[int], fed_slots: int) -> None:
        self.tokens += sum(lengths)
        self.padded_slots += len(lengths) * max(lengths)
        self.fed_slots += fed_slots

    def stats(self) -> dict[str, float]:
        """`padding_share_padded`: share of padding if the micro-batches were padded rows (what packing saves);
        `padding_share`: share of padding in what the model was fed (0 when packed)."""
        def share(slots: int) -> float:
            return round(1.0 - self.tokens / slots, 4) if slots else 0.0

        return {"padding_share_padded": share(self.padded_slots), "padding_share": share(self.fed_slots)}


class PadCollator:
    """Items of `SftDataset` → one batch: token rows right-padded (labels with -100), image tensors concatenated."""

    def __init__(self, pad_token_id: int) -> None:
        self.pad_token_id = pad_token_id
        self.count = PaddingCount()

    def __call__(self, items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        lengths = [int(item["input_ids"].shape[1]) for item in items]
        self.count.add(lengths, len(items) * max(lengths))
        if len(items) == 1:
            return dict(items[0])
        length = max(int(item["input_ids"].shape[1]) for item in items)
        batch: dict[str, torch.Tensor] = {}
        for key in items[0]:
            values = [item[key] for item in items]
            if values[0].dim() == 2 and values[0].shape[0] == 1 and key not in ("pixel_values", "image_grid_thw"):
                fill = {"labels": IGNORE_INDEX, "input_ids": self.pad_token_id}.get(key, 0)
                batch[key] = torch.cat([torch.nn.functional.pad(v, (0, length - v.shape[1]), value=fill)
                                        for v in values])
            else:
                batch[key] = torch.cat(values)
        return batch


RopeIndex = Callable[..., tuple[torch.Tensor, torch.Tensor]]  # Qwen2_5_VLModel.get_rope_index


class PackCollator:
    """Items of `SftDataset` → ONE row without padding: padding-free packing, in transformers' own format.

    transformers' `DataCollatorWithFlattening` puts the token ids end to end, separates the samples' labels
    (each sample's first label is -100, so no sample is trained to predict the next one's first token) and
    gives the text positions that restart at 0 for every sample. Qwen2.5-VL reads the 3D (M-RoPE) positions
    beside them: its language model takes `position_ids` of shape (4, 1, tokens) — row 0 the text positions,
    from which transformers builds the packed causal mask (one block per sample: no attention across samples,
    with sdpa, eager and flex; flash-attention reads the same rows as sequence lengths), rows 1–3 the temporal,
    height and width positions. Those are the model's own `get_rope_index` of each sample alone, so every
    sample's vision grid positions start where they would in a batch of its own. The image tensors are
    concatenated in sample order (the vision tower already runs each image as its own sequence).

    Args:
        rope_index: the model's `get_rope_index` (`Qwen2_5_VLModel.get_rope_index`: config-only arithmetic).
    """

    def __init__(self, rope_index: RopeIndex) -> None:
        from transformers import DataCollatorWithFlattening

        self.rope_index = rope_index
        self.flatten = DataCollatorWithFlattening(return_position_ids=True, separator_id=IGNORE_INDEX)
        self.count = PaddingCount()

    def __call__(self, items: list[dict[str, torch.Tensor]]) -> dict:
        for item in items:
            if item["input_ids"].shape[0] != 1 or not bool(item["attention_mask"].all()):
                raise ValueError("PackCollator: each item must be one unpadded sample (encode_example's output)")
        flat = self.flatten([{"input_ids": item["input_ids"][0], "labels": item["labels"][0]} for item in items])
        mrope = []
        for item in items:
            positions, _ = self.rope_index(item["input_ids"], mm_token_type_ids=item["mm_token_type_ids"],
                                           image_grid_thw=item.get("image_grid_thw"),
                                           video_grid_thw=item.get("video_grid_thw"))
            mrope.append(positions)
        # with the flattened ids (the collator's CPU tensors), wherever the items and the model's rope index live
        positions = torch.cat([flat["position_ids"][None], torch.cat(mrope, dim=2).to(flat["position_ids"])])
        lengths = [int(item["input_ids"].shape[1]) for item in items]
        self.count.add(lengths, sum(lengths))
        # no cache: transformers looks for packed rows in the positions only when the forward builds no cache, and
        # Qwen2.5-VL's config (use_cache: true) would make it build one and attend across the samples
        batch = {"input_ids": flat["input_ids"], "labels": flat["labels"], "position_ids": positions,
                 "use_cache": False}
        for key in ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw"):
            if key in items[0]:
                batch[key] = torch.cat([item[key] for item in items])
        return batch
