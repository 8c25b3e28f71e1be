"""Liger switch (`sft.liger`): auto is off without CUDA, on demands CUDA + Triton + liger-kernel, bad values are
refused in one line; and transformers' own Liger hook patches a PEFT-wrapped Qwen2.5-VL of this transformers (in a
fresh process: Liger's patches change transformers' Qwen2.5-VL module for the whole process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from stages.core.typed_config import ParamsError, build
from stages.models import kernels
from stages.params.sft import SftParams


@pytest.mark.parametrize(("cuda", "setting", "expected"), [
    (False, "auto", False), (False, "off", False), (True, "auto", True), (True, "on", True), (True, "off", False)])
def test_auto_follows_cuda_and_off_is_off(monkeypatch: pytest.MonkeyPatch, cuda: bool, setting: str,
                                          expected: bool) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(kernels, "QWEN25VL_KERNELS", "json")  # a liger-kernel that imports with this transformers
    assert kernels.resolve_liger(setting, "sft.liger") is expected


def test_on_without_cuda_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"^sft.liger: on needs a CUDA device, .*which this machine lacks"):
        kernels.resolve_liger("on", "sft.liger")
    with pytest.raises(ValueError, match=r"sft.liger: expected one of \['auto', 'on', 'off'\], got 'yes'"):
        kernels.resolve_liger("yes", "sft.liger")


def test_auto_is_off_on_this_cpu_machine() -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine: auto is on there")
    assert kernels.resolve_liger(SftParams().liger) is False and SftParams().liger == "auto"
    assert "a CUDA device" in kernels.liger_missing()


def test_the_params_block_refuses_an_unknown_setting() -> None:
    with pytest.raises(ParamsError, match=r"sft.liger: expected one of \['auto', 'on', 'off'\], got str 'yes'"):
        build(SftParams, {"liger": "yes"}, "sft")
    assert build(SftParams, {"liger": "off", "packing": True}, "sft").packing is True


PATCH_PROBE = """
import json, sys, torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen2_5_VLForConditionalGeneration
from transformers.integrations.liger import apply_liger_kernel
from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl
from stages.models.qwen_shapes import qwen25vl_3b_config
config = qwen25vl_3b_config(text_layers=1, vision_depth=1, vocab_size=512)
config.text_config.hidden_size, config.text_config.intermediate_size, config.text_config.head_dim = 64, 128, 4
config.vision_config.hidden_size, config.vision_config.intermediate_size = 32, 64
config.vision_config.num_heads, config.vision_config.out_hidden_size = 2, 64
model = get_peft_model(Qwen2_5_VLForConditionalGeneration(config), LoraConfig(r=2, target_modules=["q_proj"]))
apply_liger_kernel(model, None)
base = model.get_base_model()
layer = base.model.language_model.layers[0]
print(json.dumps({"mlp": layer.mlp._get_name(), "norm": layer.input_layernorm._get_name(),
                  "forward": base.forward.__func__.__module__,
                  "rope": modeling_qwen2_5_vl.apply_multimodal_rotary_pos_emb.__module__}))
"""


def test_transformers_applies_liger_to_a_peft_qwen25vl_where_liger_imports() -> None:
    # auto/on look at whether Liger's Qwen2.5-VL module imports with this transformers; the probe shows the hook
    # then patches the model, or fails exactly as that check says (liger-kernel 0.8.5 with transformers 5.24 does)
    pytest.importorskip("liger_kernel")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", PATCH_PROBE], cwd=root, capture_output=True, text=True, timeout=300)
    incompatible = [m for m in kernels.liger_missing() if m.startswith("a liger-kernel whose")]
    if incompatible:
        assert proc.returncode != 0 and "ImportError" in proc.stderr and kernels.QWEN25VL_KERNELS.replace(
            ".", "/") in proc.stderr
        return
    assert proc.returncode == 0, proc.stderr[-2000:]
    patched = json.loads(proc.stdout.strip().splitlines()[-1])
    assert patched["mlp"] == "LigerSwiGLUMLP" and patched["norm"] == "LigerRMSNorm"
    assert patched["forward"].startswith(kernels.QWEN25VL_KERNELS)
    assert patched["rope"].startswith("liger_kernel.")
