"""Models: what the training and inference stages share — load a local checkpoint, LoRA targets, adapters,
batches, kernels, launched process groups, seed processes, resumable training state. Not a stage (the tiny random
models are the `tiny_models` stage's, `stages.tiny_models`).

The heavy imports (torch, transformers) are made where they are used: every process that imports a module of this
package imports this file first, and some need neither (a SAM2 seed's process has no use for transformers; a stage
that only starts torchrun, `stages.models.launch`, no use for torch).
"""

from __future__ import annotations

from pathlib import Path


def load_vlm(path: str | Path, dtype: str = "auto", device: str | None = None, rope_parameters: dict | None = None):
    """(model, processor) from a local Qwen2.5-VL folder, offline. bf16 on GPU and fp32 on CPU by default.

    `rope_parameters` (keys of the language model's `rope_parameters`, e.g. rope_theta, mrope_section) replace the
    folder's: the pretrain stage gives its random base another positional scheme (rope has no weights).
    """
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}.get(
        dtype, torch.bfloat16 if device == "cuda" else torch.float32)
    if not (Path(path) / "config.json").is_file():
        raise FileNotFoundError(f"{path}: no config.json — not a model folder (model.path in params.yaml)")
    processor = AutoProcessor.from_pretrained(path, local_files_only=True)
    extra = {}
    if rope_parameters:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
        config.text_config.rope_parameters = {**config.text_config.rope_parameters, **rope_parameters}
        extra["config"] = config
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch_dtype, local_files_only=True,
                                                        **extra).to(device)
    return model, processor
