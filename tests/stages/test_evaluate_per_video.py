"""The per-video evaluation path against the per-expression one, on the tiny random models: one video's
expressions generated in one batch with its frames processed and run through the vision tower once, and
identical SAM2 prompts tracked once — outputs equal to those of each expression alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from stages.evaluate import infer as I
from stages.evaluate import predict_masks
from stages.params.tiny_models import TinyModelsParams

FRAMES = [Image.fromarray(np.random.default_rng(t).integers(0, 255, (56, 56, 3), dtype=np.uint8)) for t in range(3)]
TEXTS = ["the dog", "the red car that turns left at the end of the road", "a cup", "what the child is holding"]


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The tiny random Qwen2.5-VL and SAM2 at test_evaluate's shapes."""
    from stages.tiny_models.tiny_qwen import build_tiny_qwen
    from stages.tiny_models.tiny_sam2 import build_tiny_sam2

    base = tmp_path_factory.mktemp("models")
    build_tiny_qwen(TinyModelsParams(vocab_size=512, hidden_size=64, num_layers=1, max_image_side=56), base / "qwen")
    checkpoint, config = build_tiny_sam2(base / "sam2", 128, 0)
    return base / "qwen", checkpoint, config


@pytest.fixture(scope="module")
def vlm(tiny_models):
    from stages.models import load_vlm

    return load_vlm(str(tiny_models[0]), "float32", device="cpu")


