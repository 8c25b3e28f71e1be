"""The `tiny_models` stage: build the tiny random Qwen2.5-VL (`tiny_qwen`) and SAM2 (`tiny_sam2`) the default
pipeline starts from, under models/tiny."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from stages.core.lineage import write_lineage
from stages.core.report import StageReport, summary_line
from stages.params.tiny_models import TinyModelsParams
from stages.tiny_models.tiny_qwen import build_tiny_qwen
from stages.tiny_models.tiny_sam2 import build_tiny_sam2

log = logging.getLogger(__name__)


def build_tiny_models(params: TinyModelsParams, out_dir: Path) -> StageReport:
    """Write models/tiny/qwen25vl (HF format) and models/tiny/sam2 (checkpoint + config)."""
    out_dir = Path(out_dir)
    n_qwen = build_tiny_qwen(params, out_dir / "qwen25vl")
    checkpoint, _ = build_tiny_sam2(out_dir / "sam2", params.sam2_image_size, params.seed,
                                    encoder_width=params.sam2_encoder_width)
    n_sam2 = sum(v.numel() for v in torch.load(checkpoint, weights_only=True)["model"].values())
    counts = {"qwen25vl_parameters": n_qwen, "sam2_parameters": n_sam2}
    write_lineage(out_dir, "tiny_models", params, seed=params.seed, counts=counts,
                  code_modules=["stages.tiny_models"])
    log.info(summary_line("tiny models", counts))  # one short line; all values in the metrics file
    return StageReport("tiny_models", metrics=counts)
