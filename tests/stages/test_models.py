"""tiny_models stage and model loading: real on-disk formats, deterministic builds, offline loading."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from stages.models import load_vlm
from stages.params.tiny_models import TinyModelsParams
from stages.tiny_models import build_tiny_models
from stages.tiny_models.tiny_qwen import SPECIAL_TOKENS

PARAMS = TinyModelsParams(vocab_size=512)  # smaller BPE: faster to train, same code path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)  # two threads wait on each other beside the other worker (tests/conftest.py)
    out = tmp_path_factory.mktemp("tiny")
    build_tiny_models(PARAMS, out)
    return out


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_on_disk_layout_is_a_real_checkpoint_layout(tiny: Path) -> None:
    qwen = {p.name for p in (tiny / "qwen25vl").iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= qwen
    assert qwen & {"processor_config.json", "preprocessor_config.json"}  # the name depends on the transformers version
    saved = torch.load(tiny / "sam2" / "model.pt", weights_only=True)
    assert set(saved) == {"model"} and all(isinstance(v, torch.Tensor) for v in saved["model"].values())
    config = yaml.safe_load((tiny / "sam2" / "config.yaml").read_text())
    assert config["base"].startswith("configs/sam2") and any("image_size" in o for o in config["overrides"])
    assert (tiny / "lineage.json").is_file()


def test_build_is_deterministic(tiny: Path, tmp_path: Path) -> None:
    build_tiny_models(PARAMS, tmp_path)
    assert _digest(tmp_path / "qwen25vl") == _digest(tiny / "qwen25vl")
    assert _digest(tmp_path / "sam2") == _digest(tiny / "sam2")


def test_load_vlm_runs_a_multi_image_chat(tiny: Path) -> None:
    model, processor = load_vlm(tiny / "qwen25vl", "float32", "cpu")
    tokenizer = processor.tokenizer
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    assert len(set(ids.values())) == len(SPECIAL_TOKENS)  # every special token is one token
    assert model.config.image_token_id == ids["<|image_pad|>"]
    assert model.config.vision_start_token_id == ids["<|vision_start|>"]
    assert model.generation_config.eos_token_id == ids["<|im_end|>"] == tokenizer.eos_token_id
    assert model.get_output_embeddings().weight.shape[0] == len(tokenizer)

    messages = [{"role": "user", "content": [{"type": "text", "text": "<0s>"}, {"type": "image"},
                                             {"type": "text", "text": "<2s>"}, {"type": "image"},
                                             {"type": "text", "text": "Where is the red box?"}]}]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                    "<0s><|vision_start|><|image_pad|><|vision_end|><2s><|vision_start|><|image_pad|><|vision_end|>"
                    "Where is the red box?<|im_end|>\n<|im_start|>assistant\n")
    images = [Image.fromarray(np.full((112, 112, 3), 40 * i, np.uint8)) for i in range(2)]
    inputs = processor(text=[text], images=[images], return_tensors="pt")
    # 112 px / 14 px patches = 8 × 8 patches, merged 2 × 2 → 16 tokens per image
    assert int((inputs["input_ids"] == ids["<|image_pad|>"]).sum()) == 2 * 16
    with torch.no_grad():
        logits = model(**inputs).logits
    assert logits.shape == (1, inputs["input_ids"].shape[1], len(tokenizer)) and torch.isfinite(logits).all()


def test_tokenizer_round_trips_the_answer_format(tiny: Path) -> None:
    _, processor = load_vlm(tiny / "qwen25vl", "float32", "cpu")
    text = '<think>Step 1: the red box moves left.</think><answer>{"keyframe_timestamp": 4, ' \
           '"bbox_2d_list": [[10, 12, 40, 56]]}</answer>'
    ids = processor.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert processor.tokenizer.decode(ids) == text
    assert len(ids) < len(text) / 2  # the BPE was trained on this kind of text: it compresses it


def test_load_vlm_names_a_folder_without_a_model(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        load_vlm(tmp_path, "float32", "cpu")


def test_tiny_sam2_loads_through_the_sam2_builder(tiny: Path) -> None:
    from sam2.build_sam import build_sam2_video_predictor

    config = yaml.safe_load((tiny / "sam2" / "config.yaml").read_text())
    # sam2's _load_checkpoint raises on any missing or unexpected key: a clean load proves the shapes agree
    predictor = build_sam2_video_predictor(config["base"], str(tiny / "sam2" / "model.pt"), device="cpu",
                                           hydra_overrides_extra=config["overrides"])
    assert predictor.image_size == PARAMS.sam2_image_size
    saved = torch.load(tiny / "sam2" / "model.pt", weights_only=True)["model"]
    state = predictor.state_dict()
    assert all(torch.equal(state[k], v) for k, v in saved.items())


def test_params_change_the_model(tmp_path: Path) -> None:
    build_tiny_models(replace(PARAMS, hidden_size=64, num_layers=1), tmp_path)
    model, _ = load_vlm(tmp_path / "qwen25vl", "float32", "cpu")
    assert model.config.text_config.hidden_size == 64 and model.config.text_config.num_hidden_layers == 1


def test_resume_skips_a_checkpoint_cut_short_by_a_kill(tmp_path) -> None:
    """A SIGTERM during a save leaves `checkpoint-N` without its trainer_state.json (written last): resuming it
    fails in transformers, so the newest complete checkpoint is the one resumed."""
    from stages.models.trainable import last_complete_checkpoint

    assert last_complete_checkpoint(tmp_path) is None
    for step, state in [(9, '{"global_step": 9}'), (10, '{"global_step": 10}'), (20, None), (30, '{"global_st')]:
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "model.safetensors").write_bytes(b"x")
        if state is not None:
            (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(state)
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-10")  # numeric order: 10 after 9
    (tmp_path / "checkpoint-20" / "trainer_state.json").write_text('{"global_step": 20}')
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-20")


def test_the_default_encoder_width_keeps_the_committed_sam2s_config(tmp_path: Path) -> None:
    # the committed pre-trained SAM2 copied its config from a default tiny SAM2: a default build must still write it
    # byte for byte, or every lineage that hashes the config would name another model
    from stages.tiny_models.tiny_sam2 import build_tiny_sam2

    _, config = build_tiny_sam2(tmp_path, 256, 0)
    committed = Path(__file__).resolve().parents[2] / "models" / "pretrain_sam2" / "config.yaml"
    assert config.read_bytes() == committed.read_bytes()


def test_a_wider_encoder_builds_through_sam2_and_fits_a_committed_file(tmp_path: Path) -> None:
    from sam2.build_sam import build_sam2_video_predictor

    build_tiny_models(replace(PARAMS, sam2_encoder_width=32), tmp_path)  # at the default's input size, 256
    config = yaml.safe_load((tmp_path / "sam2" / "config.yaml").read_text())
    predictor = build_sam2_video_predictor(config["base"], str(tmp_path / "sam2" / "model.pt"), device="cpu",
                                           hydra_overrides_extra=config["overrides"])
    trunk = predictor.image_encoder.trunk
    assert trunk.patch_embed.proj.out_channels == 32  # the first stage's channels, doubled at each later one
    assert [block.dim_out for block in trunk.blocks][-1] == 256
    assert trunk.blocks[0].attn.num_heads == 2
    saved = sum(v.numel() for v in torch.load(tmp_path / "sam2" / "model.pt", weights_only=True)["model"].values())
    assert saved == 7_138_818 and 2 * saved < 16 * 2**20  # in bf16, under the 16 MiB a committed file may take


@pytest.mark.parametrize("width", [24, 48, 32.0])
def test_an_encoder_width_other_than_16_or_32_is_refused_in_one_line(width) -> None:
    from stages.core.typed_config import ParamsError, build

    with pytest.raises(ParamsError, match="sam2_encoder_width") as err:
        build(TinyModelsParams, {"sam2_encoder_width": width}, "tiny_models")
    assert "\n" not in str(err.value)