def test_shared_image_inputs_equal_the_processors_and_the_vision_tower_runs_once(vlm) -> None:
    model, processor = vlm
    chats = [I.selection_messages(I.Query(str(i), t, [0, 2, 4], FRAMES)) for i, t in enumerate(TEXTS)]
    texts = [processor.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]
    processor.tokenizer.padding_side = "left"
    full = processor(text=texts, images=[FRAMES] * len(texts), padding=True, return_tensors="pt")
    calls = []
    forward = model.model.visual.forward

    def counted(pixel_values, *args, **kwargs):
        calls.append(int(pixel_values.shape[0]))
        return forward(pixel_values, *args, **kwargs)

    model.model.visual.forward = counted
    try:
        with torch.inference_mode():
            shared = I.shared_image_inputs(model, processor, texts, FRAMES)
            reference = model.get_image_features(full["pixel_values"], full["image_grid_thw"], return_dict=True)
    finally:
        model.model.visual.forward = forward
    assert len(set(full["attention_mask"].sum(1).tolist())) > 1  # the texts differ in length: padding is tested
    for key in ("input_ids", "attention_mask", "mm_token_type_ids", "image_grid_thw"):
        assert torch.equal(shared[key], full[key]), key
    assert "pixel_values" not in shared
    features = shared["mm_encoder_outputs"]["image"].pooler_output
    assert len(features) == len(reference.pooler_output) == 3 * len(TEXTS)
    assert all(torch.equal(a, b) for a, b in zip(features, reference.pooler_output, strict=True))
    # the shared path encodes one copy of the 3 frames; the processor's batch holds 4 copies
    assert calls == [full["pixel_values"].shape[0] // len(TEXTS), full["pixel_values"].shape[0]]

    # the common prefix (system turn, frames, the question up to the expression) prefilled once, at batch 1
    rows = [full["input_ids"][i][full["attention_mask"][i].bool()].tolist() for i in range(len(TEXTS))]
    common = next(k for k in range(min(map(len, rows))) if len({tuple(r[:k + 1]) for r in rows}) > 1)
    image_token = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    assert max(i for i, t in enumerate(rows[0]) if t == image_token) < common < min(map(len, rows))
    with torch.inference_mode():
        prefixed = I.shared_prefix_inputs(model, shared, len(FRAMES))
    assert prefixed["past_key_values"].get_seq_length() == common
    assert prefixed["input_ids"].shape == full["input_ids"].shape
    for i, row in enumerate(rows):  # the same tokens in order; the padding now sits after the prefix
        mask = prefixed["attention_mask"][i].bool()
        assert prefixed["input_ids"][i][mask].tolist() == row and mask[:common].all()
        assert prefixed["mm_token_type_ids"][i][mask].tolist() == full["mm_token_type_ids"][i][
            full["attention_mask"][i].bool()].tolist()


def test_a_videos_batch_generates_what_each_expression_generates_alone(vlm) -> None:
    model, processor = vlm
    queries = [I.Query(str(i), t, [0, 2, 4], FRAMES) for i, t in enumerate(TEXTS)]
    chats = [I.selection_messages(q) for q in queries]
    alone = [I.generate(model, processor, [chat], [FRAMES], 24)[0] for chat in chats]
    prefixed = []
    original_prefix = I.shared_prefix_inputs

    def spy_prefix(*args):
        prefixed.append(original_prefix(*args))
        return prefixed[-1]

    I.shared_prefix_inputs = spy_prefix
    try:
        together = I.generate(model, processor, chats, [FRAMES] * len(chats), 24)
    finally:
        I.shared_prefix_inputs = original_prefix
    assert len(prefixed) == 1 and prefixed[0] is not None  # generated from the shared prefix's cache
    assert together == alone
    assert all(alone) and len(set(alone)) > 1  # real, differing completions
    # answer_queries batches a video's queries in near-equal batches (4 queries, batch_size 3: 2 + 2)
    sizes = []
    original = I.generate

    def spy(model_, processor_, chats_, images_, max_new_tokens):
        sizes.append(len(chats_))
        return original(model_, processor_, chats_, images_, max_new_tokens)

    I.generate = spy
    try:
        replies = I.answer_queries(model, processor, queries, 24, batch_size=3)
    finally:
        I.generate = original
    assert sizes == [2, 2] and [r.response for r in replies] == alone


def test_identical_prompts_are_tracked_once_with_the_masks_of_each_prompt_alone(
        tiny_models, monkeypatch: pytest.MonkeyPatch) -> None:
    from stages.sam2_wrapper import load_video_predictor

    _, checkpoint, config = tiny_models
    predictor = load_video_predictor(str(checkpoint), str(config), device="cpu", share_frame_self_attention=True)
    rng = np.random.default_rng(3)
    frames = [np.asarray(Image.fromarray(rng.integers(0, 255, (6, 8, 3), dtype=np.uint8)).resize((64, 48)))
              for _ in range(5)]
    a, b = [4.0, 6.0, 30.0, 28.0], [34.0, 10.0, 60.0, 40.0]
    prompts = [(2, [a]), (2, [a, b]), (0, [a]), (2, [b]), (4, [])]
    tracked = []  # objects per SAM2 step
    step = predictor._run_single_frame_inference

    def counted(**kw):
        tracked.append(kw["batch_size"])
        return step(**kw)

    monkeypatch.setattr(predictor, "_run_single_frame_inference", counted)
    from sam2.modeling.memory_attention import MemoryAttentionLayer

    self_attention = []  # objects per run of SAM2's own memory-attention self-attention
    sa = MemoryAttentionLayer._forward_sa

    def counted_sa(self, tgt, query_pos):
        self_attention.append(len(tgt))
        return sa(self, tgt, query_pos)

    monkeypatch.setattr(MemoryAttentionLayer, "_forward_sa", counted_sa)
    together = predict_masks(predictor, frames, prompts)
    # distinct objects: a and b at frame 2, a at frame 0 → 2 objects × 5 steps + 1 object × 5 steps
    assert sorted(tracked) == [1] * 5 + [2] * 5
    assert self_attention == [1] * 8  # 2 × 4 tracked (non-prompted) frames, each once for all its objects
    tracked.clear()
    unshared = predict_masks(predictor, frames, prompts, share_prompts=False)
    assert sorted(tracked) == [1] * 5 + [4] * 5  # every box of every prompt
    for prompt, mask, other in zip(prompts, together, unshared, strict=True):
        alone = predict_masks(predictor, frames, [prompt])[0]
        assert mask.shape == (5, 48, 64) and np.array_equal(mask, alone) and np.array_equal(other, alone)
    assert together[0].any() and not together[4].any()
    assert np.array_equal(together[1], together[0] | together[3])


def test_shared_self_attention_equals_sam2s_on_every_row(tiny_models) -> None:
    from sam2.modeling.memory_attention import MemoryAttentionLayer

    from stages.sam2_wrapper import load_video_predictor
    from stages.sam2_wrapper.predictor import SharedFrameSelfAttentionLayer

    _, checkpoint, config = tiny_models
    predictor = load_video_predictor(str(checkpoint), str(config), device="cpu", share_frame_self_attention=True)
    layer = predictor.memory_attention.layers[0]
    assert all(type(each) is SharedFrameSelfAttentionLayer for each in predictor.memory_attention.layers)
    gen = torch.Generator().manual_seed(0)
    tgt = torch.randn(1, 64, layer.d_model, generator=gen).expand(5, -1, -1).contiguous()
    pos = torch.randn(1, 64, layer.d_model, generator=gen).expand(5, -1, -1).contiguous()
    other = tgt.clone()
    other[3] += 0.5  # rows that differ: SAM2's own code on the whole batch
    with torch.inference_mode():
        expected = MemoryAttentionLayer._forward_sa(layer, tgt, pos)
        expected_other = MemoryAttentionLayer._forward_sa(layer, other, pos)
        shared, shared_other = layer._forward_sa(tgt, pos), layer._forward_sa(other, pos)
    assert torch.equal(shared, expected) and torch.equal(shared_other, expected_other)
    assert not torch.equal(expected_other[3], expected_other[0])
