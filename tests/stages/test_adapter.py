"""The adapters the project publishes (SFT, TRL GRPO) load with PEFT's own auto class from a working directory
outside the project, and that model merged equals the stage's merged weights (tiny Qwen2.5-VL, CPU, seconds)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from stages.params.grpo import GrpoParams
from stages.params.model import ModelParams
from stages.params.sft import SftParams
from stages.params.tiny_models import TinyModelsParams

BASE = "models/tiny/qwen25vl"  # relative, as params.yaml's model.path is


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from stages.tiny_models.tiny_qwen import build_tiny_qwen

    folder = tmp_path_factory.mktemp("project")
    build_tiny_qwen(TinyModelsParams(vocab_size=512, hidden_size=64, num_layers=1, max_image_side=56), folder / BASE)
    return folder


def trained_adapter(model, out: Path) -> None:
    """What a stage's trainer saves of a PEFT model: its LoRA weights, made non-zero as training makes them."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "lora_B" in name:  # PEFT starts B at zero (the adapter a no-op): give it weights, as training would
                weight.copy_(0.05 * torch.randn(weight.shape, generator=generator))
    model.save_pretrained(out / "adapter")


def load_elsewhere(adapter: Path, tmp_path: Path):
    """`peft.AutoPeftModel.from_pretrained(adapter)` with the working directory outside the project."""
    from peft import AutoPeftModel

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cwd = os.getcwd()
    os.chdir(elsewhere)
    try:
        return AutoPeftModel.from_pretrained(str(adapter.resolve()))
    finally:
        os.chdir(cwd)


def assert_same_weights(merged_by_peft, merged_dir: Path) -> None:
    from transformers import AutoModelForImageTextToText

    ours = AutoModelForImageTextToText.from_pretrained(merged_dir, dtype=torch.float32, local_files_only=True)
    theirs = merged_by_peft.state_dict()
    mine = ours.state_dict()
    assert set(theirs) == set(mine)
    for name, tensor in mine.items():
        torch.testing.assert_close(theirs[name].float(), tensor.float(), rtol=0, atol=0, msg=name)


def test_sft_adapter_loads_with_peft_auto_class_from_anywhere(project: Path, tmp_path: Path, monkeypatch) -> None:
    from stages import sft
    from stages.models import load_vlm

    out = project / "models" / "sft"
    params = SftParams(lora_r=4, lora_alpha=8)
    monkeypatch.chdir(project)  # the stage runs in the project, with model.path relative
    base, _ = load_vlm(BASE, "float32", "cpu")
    trained_adapter(sft._trainable(base, params), out)  # the stage's own LoRA set-up
    sft._merge(ModelParams(path=BASE, dtype="float32"), out)
    monkeypatch.undo()
    config = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str((project / BASE).resolve()) and config["task_type"] is None
    assert config["auto_mapping"]["base_model_class"] == "Qwen2_5_VLForConditionalGeneration"
    model = load_elsewhere(out / "adapter", tmp_path)
    merged = model.merge_and_unload()
    assert_same_weights(merged, out / "merged")
    base, _ = load_vlm(project / BASE, "float32", "cpu")
    changed = [n for n, t in base.state_dict().items() if not torch.equal(t, merged.state_dict()[n])]
    assert changed and all("visual" not in n for n in changed)  # the adapter is in, on the language model only


def test_trl_grpo_adapter_loads_with_peft_auto_class_from_anywhere(project: Path, tmp_path: Path,
                                                                   monkeypatch) -> None:
    from peft import LoraConfig, get_peft_model

    from stages.grpo import trl_engine
    from stages.models import load_vlm
    from stages.models.trainable import lora_targets

    grpo = GrpoParams(lora_r=4, lora_alpha=8)
    out = project / "models" / "grpo"
    # the LoraConfig train_trl gives GRPOTrainer
    config = LoraConfig(r=grpo.lora_r, lora_alpha=grpo.lora_alpha, lora_dropout=0.0, task_type="CAUSAL_LM",
                        target_modules=lora_targets(grpo.target_modules, grpo.train_vision))
    trained_adapter(get_peft_model(load_vlm(project / BASE, "float32", "cpu")[0], config), out)
    monkeypatch.chdir(project)
    trl_engine._merge(BASE, out)
    monkeypatch.undo()
    written = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert written["base_model_name_or_path"] == str((project / BASE).resolve()) and written["task_type"] is None
    assert_same_weights(load_elsewhere(out / "adapter", tmp_path).merge_and_unload(), out / "merged")


def test_publish_keeps_a_hub_id_and_refuses_a_folder_without_adapter(tmp_path: Path) -> None:
    from stages.models.adapter import publish_adapter

    saved = {"base_model_name_or_path": "x", "task_type": "CAUSAL_LM"}
    (tmp_path / "adapter_config.json").write_text(json.dumps(saved))
    written = publish_adapter(tmp_path, "Qwen/Qwen2.5-VL-3B-Instruct", torch.nn.Linear)
    assert written["base_model_name_or_path"] == "Qwen/Qwen2.5-VL-3B-Instruct"
    assert written["auto_mapping"] == {"base_model_class": "Linear", "parent_library": "torch.nn.modules.linear"}
    with pytest.raises(FileNotFoundError, match="no adapter config"):
        publish_adapter(tmp_path / "none", "Qwen/Qwen2.5-VL-3B-Instruct", torch.nn.Linear)
