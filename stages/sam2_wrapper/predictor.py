"""vrsflow's SAM2 classes, instantiated by sam2's own builder through its config (`model._target_`,
`model.memory_attention.layer._target_`: Hydra overrides `load_video_predictor` passes), not patched in.

- `VideoPredictor` / `VideoPredictorVOS`: SAM2's video predictors (the plain one and SAM2.1's compiled one) with
  two additions: an inference state over frames already in memory (`init_state_from_frames`; SAM2's `init_state`
  reads only a JPEG folder or a video file), and the autocast dtype propagation runs under (`autocast_dtype`).
- `SharedFrameSelfAttentionLayer`: SAM2's memory-attention layer whose self-attention runs once for a batch whose
  rows are copies of one frame's features (evaluation tracks many objects on one frame; see the class).

Nothing else of SAM2 changes: tracking, the memory bank and every module's weights are SAM2's own.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from sam2.modeling.memory_attention import MemoryAttentionLayer
from sam2.sam2_video_predictor import SAM2VideoPredictor, SAM2VideoPredictorVOS

VIDEO_PREDICTOR = f"{__name__}.VideoPredictor"
VIDEO_PREDICTOR_VOS = f"{__name__}.VideoPredictorVOS"
SHARED_FRAME_LAYER = f"{__name__}.SharedFrameSelfAttentionLayer"


class _InMemoryFrames:
    """`init_state_from_frames` and `autocast_dtype` for a SAM2 video predictor (mixed in first)."""

    def __init__(self, *args, autocast_dtype: str | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # bf16 on CUDA as SAM2's own demo runs it; None: no autocast (the CPU, or float32 asked for)
        self.autocast_dtype = getattr(torch, autocast_dtype) if autocast_dtype else None

    @torch.inference_mode()
    def init_state_from_frames(self, images, height: int, width: int, warm_up: bool = True) -> dict:
        """An inference state over frames in memory: what SAM2 1.1's `init_state(video_path,
        offload_video_to_cpu=True)` builds from a folder of the same frames (tests/stages/test_sam2_wrapper.py holds
        the two to each other).

        Args:
            images: (T, 3, S, S) float frames at the model's input size, normalised as SAM2's loader does, or a
                sequence that makes them when indexed (`FrameImages`).
            height, width: the video's own size (masks come back at it).
            warm_up: encode frame 0 now, as `init_state` does (False: the caller fills `cached_features`).
        """
        state: dict = {
            "images": images,
            "num_frames": len(images),
            "offload_video_to_cpu": True,
            "offload_state_to_cpu": False,
            "video_height": height,
            "video_width": width,
            "device": self.device,
            "storage_device": self.device,
            "point_inputs_per_obj": {},
            "mask_inputs_per_obj": {},
            "cached_features": {},
            "constants": {},
            "obj_id_to_idx": OrderedDict(),
            "obj_idx_to_id": OrderedDict(),
            "obj_ids": [],
            "output_dict_per_obj": {},
            "temp_output_dict_per_obj": {},
            "frames_tracked_per_obj": {},
        }
        if warm_up:
            self._get_image_feature(state, frame_idx=0, batch_size=1)
        return state


class VideoPredictor(_InMemoryFrames, SAM2VideoPredictor):
    """SAM2's video predictor with frames from memory (`init_state_from_frames`)."""


class VideoPredictorVOS(_InMemoryFrames, SAM2VideoPredictorVOS):
    """SAM2.1's compiled video predictor (`vos_optimized`) with frames from memory."""


class SharedFrameSelfAttentionLayer(MemoryAttentionLayer):
    """SAM2's memory-attention layer, its self-attention run once when every row of the batch is the same.

    The first layer's self-attention reads only the frame's own features (the objects' memories enter in the
    cross-attention after it), so when evaluation tracks a batch of objects on one frame its input rows are copies
    of one another: it runs on one row and the result is repeated, which equals running it on every row
    (tests/stages/test_evaluate_per_video.py). Any other input, and every later layer's (their rows differ once
    the memories entered), runs SAM2's own code.
    """

    def _forward_sa(self, tgt: torch.Tensor, query_pos: torch.Tensor | None) -> torch.Tensor:
        if len(tgt) > 1 and torch.equal(tgt, tgt[:1].expand_as(tgt)) and (
                query_pos is None or torch.equal(query_pos, query_pos[:1].expand_as(query_pos))):
            one = super()._forward_sa(tgt[:1], None if query_pos is None else query_pos[:1])
            return one.expand_as(tgt).contiguous()
        return super()._forward_sa(tgt, query_pos)
