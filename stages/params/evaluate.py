"""`evaluate`: J&F on the evaluation pool."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Literal

from annotated_types import Gt, Le

from stages.core.params import NonNegInt, PosFloat, PosInt
from stages.core.typed_config import Exp, ExpPath


@dataclass(frozen=True)
class EvaluateParams:
    model_path: ExpPath[str] = "models/grpo/merged"  # Qwen2.5-VL folder to evaluate; "" = model.path
    split: Exp[Literal["valid", "train"]] = "valid"  # ReVOS split the eval pool comes from (published: valid)
    n_frames: Exp[PosInt] = 6  # frames shown, sampled uniformly over the video (Veason-R1: 8 at inference)
    frame_size: Exp[NonNegInt] = 0  # square side of the frames shown, pixels; 0 = keyframes.train_size (paper: 560)
    batch_size: Exp[PosInt] = 32  # prompts per generate() call (one video's, in near-equal batches)
    max_new_tokens: Exp[PosInt] = 256  # (paper: 1024)
    # the KV cache the answer is decoded with: dynamic (transformers' default), static (which transformers compiles
    # on CUDA: torch.compile of the decode step, where a dynamic cache runs each step's kernels one by one; on the
    # CPU it only preallocates) or auto (static with CUDA). A batch whose shared prefix was already run keeps that
    # prefix's cache. Dynamic until the GPU bench (bench_metrics.py --gpu: both) shows static pays, compile included
    kv_cache: Exp[Literal["dynamic", "static", "auto"]] = "dynamic"
    # rcot: RCoT-Seg agentic selection; htfs: VideoSeg-R1 sampler
    mode: Exp[Literal["veason", "rcot", "htfs"]] = "veason"
    max_rounds: Exp[PosInt] = 5  # RCoT-Seg λ: keyframe selections before the last one is kept
    htfs_k: Exp[PosInt] = 4  # VideoSeg-R1 HTFS: interval predictions averaged per round (K)
    htfs_delta: Exp[Annotated[float, Gt(0), Le(1)]] = 0.25  # HTFS: narrow while the key segment > δ · T frames
    htfs_m: Exp[PosInt] = 4  # HTFS: position predictions averaged inside the key segment (M)
    keyframe_size: Exp[NonNegInt] = 0  # side of the chosen frame shown alone (RCoT-Seg AKS / KTG: 840); 0 = frame_size
    mask_threshold: Exp[float] = 0.0  # SAM2 mask logit threshold (SAM2's own: 0)
    # box: the keyframe boxes filled on every frame (box-only lower bound)
    segmenter: Exp[Literal["sam2", "box"]] = "sam2"
    # also score the ground-truth answers through the same segmenter (the ceiling; `ceiling_*` metrics, the report's
    # second row: one more segmenter pass, no model) and the empty answer (`empty_*`, the third row: no segmenter)
    reference: Exp[bool] = True
    # also answer each expression with another expression's query of the same video (`swap_*` metrics: a model that
    # reads the query drops there; one more model pass)
    swap_query: Exp[bool] = True
    limit: Exp[NonNegInt] = 0  # evaluate the first `limit` expressions of the eval pool; 0 = all
    bound_th: Exp[PosFloat] = 0.008  # DAVIS boundary tolerance, fraction of the diagonal (published: 0.008)
    report_examples: Exp[NonNegInt] = 2  # best and worst expressions pictured in the report

    def _rules(self) -> Iterator[tuple[str, str]]:
        if self.bound_th >= 1 and self.bound_th != int(self.bound_th):
            yield "bound_th", f"a tolerance ≥ 1 is in pixels and must be whole, got {self.bound_th}"
