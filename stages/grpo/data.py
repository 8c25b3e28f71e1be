"""GRPO data: the shard stage's GRPO WebDataset tars → a `datasets.Dataset` for TRL's GRPOTrainer.

One row per prompt: `prompt` (chat messages: `<ts>` text + image placeholder per frame, then the
question), `images` (the shown frames, PIL), `ground_truth` (GroundTruth JSON, docs/contracts.md),
`sample_id` and `source` (the training source: the per-source reward curve). Extra columns reach the
reward function as keyword arguments.

Frames stay JPEG-encoded (the shard's own bytes) until a row is read: the dataset holds the compressed
pool, not decoded pixels (10K prompts × 6 frames at 560 px would be ~56 GB decoded).
"""

from __future__ import annotations

import json
from pathlib import Path

import webdataset as wds

from schemas.answer import GroundTruth
from stages.tasks import frame_keys, meta_content


def read_grpo_shards(folder: Path) -> list[dict]:
    """Every sample of the GRPO shards in key order: {"sample_id", "meta", "frames": [{"bytes": JPEG}]}
    (frames undecoded; `build_dataset` turns them into PIL images on access).

    Raises:
        FileNotFoundError: no `shard-*.tar` in the folder. ValueError: a sample's ground truth is bad.
    """
    urls = sorted(str(p) for p in Path(folder).glob("shard-*.tar"))
    if not urls:
        raise FileNotFoundError(f"{folder}: no GRPO shards (run the shard stage)")
    samples = []
    # every process reads the whole pool (the trainer splits the rounds' prompts over the processes)
    for sample in wds.WebDataset(urls, shardshuffle=False, empty_check=False, nodesplitter=None):
        meta = json.loads(sample["json"])
        frames = [{"bytes": sample[k], "path": None}
                  for k in frame_keys(sample)]
        try:
            GroundTruth.from_json(meta["ground_truth"])
        except (ValueError, KeyError) as err:
            raise ValueError(f"{sample['__key__']}: {err}") from err
        if len(frames) != len(meta["timestamps"]):
            raise ValueError(f"{sample['__key__']}: {len(frames)} frames for {len(meta['timestamps'])} timestamps")
        samples.append({"sample_id": meta["sample_id"], "meta": meta, "frames": frames})
    return sorted(samples, key=lambda s: s["sample_id"])


def prompt_messages(meta: dict) -> list[dict]:
    """The user turn (same question as SFT and evaluation)."""
    content = [{"type": c["type"], "text": c.get("text")} for c in meta_content(meta)]  # the task's question
    return [{"role": "user", "content": content}]


def build_dataset(samples: list[dict]):
    """A `datasets.Dataset` with prompt, images, ground_truth, sample_id and source columns."""
    from datasets import Dataset, Features, List, Value
    from datasets import Image as ImageFeature

    rows = [{"prompt": prompt_messages(s["meta"]), "images": s["frames"],
             "ground_truth": json.dumps(s["meta"]["ground_truth"], sort_keys=True), "sample_id": s["sample_id"],
             "source": s["meta"].get("source", "root")}  # shards written before sources were named: data.root
            for s in samples]
    features = Features({
        "prompt": List({"role": Value("string"), "content": List({"type": Value("string"), "text": Value("string")})}),
        "images": List(ImageFeature()),
        "ground_truth": Value("string"),
        "sample_id": Value("string"),
        "source": Value("string"),
    })
    return Dataset.from_list(rows, features=features)
