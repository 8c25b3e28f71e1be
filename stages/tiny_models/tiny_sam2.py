"""A micro SAM2 (hiera-t shrunk by Hydra overrides) with random weights, saved as a checkpoint file
({"model": state_dict}, the official format) plus a vrsflow config file naming the base config and
overrides, so `stages.sam2_wrapper.load_video_predictor` loads it exactly like a real checkpoint."""

from __future__ import annotations

import typing
from collections.abc import Sequence
from pathlib import Path

import torch
import yaml

from stages.params.tiny_models import Sam2EncoderWidth

BASE_CONFIG = "configs/sam2.1/sam2.1_hiera_t.yaml"
# d_model stays 256 (prompt encoder / mask decoder width); a global-attention block must not be the
# first block of a stage (verified recipe).
MICRO_OVERRIDES = [
    "++model.image_encoder.trunk.embed_dim=16",
    "++model.image_encoder.trunk.num_heads=1",
    "++model.image_encoder.trunk.stages=[1,1,2,1]",
    "++model.image_encoder.trunk.global_att_blocks=[3]",
    "++model.image_encoder.neck.backbone_channel_list=[128,64,32,16]",
    "++model.memory_attention.num_layers=1",
    "++model.memory_attention.layer.dim_feedforward=256",
    "++model.memory_encoder.fuser.num_layers=1",
    "++model.num_maskmem=3",
]


# The image encoder's width: the Hiera trunk's channels in its first stage (doubled at each of the four stages, one
# head per 16 channels); the widths params allow (16 the micro default; 32: 7.1 M parameters, 13.6 MiB in bf16).
ENCODER_WIDTHS: tuple[int, ...] = typing.get_args(Sam2EncoderWidth)


def encoder_overrides(width: int) -> list[str]:
    """The Hydra overrides of an image encoder `width` channels wide; none for the micro default (16), so that the
    default's config file, and with it every lineage that names it, stays as it was."""
    if width not in ENCODER_WIDTHS:
        raise ValueError(f"tiny SAM2 encoder width: one of {list(ENCODER_WIDTHS)}, got {width}")
    if width == ENCODER_WIDTHS[0]:
        return []
    return [f"++model.image_encoder.trunk.embed_dim={width}", f"++model.image_encoder.trunk.num_heads={width // 16}",
            f"++model.image_encoder.neck.backbone_channel_list=[{8 * width},{4 * width},{2 * width},{width}]"]


def build_tiny_sam2(out_dir: Path, image_size: int, seed: int, extra_overrides: Sequence[str] = (),
                    encoder_width: int = ENCODER_WIDTHS[0]) -> tuple[Path, Path]:
    """Write `model.pt` and `config.yaml` into out_dir; returns their paths. `encoder_width` is the image encoder's
    (`ENCODER_WIDTHS`); `extra_overrides` (Hydra `++key=value`, applied after the micro ones) change the
    architecture further, e.g. the memory attention's depth for an experiment."""
    from sam2.build_sam import build_sam2

    overrides = [f"++model.image_size={image_size}", *MICRO_OVERRIDES, *encoder_overrides(encoder_width),
                 *extra_overrides]
    torch.manual_seed(seed)
    model = build_sam2(BASE_CONFIG, ckpt_path=None, device="cpu", hydra_overrides_extra=overrides)
    out_dir.mkdir(parents=True, exist_ok=True)
    checkpoint, config = out_dir / "model.pt", out_dir / "config.yaml"
    torch.save({"model": model.state_dict()}, checkpoint)
    config.write_text(yaml.safe_dump({"base": BASE_CONFIG, "overrides": overrides}, sort_keys=False))
    return checkpoint, config
