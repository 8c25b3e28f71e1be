"""SAM2, shared by the consistency reward and evaluation: load, and propagate boxes over frames.

Configs: `sam2.config` is either a config name inside the sam2 package (`configs/sam2.1/sam2.1_hiera_l.yaml`,
for the official checkpoints) or a vrsflow config file — YAML with `base` (a package config name) and
`overrides` (Hydra overrides), which is how the tiny random SAM2 is described.

`propagate_groups` is the workhorse: frames are encoded once (image encoder features cached for every
frame), then each group of boxes that share a keyframe is tracked forward and backward as the objects of
one inference state built on those cached features. Rollouts of one GRPO prompt differ only in keyframe
and boxes, so they share the encoding and are batched per keyframe; evaluation is one group.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import numpy as np
import torch
import yaml

_LOADER_LOCK = threading.Lock()


@dataclass(frozen=True)
class BoxGroup:
    """Boxes (x1, y1, x2, y2 in frame pixels) prompted on one keyframe; results are per box."""

    key_idx: int
    boxes: Sequence[Sequence[float]]


def resolve_config(config: str) -> tuple[str, list[str]]:
    """(package config name, hydra overrides) for a package config name or a vrsflow config file."""
    path = Path(config)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        spec = yaml.safe_load(path.read_text()) or {}
        if "base" in spec:
            return str(spec["base"]), [str(o) for o in spec.get("overrides", [])]
    return config, []


def pick_device(dtype: str = "auto") -> tuple[str, torch.dtype]:
    """cuda + bf16 when available (auto), else cpu + fp32."""
    if torch.cuda.is_available():
        return "cuda", torch.float32 if dtype == "float32" else torch.bfloat16
    return "cpu", torch.float32


def load_video_predictor(checkpoint: str, config: str, device: str | None = None):
    """A SAM2VideoPredictor from a checkpoint file ({"model": state_dict}) and a config."""
    from sam2.build_sam import build_sam2_video_predictor

    name, overrides = resolve_config(config)
    device = device or pick_device()[0]
    if not Path(checkpoint).is_file():
        raise FileNotFoundError(f"SAM2 checkpoint {checkpoint} not found (build it with the tiny_models stage "
                                f"or point sam2.checkpoint at a real sam2.1_hiera_*.pt)")
    return build_sam2_video_predictor(name, ckpt_path=checkpoint, device=device, hydra_overrides_extra=overrides)


def frames_tensor(frames: Sequence[np.ndarray], image_size: int,
                  mean: Sequence[float] = (0.485, 0.456, 0.406), std: Sequence[float] = (0.229, 0.224, 0.225)
                  ) -> torch.Tensor:
    """SAM2's input: frames resized to image_size², normalised, (T, 3, S, S) float32."""
    batch = torch.from_numpy(np.stack([np.asarray(f, dtype=np.uint8) for f in frames])).permute(0, 3, 1, 2)
    batch = torch.nn.functional.interpolate(batch.float() / 255.0, size=(image_size, image_size), mode="bilinear",
                                            align_corners=False, antialias=True)
    return (batch - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[:, None, None]


def _state(predictor, images: torch.Tensor, height: int, width: int) -> dict:
    """An inference state over in-memory frames (SAM2's init_state only reads files)."""
    import sam2.sam2_video_predictor as svp

    def loader(**_: object) -> tuple[torch.Tensor, int, int]:
        return images, height, width

    with _LOADER_LOCK, mock.patch.object(svp, "load_video_frames", loader), open(os.devnull, "w") as devnull, \
            contextlib.redirect_stderr(devnull):
        return predictor.init_state(video_path="<in-memory>", offload_video_to_cpu=True)


def encode_frames(predictor, state: dict) -> dict[int, tuple]:
    """Image-encoder features of every frame of a state (what a second state can reuse)."""
    features = {}
    for t in range(state["num_frames"]):
        predictor._get_image_feature(state, t, batch_size=1)
        features[t] = state["cached_features"][t]
    return features


@torch.inference_mode()
def propagate_groups(predictor, frames: Sequence[np.ndarray], groups: Sequence[BoxGroup],
                     threshold: float = 0.0) -> list[list[np.ndarray]]:
    """Masks (T, H, W bool) for every box of every group, tracked forward and backward from its keyframe.

    Frames are encoded once for all groups. A group without boxes gets no masks. Raises ValueError for a
    keyframe outside the frames.
    """
    # without the CUDA extension SAM2 warns on every call that hole filling is skipped (harmless)
    warnings.filterwarnings("ignore", message=".*(post-processing|fill_holes).*")
    height, width = frames[0].shape[:2]
    images = frames_tensor(frames, predictor.image_size)
    state = _state(predictor, images, height, width)
    features = encode_frames(predictor, state)
    out: list[list[np.ndarray]] = []
    for group in groups:
        if not 0 <= group.key_idx < len(frames):
            raise ValueError(f"keyframe {group.key_idx} outside {len(frames)} frames")
        if not group.boxes:
            out.append([])
            continue
        predictor.reset_state(state)  # one state reused: the frames stay, tracking starts afresh
        state["cached_features"] = dict(features)  # shared encoding: no image-encoder pass below
        for obj, box in enumerate(group.boxes):
            predictor.add_new_points_or_box(state, frame_idx=group.key_idx, obj_id=obj,
                                            box=np.asarray(box, dtype=np.float32))
        masks = np.zeros((len(group.boxes), len(frames), height, width), dtype=bool)
        for reverse in (False, True):
            with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):
                for t, obj_ids, logits in predictor.propagate_in_video(state, start_frame_idx=group.key_idx,
                                                                      reverse=reverse):
                    for i, obj in enumerate(obj_ids):
                        masks[obj, t] = (logits[i, 0] > threshold).cpu().numpy()
        out.append(list(masks))
    return out
