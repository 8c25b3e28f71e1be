"""SFT data: WebDataset shards → chat examples → model inputs with loss on assistant tokens only.

Shards are *indexed*, not decoded: `index_shards` records where each frame's JPEG bytes sit in its tar
(offset, size) and keeps only the small JSON metadata in memory. Frames are read and decoded when a
sample is encoded, so memory stays bounded by the batch, not the pool (the paper's 5.8K samples at
560 px would be ~33 GB decoded). Encoded samples (the processor's output) are kept in memory up to a
byte budget and reused in later epochs.

The collators that make a micro-batch of the encoded samples (`PadCollator`, `PackCollator`) and the
assistant-token labels are in `stages.models.batches`, shared with the `pretrain` stage.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image

from stages.models.batches import assistant_labels
from stages.tasks import frame_key_order, meta_content


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
