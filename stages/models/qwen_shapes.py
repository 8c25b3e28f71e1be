"""Qwen2.5-VL-3B-Instruct's shapes (its config.json), for models with random weights: the GPU benchmarks build the
whole 3B model from them, the CPU tests a few layers of it (the hub is not reachable, so no weights are loaded).
"""

from __future__ import annotations

QWEN25VL_3B_TEXT = {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
                    "num_attention_heads": 16, "num_key_value_heads": 2, "max_position_embeddings": 128000,
                    "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0,
                                        "mrope_section": [16, 24, 24]},
                    "bos_token_id": 151643, "eos_token_id": 151645, "pad_token_id": 151643, "tie_word_embeddings": True}
QWEN25VL_3B_VISION = {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
                      "out_hidden_size": 2048, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
                      "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2}
IMAGE_TOKEN, VIDEO_TOKEN, VISION_START, VISION_END = 151655, 151656, 151652, 151653


def shift_limit() -> int:
    """The smallest vocabulary that still holds the 3B's special tokens (the ids from its first special up)."""
    return QWEN25VL_3B_TEXT["vocab_size"] - QWEN25VL_3B_TEXT["bos_token_id"]


def qwen25vl_3b_config(text_layers: int = 36, vision_depth: int = 32, vocab_size: int = 151936):
    """A `Qwen2_5_VLConfig` of the 3B's shapes with `text_layers` decoder layers and `vision_depth` vision blocks
    (the last of them full-attention, the others windowed, as in the 3B), sdpa attention.

    `vocab_size` < 151936 keeps the 3B's layout of special tokens at the top of a shorter vocabulary (the image,
    video and vision start/end ids move down with it; read them from the config)."""
    from transformers import Qwen2_5_VLConfig

    shift = QWEN25VL_3B_TEXT["vocab_size"] - vocab_size
    if not 0 <= shift < QWEN25VL_3B_TEXT["bos_token_id"]:
        raise ValueError(f"vocab_size {vocab_size}: must hold the 3B's special tokens (> {shift_limit()}) and not "
                         f"exceed {QWEN25VL_3B_TEXT['vocab_size']}")
    text = dict(QWEN25VL_3B_TEXT, num_hidden_layers=text_layers, vocab_size=vocab_size)
    if shift:
        text.update(bos_token_id=0, eos_token_id=1, pad_token_id=0)
    full = [i for i in QWEN25VL_3B_VISION["fullatt_block_indexes"] if i < vision_depth] or [vision_depth - 1]
    vision = dict(QWEN25VL_3B_VISION, depth=vision_depth, fullatt_block_indexes=full)
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, image_token_id=IMAGE_TOKEN - shift,
                              video_token_id=VIDEO_TOKEN - shift, vision_start_token_id=VISION_START - shift,
                              vision_end_token_id=VISION_END - shift, tie_word_embeddings=True)
    config._attn_implementation = "sdpa"
    return config
