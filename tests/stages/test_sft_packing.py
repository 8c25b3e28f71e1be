"""sft packing (`PackCollator`): a packed row trains exactly as the padded batch of the same samples — every
sample's loss equals its loss alone (no attention across samples, its own M-RoPE positions) and the gradients of
the batch loss agree — on the tiny model and on 2 layers of Qwen2.5-VL-3B's shapes; the padding counts."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from stages.models import load_vlm
from stages.models.batches import IGNORE_INDEX, PackCollator, PadCollator, PaddingCount
from stages.models.qwen_shapes import QWEN25VL_3B_TEXT, QWEN25VL_3B_VISION, qwen25vl_3b_config
from stages.params.tiny_models import TinyModelsParams
from stages.sft.data import encode_example
from stages.tasks import get_task
from stages.tiny_models.tiny_qwen import build_tiny_qwen

PATCH = 14 * 14 * 3 * 2  # one flattened 14 × 14 patch over 2 frames (temporal_patch_size), RGB


def sample_losses(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """Mean negative log-likelihood of the labelled next tokens of one sample (logits (T, V), labels (T,)),
    from the definition: the token at t + 1 is predicted from position t."""
    log_probs = torch.log_softmax(logits[:-1].double(), dim=-1)
    targets = labels[1:]
    keep = targets != IGNORE_INDEX
    return float(-log_probs[keep].gather(1, targets[keep, None]).mean())


def check_equivalence(model, items: list[dict], rtol: float) -> None:
    """Per-sample loss (packed row, padded rows, each alone) and the batch loss's gradients (packed vs padded)."""
    pack, pad = PackCollator(model.model.get_rope_index), PadCollator(pad_token_id=0)
    packed, padded = pack(items), pad(items)
    assert packed["input_ids"].shape == (1, sum(int(i["input_ids"].shape[1]) for i in items))
    model.train()
    with torch.no_grad():
        packed_logits, padded_logits = model(**packed).logits[0], model(**padded).logits
        alone = [sample_losses(model(**item).logits[0], item["labels"][0]) for item in items]
    start = 0
    for row, item in enumerate(items):
        length = int(item["input_ids"].shape[1])
        own = sample_losses(packed_logits[start:start + length], item["labels"][0])
        assert own == pytest.approx(alone[row], rel=rtol), f"sample {row} in the packed row"
        assert sample_losses(padded_logits[row, :length], item["labels"][0]) == pytest.approx(alone[row], rel=rtol)
        start += length
    grads = []
    for batch in (packed, padded):
        model.zero_grad(set_to_none=True)
        model(**batch).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 0
    for name, grad in grads[0].items():
        scale = float(grads[1][name].abs().max())
        assert torch.allclose(grad, grads[1][name], rtol=rtol, atol=rtol * scale), name


def _frames(n: int, seed: int, side: int = 56) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 255, (side, side, 3), dtype=np.uint8)) for _ in range(n)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    torch.set_num_threads(1)  # two threads wait on each other beside the other worker (tests/conftest.py)
    folder = tmp_path_factory.mktemp("tiny") / "qwen25vl"
    build_tiny_qwen(TinyModelsParams(vocab_size=384, hidden_size=64, num_layers=2, max_image_side=56), folder)
    return load_vlm(folder, "float32", "cpu")


def test_packed_tiny_model_matches_padded_and_alone(tiny) -> None:
    model, processor = tiny
    items = []
    for i, (n_frames, response) in enumerate([(1, "<think>left.</think><answer>{}</answer>"),
                                              (3, "<think>It moves right, then stops by the tree.</think>"
                                                  '<answer>{"keyframe_timestamp": 4}</answer>'),
                                              (2, "<think>hidden</think>")]):
        timestamps = [2 * j for j in range(n_frames)]
        meta = {"expression": "the red square", "timestamps": timestamps, "response": response,
                "question": get_task("veason").question("the red square", timestamps)}
        items.append(encode_example(processor, {"meta": meta, "frames": _frames(n_frames, i)}))
    assert len({int(item["input_ids"].shape[1]) for item in items}) == 3  # padded rows would hold padding
    check_equivalence(model, items, rtol=2e-5)


def synthetic_item(config, images: int, text: int, response: int, seed: int) -> dict[str, torch.Tensor]:
    """One sample as the processor lays it out (per image: a few text ids, vision start, 4 image tokens of a 56 px
    frame, vision end; then text and a response with labels), random ids and pixels."""
    generator = torch.Generator().manual_seed(seed)
    special = min(config.image_token_id, config.vision_start_token_id)
    ids: list[int] = []
    for _ in range(images):
        ids += torch.randint(2, special, (3,), generator=generator).tolist()
        ids += [config.vision_start_token_id] + [config.image_token_id] * 4 + [config.vision_end_token_id]
    ids += torch.randint(2, special, (text + response,), generator=generator).tolist()
    input_ids = torch.tensor([ids])
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    labels[0, -response:] = input_ids[0, -response:]
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels,
            "mm_token_type_ids": (input_ids == config.image_token_id).long(),
            "pixel_values": torch.randn(images * 16, PATCH, generator=generator),
            "image_grid_thw": torch.tensor([[1, 4, 4]] * images)}


