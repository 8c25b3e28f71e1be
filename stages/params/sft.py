"""`sft`: supervised fine-tuning on the teacher's traces."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from annotated_types import Ge, Lt

from stages.core.params import NonNegFloat, NonNegInt, PosFloat, PosInt, Seed
from stages.core.typed_config import Exp, ExpPath, Server


@dataclass(frozen=True)
class SftParams:
    seed: Exp[Seed] = 0
    epochs: Exp[PosInt] = 8  # passes over the SFT data (paper: 1; the tiny random model needs more)
    learning_rate: Exp[PosFloat] = 5e-3  # (paper: 1e-4 for LoRA on the pretrained model)
    lr_scheduler: Exp[Literal["cosine"]] = "cosine"
    warmup_ratio: Exp[Annotated[float, Ge(0), Lt(1)]] = 0.03
    grad_accum: Exp[PosInt] = 1  # gradient accumulation steps (paper: 8; 1 = more updates on tiny data)
    # samples per device per micro-batch (global batch = batch_size × processes × grad_accum)
    batch_size: Exp[PosInt] = 1
    weight_decay: Exp[NonNegFloat] = 0.0
    max_grad_norm: Exp[PosFloat] = 1.0
    lora_r: Exp[NonNegInt] = 8  # (paper: 8); 0 = full fine-tuning
    lora_alpha: Exp[PosInt] = 16
    lora_dropout: Exp[Annotated[float, Ge(0), Lt(1)]] = 0.05
    train_vision: Exp[bool] = False  # also adapt the vision tower and merger (papers: language model only)
    target_modules: Exp[tuple[str, ...]] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    modules_to_save: Exp[tuple[str, ...]] = ("lm_head", "embed_tokens")  # fully trained; () for real checkpoints
    gradient_checkpointing: Exp[bool] = False
    # padding-free packing: a micro-batch's samples end to end in one row, each with its own positions and no
    # attention across samples (stages/models/batches.py PackCollator); false = right-padded rows
    packing: Exp[bool] = False
    # Liger Triton kernels (fused linear cross-entropy, RMSNorm, SwiGLU, M-RoPE): auto = on where CUDA, Triton and
    # liger-kernel are present, off elsewhere (CPU); on = required (an error where they are missing)
    liger: Exp[Literal["auto", "on", "off"]] = "auto"
    # torch threads on CPU (tiny model: 1 is fastest on a shared machine); 0 = torch default
    cpu_threads: Exp[NonNegInt] = 1
    save_every_steps: Exp[PosInt] = 10  # resumable checkpoint interval (optimizer steps)
    cache_mb: Exp[NonNegInt] = 1024  # processor outputs kept in memory for later epochs, MB; 0 = encode every time
    # training processes (GPUs); > 1 starts `accelerate launch` (or torchrun) from the stage
    processes: Server[PosInt] = 1
    # accelerate config for processes > 1 (configs/accelerate/*.yaml); "" = torchrun DDP
    accelerate_config: Server[str] = ""
    format_eval_samples: Exp[NonNegInt] = 12  # held-out eval samples for the before/after format rate
    max_new_tokens: Exp[PosInt] = 256  # generation length for the format rate (template traces: ~175 tokens)
    out_dir: ExpPath[str] = "models/sft"
    # persists across runs (resume after a kill); fixed at serve time: the stage removes a folder there that holds
    # no checkpoints of this run, and no DVC output guards it: a run naming a dataset under an allowed root deletes it
    checkpoint_dir: Server[str] = "models/checkpoints/sft"
