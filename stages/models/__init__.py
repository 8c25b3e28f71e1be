"""Models: build the tiny random Qwen2.5-VL and SAM2 (the `tiny_models` stage), load any local checkpoint.

The heavy imports (torch, transformers) are made where they are used: every process that imports a module of this
package imports this file first, and some need neither (a SAM2 seed's process has no use for transformers; a stage
that only starts torchrun, `stages.models.launch`, no use for torch).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stages.core.report import StageReport
    from stages.params.tiny_models import TinyModelsParams

log = logging.getLogger(__name__)


def build_tiny_models(params: TinyModelsParams, out_dir: Path) -> StageReport:
    """Write models/tiny/qwen25vl (HF format) and models/tiny/sam2 (checkpoint + config)."""
    import torch

    from stages.core.lineage import write_lineage
    from stages.core.report import StageReport, summary_line
    from stages.models.tiny_qwen import build_tiny_qwen
    from stages.models.tiny_sam2 import build_tiny_sam2

    out_dir = Path(out_dir)
    n_qwen = build_tiny_qwen(params, out_dir / "qwen25vl")
    checkpoint, _ = build_tiny_sam2(out_dir / "sam2", params.sam2_image_size, params.seed,
                                    encoder_width=params.sam2_encoder_width)
    n_sam2 = sum(v.numel() for v in torch.load(checkpoint, weights_only=True)["model"].values())
    counts = {"qwen25vl_parameters": n_qwen, "sam2_parameters": n_sam2}
    write_lineage(out_dir, "tiny_models", params, seed=params.seed, counts=counts, code_modules=["stages.models"])
    log.info(summary_line("tiny models", counts))  # one short line; all values in the metrics file
    return StageReport("tiny_models", metrics=counts)


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