def test_packed_two_layers_of_the_3b_shape_match_padded_and_alone() -> None:
    from transformers import Qwen2_5_VLForConditionalGeneration

    # the 3B's widths, heads (16 query, 2 key/value), M-RoPE sections and vision geometry, 2 decoder layers and 2
    # vision blocks (one windowed, one full); a 1024-token vocabulary instead of 151,936 rows (it takes no part in
    # positions or masks, and would make this test take a minute on the CPU)
    config = qwen25vl_3b_config(text_layers=2, vision_depth=2, vocab_size=1024)
    text = config.text_config
    assert (text.hidden_size, text.num_attention_heads, text.num_key_value_heads, text.intermediate_size) == (
        QWEN25VL_3B_TEXT["hidden_size"], 16, 2, QWEN25VL_3B_TEXT["intermediate_size"])
    assert text.rope_parameters["mrope_section"] == [16, 24, 24]
    assert config.vision_config.hidden_size == QWEN25VL_3B_VISION["hidden_size"]
    assert config.vision_config.fullatt_block_indexes == [1]
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration(config)
    # gradients of the first layer's attention and the last layer's MLP (the vision tower frozen, as the stage
    # trains it): the backward pass still runs through every decoder layer, without the other weights' gradients
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name.startswith(("model.language_model.layers.0.self_attn.",
                                                  "model.language_model.layers.1.mlp.")))
    items = [synthetic_item(config, 1, 6, 10, 0), synthetic_item(config, 2, 9, 14, 1),
             synthetic_item(config, 1, 4, 7, 2)]
    check_equivalence(model, items, rtol=1e-4)


@pytest.mark.parametrize(("batches", "padded", "fed_packed"), [
    ([[5]], 0.0, 0.0),
    ([[3, 5]], 0.2, 0.0),  # 8 tokens in 2 rows of 5
    ([[3, 5], [4, 4, 2]], 0.1818, 0.0),  # 18 tokens in 10 + 12 padded slots
])
def test_padding_shares_count_every_micro_batch(batches: list[list[int]], padded: float, fed_packed: float) -> None:
    pad, pack = PaddingCount(), PaddingCount()
    for lengths in batches:
        pad.add(lengths, len(lengths) * max(lengths))
        pack.add(lengths, sum(lengths))
    assert pad.stats() == {"padding_share_padded": padded, "padding_share": padded}
    assert pack.stats() == {"padding_share_padded": padded, "padding_share": fed_packed}


def test_collators_count_what_they_feed(tiny) -> None:
    model, _ = tiny
    config = model.config
    items = [synthetic_item(config, 1, 2, 3, 0), synthetic_item(config, 1, 6, 3, 1)]
    lengths = [int(item["input_ids"].shape[1]) for item in items]
    pad, pack = PadCollator(pad_token_id=0), PackCollator(model.model.get_rope_index)
    pad(items)
    packed = pack(items)
    share = round(1 - sum(lengths) / (2 * max(lengths)), 4)
    assert pad.count.stats() == {"padding_share_padded": share, "padding_share": share} and share > 0
    assert pack.count.stats() == {"padding_share_padded": share, "padding_share": 0.0}
    # text positions restart for each sample (what transformers reads the packed causal mask from)
    assert packed["position_ids"][0, 0].tolist() == list(range(lengths[0])) + list(range(lengths[1]))
    assert packed["labels"][0, lengths[0]] == IGNORE_INDEX and packed["use_cache"] is False


def test_pack_collator_refuses_padded_rows(tiny) -> None:
    model, _ = tiny
    item = synthetic_item(model.config, 1, 2, 3, 0)
    padded = PadCollator(pad_token_id=0)([item, synthetic_item(model.config, 1, 6, 3, 1)])
    with pytest.raises(ValueError, match="one unpadded sample"):
        PackCollator(model.model.get_rope_index)([{k: v[:1] for k, v in padded.items()}])


def test_the_stage_packs_only_models_with_3d_positions(tiny) -> None:
    from dataclasses import replace

    from stages.params.sft import SftParams
    from stages.sft import _collator

    model, processor = tiny
    assert isinstance(_collator(replace(SftParams(), packing=True), model, processor), PackCollator)
    assert isinstance(_collator(SftParams(), model, processor), PadCollator)
    with pytest.raises(ValueError, match="sft.packing: Module has no get_rope_index"):
        _collator(replace(SftParams(), packing=True), torch.nn.Module(), processor)


def test_shapes_keep_the_3b_special_token_layout() -> None:
    full = qwen25vl_3b_config(text_layers=1, vision_depth=8)
    assert (full.image_token_id, full.vision_start_token_id, full.text_config.vocab_size) == (151655, 151652, 151936)
    assert full.vision_config.fullatt_block_indexes == [7]
    short = qwen25vl_3b_config(text_layers=1, vision_depth=1, vocab_size=1024)
    assert short.image_token_id == 1024 - (151936 - 151655) and short.vision_config.fullatt_block_indexes == [0]
    with pytest.raises(ValueError, match="vocab_size 200: must hold the 3B's special tokens"):
        qwen25vl_3b_config(vocab_size=200)

