"""`grpo`: GRPO with TRL on one machine or verl on a GPU cluster."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated, Literal

from annotated_types import Ge, Gt, Le

from stages.core.params import NonNegFloat, NonNegInt, PosFloat, PosInt, Seed
from stages.core.typed_config import Exp, ExpPath, Server


@dataclass(frozen=True)
class GrpoVerlParams:
    # cuda: the cluster job on GPU nodes; cpu: the same job on this machine's CPU (verl's CPU platform, vLLM's
    # CPU build; stages/grpo/verl_cpu.py) — it starts processes (a Ray head, verl, vLLM), so it is the server's
    device: Server[Literal["cuda", "cpu"]] = "cuda"
    n_gpus_per_node: Server[PosInt] = 8
    nnodes: Server[PosInt] = 1
    rollout_name: Server[Literal["vllm", "sglang"]] = "vllm"  # verl's rollout server
    gpu_memory_utilization: Server[Annotated[float, Gt(0), Le(1)]] = 0.6  # of the rollout server
    micro_batch_size_per_gpu: Exp[PosInt] = 1  # actor / ref / rollout log-prob micro batch
    max_prompt_length: Exp[PosInt] = 4096  # tokens (6 frames at 560² ≈ 2.4K image tokens)
    sam2_service: Server[str] = "vrsflow-sam2"  # named Ray actor serving the consistency reward; "" = SAM2 in-process
    # where the SAM2 actor runs: colocated = on GPU 0 of a node verl also uses, declared to Ray as 0 GPUs, its
    # memory capped at sam2_memory_fraction; reserved = on sam2_gpus GPUs Ray keeps out of verl's pool
    sam2_placement: Server[Literal["colocated", "reserved"]] = "colocated"
    sam2_gpus: Server[NonNegFloat] = 1.0  # reserved placement: GPUs Ray holds for the SAM2 actor
    sam2_memory_fraction: Server[Annotated[float, Gt(0), Le(1)]] = 0.1  # colocated: SAM2's share of its GPU
    # actor/ref attention in verl's model config: sdpa needs nothing extra; flash_attention_2 needs the
    # flash-attn package built for the cluster's torch/CUDA (docs/grpo_verl.md)
    attn_implementation: Server[Literal["sdpa", "flash_attention_2", "eager"]] = "sdpa"
    out_dir: ExpPath[str] = "data/grpo/verl"  # generated config, parquet copies and launch script

    def _rules(self) -> Iterator[tuple[str, str]]:
        if self.sam2_placement == "colocated" and self.gpu_memory_utilization + self.sam2_memory_fraction > 0.95:
            yield "sam2_memory_fraction", (f"colocated SAM2 ({self.sam2_memory_fraction}) + vLLM's "
                                           f"gpu_memory_utilization ({self.gpu_memory_utilization}) must be ≤ 0.95")
        if self.sam2_placement == "reserved" and self.sam2_gpus <= 0:
            yield "sam2_gpus", "must be > 0 with sam2_placement: reserved"


@dataclass(frozen=True)
class GrpoParams:
    engine: Server[Literal["trl", "verl"]] = "trl"  # trl: one machine (CPU default); verl: GPU cluster
    seed: Exp[Seed] = 0
    model_path: ExpPath[str] = "models/sft/merged"  # the SFT merged model GRPO starts from
    shards_dir: ExpPath[str] = "data/shards/grpo"  # GRPO WebDataset shards (shard stage)
    verl_parquet: ExpPath[str] = "data/shards/exports/verl/grpo.parquet"  # verl export of the same pool
    out_dir: ExpPath[str] = "models/grpo"  # adapter/ and merged/
    # resumable trainer checkpoints (persist); fixed at serve time, as sft.checkpoint_dir (the stage removes them)
    checkpoint_dir: Server[str] = "models/checkpoints/grpo"
    batch_size: Exp[PosInt] = 4  # prompts per step (paper: 16)
    num_generations: Exp[Annotated[int, Ge(2)]] = 8  # rollouts per prompt (paper: 8)
    # rollout rounds (one generation each); 0 = epochs over the pool (paper: 1 epoch of 10K)
    max_steps: Exp[NonNegInt] = 48
    epochs: Exp[PosInt] = 1
    ppo_epochs: Exp[PosInt] = 1  # optimizer passes per round's rollouts: verl ppo_epochs, TRL num_iterations (paper: 1)
    learning_rate: Exp[PosFloat] = 1e-3  # (paper: 1e-6 on the pretrained model; the tiny model needs more)
    weight_decay: Exp[NonNegFloat] = 0.01  # (VideoSeg-R1: 0.01)
    kl_coef: Exp[NonNegFloat] = 5e-3  # KL loss coefficient, low_var_kl (paper: 5e-3)
    kl_type: Exp[Literal["low_var_kl"]] = "low_var_kl"  # verl kl_loss_type; TRL's k3 estimator is the same
    max_response_length: Exp[PosInt] = 256  # tokens (paper: 1024); the template traces are ~175 tokens
    temperature: Exp[PosFloat] = 1.0  # (paper: 1.0)
    top_p: Exp[Annotated[float, Gt(0), Le(1)]] = 1.0
    grad_clip: Exp[PosFloat] = 1.0  # (paper: 1.0)
    clip_ratio: Exp[PosFloat] = 0.2  # PPO clip epsilon (verl / TRL default)
    lora_r: Exp[NonNegInt] = 8  # 0 = full fine-tuning
    lora_alpha: Exp[PosInt] = 16
    target_modules: Exp[tuple[str, ...]] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    train_vision: Exp[bool] = False  # also train the vision tower and merger (Veason-R1: language model only)
    # recompute activations in backward: less memory, slower (TRL's default: on)
    gradient_checkpointing: Exp[bool] = False
    save_every_steps: Exp[PosInt] = 4  # trl checkpoint interval (resume after a kill)
    # trl: torch threads on CPU (results depend on it, so it is a param); 0 = torch default
    cpu_threads: Exp[NonNegInt] = 1
    # trl: training processes (cores / GPUs); > 1 starts accelerate launch / torchrun itself
    processes: Server[PosInt] = 1
    accelerate_config: Server[str] = ""  # trl, processes > 1: configs/accelerate/*.yaml; "" = torchrun DDP
    # steps averaged for the first / last mean reward; 0 = one pass over the pool (same prompts)
    window: Exp[NonNegInt] = 0
    verl: GrpoVerlParams = field(default_factory=GrpoVerlParams)

    def _rules(self) -> Iterator[tuple[str, str]]:
        if self.engine == "verl" and self.verl.device == "cpu" and self.lora_r == 0:
            # vLLM's CPU backend cannot take base weights into a running server (docs/grpo_verl.md)
            yield "lora_r", ("must be > 0 with grpo.verl.device: cpu (vLLM's CPU build takes no full-weight "
                             "updates; full fine-tuning needs GPU nodes)")
