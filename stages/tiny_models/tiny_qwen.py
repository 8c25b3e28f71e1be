"""A tiny, randomly initialised Qwen2.5-VL saved in the real on-disk format (config, weights, tokenizer
with the Qwen chat template, processor), so the loading code is the same as for a real checkpoint.

The tokenizer is a small byte-level BPE trained on text the pipeline actually produces (the question
template, template-teacher traces, answers), keeping the vocabulary small: on CPU, TRL's GRPO spends
most of its time in log-probs over the vocabulary (REFERENCE.md §4). Gotchas from the verified recipe:
mrope_section sums to head_dim/2, the vision out_hidden_size equals the text hidden size, special
token ids match the tokenizer, `dtype=` not `torch_dtype=`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import (
    PreTrainedTokenizerFast,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2_5_VLProcessor,
    Qwen2VLImageProcessor,
    Qwen2VLVideoProcessor,
)
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX as QWEN2_PRETOKENIZE_REGEX

from stages.params.tiny_models import TinyModelsParams
from stages.tasks import get_task
from stages.teacher.prompts import render_cot_prompt
from stages.teacher.template_teacher import write_trace

# Qwen2-VL / Qwen2.5-VL chat template as shipped with the official checkpoints.
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                  "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]


def training_corpus(seed: int = 0, n: int = 400) -> list[str]:
    """Text like what the model will read and write: questions, three-step traces, answers."""
    rng = np.random.default_rng(seed)
    words = ["red", "green", "blue", "yellow", "orange", "white", "purple", "striped", "dotted", "circle", "square",
             "triangle", "diamond", "object", "moves", "fastest", "left", "right", "stops", "leaves", "hidden"]
    names = [" ".join(["the", *rng.choice(words, size=3)]) for _ in range(200)]
    texts = ["You are a helpful assistant.", "system", "user", "assistant", "<think>", "</think>", "<answer>",
             "</answer>", render_cot_prompt("veason/v1/style_a", expression="x", n_frames=6, keyframe_timestamp=3,
                                            candidate_timestamp=3)]
    for _ in range(n):
        expression = names[int(rng.integers(len(names)))]
        timestamps = sorted(int(t) for t in rng.choice(40, size=6, replace=False))
        key = int(rng.choice(timestamps))
        size = 112
        boxes = []
        for _ in timestamps:
            x, y = rng.integers(0, size - 20, size=2)
            w, h = rng.integers(8, 20, size=2)
            boxes.append([[float(x), float(y), float(x + w), float(y + h)]])
        context = {"expression": expression, "timestamps": timestamps, "keyframe_timestamp": key, "train_size": size,
                   "boxes": boxes, "union_areas": [float(rng.integers(50, 400)) for _ in timestamps], "n_instances": 1}
        texts.append(get_task("veason").question(expression, timestamps))
        texts.append(write_trace(context))
        texts.append(json.dumps({"keyframe_timestamp": key, "bbox_2d_list": [[int(v) for v in boxes[0][0]]]}))
        texts.append(" ".join(f"<{t}s>" for t in timestamps))
    return texts


def build_tokenizer(vocab_size: int, seed: int, digits: bool = False) -> PreTrainedTokenizerFast:
    """A byte-level BPE (every byte encodable) with Qwen's special tokens and chat template.

    `digits`: Qwen2's own pre-tokenizer (NFC, Qwen2's split regex, then byte-level without GPT-2's regex), which
    writes every number digit by digit as a real Qwen2.5 does; otherwise GPT-2's byte-level regex, which makes each
    number seen in training one token (with and without its leading space). The tiny model learns to box one
    rectangle about twice as fast with digits (research/issue24/results/grounding_probe.json, D2 against P3), but
    the default SFT then stops teaching the answer format (research/issue24/results/tokenizer.json): the default
    keeps whole numbers.
    """
    tokenizer = Tokenizer(models.BPE())
    if digits:
        tokenizer.normalizer = normalizers.NFC()
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(training_corpus(seed), trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                 additional_special_tokens=SPECIAL_TOKENS[1:], model_max_length=32768)
    hf.chat_template = CHAT_TEMPLATE
    return hf


def build_tiny_qwen(params: TinyModelsParams, out_dir: Path, digits: bool = False) -> int:
    """Build and save model + processor into `out_dir`; returns the parameter count."""
    tokenizer = build_tokenizer(params.vocab_size, params.seed, digits)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    pixels = {"size": {"shortest_edge": 28 * 28, "longest_edge": params.max_image_side ** 2},
              "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2}
    processor = Qwen2_5_VLProcessor(image_processor=Qwen2VLImageProcessor(**pixels), tokenizer=tokenizer,
                                    video_processor=Qwen2VLVideoProcessor(**pixels), chat_template=CHAT_TEMPLATE)
    half = params.hidden_size // params.num_heads // 2
    mrope = [half - 2 * (half // 3), half // 3, half // 3]  # temporal, height, width: sums to head_dim / 2
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tokenizer), "hidden_size": params.hidden_size,
            "intermediate_size": 2 * params.hidden_size, "num_hidden_layers": params.num_layers,
            "num_attention_heads": params.num_heads, "num_key_value_heads": max(1, params.num_heads // 2),
            "max_position_embeddings": 4096,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": mrope},
            "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
        },
        vision_config={
            "depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 4,
            "out_hidden_size": params.hidden_size, "patch_size": 14, "spatial_merge_size": 2,
            "temporal_patch_size": 2, "window_size": 112, "fullatt_block_indexes": [1], "tokens_per_second": 2,
        },
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    torch.manual_seed(params.seed)
    model = Qwen2_5_VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return sum(p.numel() for p in model.parameters())
