"""Model inputs of chat samples, shared by the stages that fine-tune Qwen2.5-VL (`sft`, `pretrain`): the labels
that put the loss on assistant tokens only, and the two collators that make a micro-batch of encoded samples.

`PadCollator` right-pads the samples into rows of the longest one; `PackCollator` (`sft.packing`) puts them end to
end in ONE row with no padding, each sample keeping its own positions, and no token attending across samples
(transformers' padding-free format for Qwen2.5-VL, below). Both count the padding they would and do feed
(`PaddingCount`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

IGNORE_INDEX = -100  # label of tokens that carry no loss (PyTorch cross-entropy's ignore_index)


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
