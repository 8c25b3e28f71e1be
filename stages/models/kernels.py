"""Fused GPU kernels for training: whether Liger's Triton kernels can run here, and the `auto | on | off` switch.

Liger (the `liger-kernel` package) replaces Qwen2.5-VL's RMSNorm, SwiGLU MLP and M-RoPE with Triton kernels and
its loss with a fused linear cross-entropy that never materialises the logits. transformers applies them itself
(`TrainingArguments(use_liger_kernel=True)` → `transformers.integrations.liger.apply_liger_kernel`, PEFT models
included). Triton kernels run on CUDA only, so `auto` turns them on where CUDA, Triton and liger-kernel are all
present and off elsewhere (the CPU default); `on` demands them.
"""

from __future__ import annotations

import importlib
import importlib.util

import torch

LIGER_SETTINGS = ("auto", "on", "off")
QWEN25VL_KERNELS = "liger_kernel.transformers.model.qwen2_5_vl"  # what apply_liger_kernel imports for Qwen2.5-VL


def liger_missing() -> list[str]:
    """What Liger's kernels need that this process lacks: a CUDA device, Triton, liger-kernel ([] = all there)."""
    missing = [] if torch.cuda.is_available() else ["a CUDA device"]
    for module, name in (("triton", "Triton"), ("liger_kernel", "liger-kernel")):
        if importlib.util.find_spec(module) is None:
            missing.append(name)
    if "liger-kernel" not in missing:
        try:  # liger-kernel 0.8.5 imports a Qwen2.5-VL output class that transformers 5.24 no longer defines
            importlib.import_module(QWEN25VL_KERNELS)
        except ImportError as error:
            missing.append(f"a liger-kernel whose Qwen2.5-VL kernels import with this transformers ({error})")
    return missing


def resolve_liger(setting: str, key: str = "liger") -> bool:
    """Whether to use Liger's kernels for the switch `setting` (`auto`, `on` or `off`).

    Raises:
        ValueError: an unknown setting, or `on` where a requirement is missing (one line naming `key`).
    """
    if setting not in LIGER_SETTINGS:
        raise ValueError(f"{key}: expected one of {list(LIGER_SETTINGS)}, got {setting!r}")
    if setting == "off":
        return False
    missing = liger_missing()
    if setting == "on" and missing:
        raise ValueError(f"{key}: on needs {', '.join(missing)}, which this machine lacks (auto turns it off here)")
    return not missing
