"""The one place params.yaml is read: frozen, typed params classes, one per params.yaml block.

Each block class mirrors a block of params.yaml (same names, same order); defaults are the
embedded synthetic default, and params.yaml documents every value. Stage functions receive these
objects, never raw dicts. An unknown key or a wrongly typed value is a `ParamsError` naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from stages.core.runner import RunnerParams
from stages.core.typed_config import ParamsError, build

__all__ = ["ParamsError", "Params", "load_params"]


@dataclass(frozen=True)
class DataParams:
    root: str = "data/raw/synth"  # ReVOS-layout root that ingest reads (the synthetic one by default)
    index_dir: str = "data/index"


@dataclass(frozen=True)
class SynthScale:
    n_videos_train: int = 8
    n_videos_valid: int = 4
    min_frames: int = 8
    max_frames: int = 14
    height: int = 120
    width: int = 160
    min_objects: int = 2
    max_objects: int = 4
    frame_gap_prob: float = 0.25  # probability that a frame number is skipped (ReVOS has gaps)
    jpeg_quality: int = 90


@dataclass(frozen=True)
class SynthParams:
    seed: int = 0
    size: Literal["default", "large"] = "default"
    out_dir: str = "data/raw/synth"
    source: str = "SYNTH"  # first component of the video keys (SYNTH/train/v0003)
    default: SynthScale = field(default_factory=SynthScale)
    large: SynthScale = field(
        default_factory=lambda: SynthScale(
            n_videos_train=300, n_videos_valid=60, min_frames=40, max_frames=80, height=720, width=1280
        )
    )

    @property
    def scale(self) -> SynthScale:
        """The size preset selected by `size`."""
        return self.large if self.size == "large" else self.default


@dataclass(frozen=True)
class IngestParams:
    strict: bool = True  # false: bad items go to the quarantine table and the rest proceeds
    check_jpeg: Literal["header", "decode"] = "decode"  # how deeply frames are checked
    foreground_tolerance: float = 0.0  # allowed fraction of pixels where foreground != union of masks


@dataclass(frozen=True)
class RemoteParams:
    name: str = "storage"  # DVC remote name
    url: str = ""  # s3://bucket/path, gs://…, ssh://host/path or a local folder; empty = no remote
    url_env: str = "VRSFLOW_DVC_REMOTE"  # environment variable that, when set, overrides `url`


@dataclass(frozen=True)
class SampleParams:
    sft_first_k: int = 12  # SFT candidates: the first k expressions of each training video (Veason-R1: 10)
    sft_size: int = 0  # SFT pool size after the first-k rule; 0 = all (ReVOS: ~5.8K)
    grpo_size: int = 24  # GRPO pool size (paper: 10K)
    eval_size: int = 0  # evaluation pool size from the valid split; 0 = all
    disjoint: bool = True  # no expression in two pools
    include_no_target_train: bool = False  # Veason-R1 skips type 2 in training
    include_no_target_eval: bool = True  # kept for evaluation (excluded from J&F aggregates there)
    motion_strata: bool = False  # add a motion-heavy / static split to the strata
    motion_threshold: float = 0.25  # target box-centre travel ÷ frame diagonal that counts as motion-heavy
    difficulty_table: str = ""  # a difficulty scores parquet to stratify by level too; "" = off


@dataclass(frozen=True)
class KeyframesParams:
    n_frames: int = 6  # N frames shown to the model (Veason-R1: 6)
    top_k: int = 5  # keyframe drawn among the top-k frames by target area (Veason-R1: 5)
    mode: Literal["topk_random", "max_area"] = "topk_random"  # max_area: RCoT-Seg's largest-area frame
    train_size: int = 112  # frames resized to train_size² for training (paper: 560; small on CPU)


@dataclass(frozen=True)
class TeacherParams:
    backend: Literal["template", "openai"] = "template"  # template: offline, from annotations
    base_url: str = "https://ark.cn-beijing.volces.com/api/v3"  # any OpenAI-compatible endpoint
    model: str = "doubao-1-5-thinking-vision-pro-250428"  # Seed1.5-VL on Volcengine Ark
    api_key_env: str = "VRSFLOW_TEACHER_API_KEY"  # NAME of the env var holding the key (never the key)
    api_key_required: bool = True  # false for local servers without auth
    temperature: float = 0.7
    max_tokens: int = 1024
    concurrency: int = 32  # requests in flight
    timeout_s: float = 120.0  # per request
    max_retries: int = 5  # on 429, 5xx, timeouts, connection errors, malformed bodies
    backoff_base_s: float = 1.0  # exponential backoff base (full jitter)
    backoff_max_s: float = 60.0
    rpm: int = 0  # requests per minute limit; 0 = none
    price_in_per_m: float = 0.0  # USD per 1M prompt tokens, for the cost estimate
    price_out_per_m: float = 0.0  # USD per 1M completion tokens
    image_size: int = 448  # longest side of frames sent to the teacher, pixels


@dataclass(frozen=True)
class CotParams:
    pools: tuple[str, ...] = ("sft",)  # pools that get reasoning traces
    template_set: Literal["veason", "rcot_description", "rcot_aks", "rcot_ktg"] = "veason"
    traces_per_sample: int = 1  # teacher calls per sample (different template draws / seeds)
    cache_dir: str = "data/cot/cache"  # persistent response cache (DVC persist: true)


@dataclass(frozen=True)
class FilterParams:
    min_chars: int = 120  # length bounds of a trace
    max_chars: int = 4000
    near_duplicate_ratio: float = 0.9  # difflib ratio at/above which a second trace of a sample is dropped
    check_faithfulness: bool = True  # step-3 location words must agree with the ground-truth box


@dataclass(frozen=True)
class DifficultyParams:
    backend: Literal["heuristic", "mllm"] = "heuristic"  # mllm: the teacher client rates (JSON output)
    easy_below: float = 4.0  # D < easy_below → easy (VideoSeg-R1 uses two thresholds)
    hard_from: float = 6.5  # D ≥ hard_from → hard
    min_budget: int = 128  # reasoning-token budget L(D) at D = 1
    max_budget: int = 768  # L(D) at D = 10 (linear in between, multiples of 16)
    json_retries: int = 2  # extra MLLM calls when the rating JSON does not validate
    cache_dir: str = "data/difficulty/cache"


@dataclass(frozen=True)
class TinyModelsParams:
    seed: int = 0
    out_dir: str = "models/tiny"  # qwen25vl/ and sam2/ are written below it
    vocab_size: int = 1024  # toy byte-level BPE (a small vocabulary keeps GRPO log-probs cheap on CPU)
    hidden_size: int = 256  # text hidden size (head_dim = hidden_size / num_heads); 256 learns the format in SFT
    num_layers: int = 2
    num_heads: int = 4
    max_image_side: int = 112  # processor's longest_edge in pixels (28-pixel multiples)
    sam2_image_size: int = 256  # SAM2 input resolution of the micro model


@dataclass(frozen=True)
class ModelParams:
    path: str = "models/tiny/qwen25vl"  # local Qwen2.5-VL checkpoint folder (config, weights, processor)
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: bf16 on GPU, fp32 on CPU


@dataclass(frozen=True)
class Sam2Params:
    checkpoint: str = "models/tiny/sam2/model.pt"  # {"model": state_dict}, as the official sam2.1_hiera_*.pt
    config: str = "models/tiny/sam2/config.yaml"  # a sam2 package config name or a vrsflow config file
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"


@dataclass(frozen=True)
class ShardParams:
    samples_per_shard: int = 256  # WebDataset samples per tar
    jpeg_quality: int = 95  # frames re-encoded at train size
    export_sharegpt: bool = True  # LLaMA-Factory ShareGPT JSON + images (SFT)
    export_verl: bool = True  # verl parquet (GRPO, eval)


@dataclass(frozen=True)
class SftParams:
    seed: int = 0
    epochs: int = 8  # passes over the SFT data (paper: 1; the tiny random model needs more)
    learning_rate: float = 5e-3  # (paper: 1e-4 for LoRA on the pretrained model)
    lr_scheduler: Literal["cosine"] = "cosine"
    warmup_ratio: float = 0.03
    grad_accum: int = 1  # gradient accumulation steps, batch 1 per step (paper: 8; 1 = more updates on tiny data)
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    lora_r: int = 8  # (paper: 8)
    lora_alpha: int = 16
    lora_dropout: float = 0.05
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    modules_to_save: tuple[str, ...] = ("lm_head", "embed_tokens")  # fully trained; () for real checkpoints
    gradient_checkpointing: bool = False
    cpu_threads: int = 1  # torch threads on CPU (tiny model: 1 is fastest on a shared machine); 0 = torch default
    save_every_steps: int = 10  # resumable checkpoint interval (optimizer steps)
    format_eval_samples: int = 12  # held-out eval samples for the before/after format rate
    max_new_tokens: int = 256  # generation length for the format rate (template traces: ~175 tokens)
    out_dir: str = "models/sft"
    checkpoint_dir: str = "models/checkpoints/sft"  # persists across runs (resume after a kill)


@dataclass(frozen=True)
class EvaluateParams:
    model_path: str = "models/grpo/merged"  # Qwen2.5-VL folder to evaluate; "" = model.path
    split: Literal["valid", "train"] = "valid"  # ReVOS split the eval pool comes from (published: valid)
    n_frames: int = 6  # frames shown, sampled uniformly over the video (Veason-R1: 8 at inference)
    frame_size: int = 0  # square side of the frames shown, pixels; 0 = keyframes.train_size (paper: 560)
    batch_size: int = 4  # prompts per generate() call
    max_new_tokens: int = 256  # (paper: 1024)
    mode: Literal["veason", "rcot"] = "veason"  # rcot: RCoT-Seg agentic keyframe selection (A/B judgment)
    max_rounds: int = 5  # RCoT-Seg λ: keyframe selections before the last one is kept
    mask_threshold: float = 0.0  # SAM2 mask logit threshold (SAM2's own: 0)
    limit: int = 0  # evaluate the first `limit` expressions of the eval pool; 0 = all
    bound_th: float = 0.008  # DAVIS boundary tolerance, fraction of the diagonal (published: 0.008)
    report_examples: int = 2  # best and worst expressions pictured in the report


@dataclass(frozen=True)
class RewardWeights:
    format: float = 1.0  # weight of each reward component (Veason-R1 / RCoT-Seg / VideoSeg-R1: all 1)
    keyframe: float = 1.0
    spatial: float = 1.0
    consistency: float = 1.0
    rcot_match: float = 1.0
    aks_option: float = 1.0
    negative_point: float = 1.0
    non_repeat: float = 1.0


@dataclass(frozen=True)
class RewardParams:
    components: tuple[str, ...] = ("format", "keyframe", "spatial", "consistency")  # Veason-R1's four
    weights: RewardWeights = field(default_factory=RewardWeights)
    failure_score: float = 0.0  # base total of an unparseable completion (≤ 0), plus its format credit
    iou_threshold: float = 0.5  # RCoT-Seg / VisionReasoner: a match counts when IoU > 0.5
    box_l1_threshold: float = 10.0  # mean box-corner L1 in pixels at threshold_size (VisionReasoner: 10)
    point_l1_threshold: float = 30.0  # point distance in pixels at threshold_size (VisionReasoner: 30)
    threshold_size: int = 840  # image side the pixel thresholds are stated at (RCoT-Seg: 840)
    length_penalty: bool = False  # VideoSeg-R1 soft length penalty (multiplies the total)
    length_beta: float = 0.002  # penalty per token over the difficulty budget
    mask_threshold: float = 0.0  # SAM2 mask logit threshold for the consistency reward


@dataclass(frozen=True)
class GrpoVerlParams:
    n_gpus_per_node: int = 8
    nnodes: int = 1
    rollout_name: Literal["vllm", "sglang"] = "vllm"  # verl's rollout server
    gpu_memory_utilization: float = 0.6  # of the rollout server
    micro_batch_size_per_gpu: int = 1  # actor / ref / rollout log-prob micro batch
    max_prompt_length: int = 4096  # tokens (6 frames at 560² ≈ 2.4K image tokens)
    sam2_service: str = "vrsflow-sam2"  # named Ray actor serving the consistency reward; "" = SAM2 in-process
    sam2_gpus: float = 1.0  # GPUs reserved for the SAM2 actor
    out_dir: str = "data/grpo/verl"  # generated config, parquet copies and launch script


@dataclass(frozen=True)
class GrpoParams:
    engine: Literal["trl", "verl"] = "trl"  # trl: one machine (CPU default); verl: GPU cluster
    seed: int = 0
    model_path: str = "models/sft/merged"  # the SFT merged model GRPO starts from
    shards_dir: str = "data/shards/grpo"  # GRPO WebDataset shards (shard stage)
    verl_parquet: str = "data/shards/exports/verl/grpo.parquet"  # verl export of the same pool
    out_dir: str = "models/grpo"  # adapter/ and merged/
    checkpoint_dir: str = "models/checkpoints/grpo"  # resumable trainer checkpoints (persist)
    batch_size: int = 2  # prompts per step (paper: 16)
    num_generations: int = 8  # rollouts per prompt (paper: 8)
    max_steps: int = 96  # rollout rounds (one generation each); 0 = epochs over the pool (paper: 1 epoch of 10K)
    epochs: int = 1
    ppo_epochs: int = 1  # optimizer passes over each round's rollouts: verl ppo_epochs, TRL num_iterations (paper: 1)
    learning_rate: float = 1e-3  # (paper: 1e-6 on the pretrained model; the tiny model needs more)
    weight_decay: float = 0.01  # (VideoSeg-R1: 0.01)
    kl_coef: float = 5e-3  # KL loss coefficient, low_var_kl (paper: 5e-3)
    kl_type: Literal["low_var_kl"] = "low_var_kl"  # verl kl_loss_type; TRL's k3 estimator is the same
    max_response_length: int = 256  # tokens (paper: 1024); the template traces are ~175 tokens
    temperature: float = 1.0  # (paper: 1.0)
    top_p: float = 1.0
    grad_clip: float = 1.0  # (paper: 1.0)
    clip_ratio: float = 0.2  # PPO clip epsilon (verl / TRL default)
    lora_r: int = 8  # 0 = full fine-tuning
    lora_alpha: int = 16
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    save_every_steps: int = 4  # trl checkpoint interval (resume after a kill)
    window: int = 0  # steps averaged for the first / last mean reward; 0 = one pass over the pool (same prompts)
    verl: GrpoVerlParams = field(default_factory=GrpoVerlParams)


# -- later stages add their block classes above this line --


@dataclass(frozen=True)
class Params:
    """All of params.yaml. Blocks for later stages are added as their stages arrive."""

    seed: int = 0  # global seed; every stage derives its own (seed, stage, sample id) seeds from it
    data: DataParams = field(default_factory=DataParams)
    synth: SynthParams = field(default_factory=SynthParams)
    ingest: IngestParams = field(default_factory=IngestParams)
    runner: RunnerParams = field(default_factory=RunnerParams)
    remote: RemoteParams = field(default_factory=RemoteParams)
    sample: SampleParams = field(default_factory=SampleParams)
    keyframes: KeyframesParams = field(default_factory=KeyframesParams)
    teacher: TeacherParams = field(default_factory=TeacherParams)
    cot: CotParams = field(default_factory=CotParams)
    filter: FilterParams = field(default_factory=FilterParams)
    difficulty: DifficultyParams = field(default_factory=DifficultyParams)
    tiny_models: TinyModelsParams = field(default_factory=TinyModelsParams)
    model: ModelParams = field(default_factory=ModelParams)
    sam2: Sam2Params = field(default_factory=Sam2Params)
    shard: ShardParams = field(default_factory=ShardParams)
    sft: SftParams = field(default_factory=SftParams)
    evaluate: EvaluateParams = field(default_factory=EvaluateParams)
    reward: RewardParams = field(default_factory=RewardParams)
    grpo: GrpoParams = field(default_factory=GrpoParams)
    # -- later stages add their block field above this line (one line each) --


def load_params(path: str | Path = "params.yaml") -> Params:
    """Read and validate params.yaml.

    Raises:
        ParamsError: unknown key, wrong type, or malformed YAML (the message names the file and key).
    """
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ParamsError(f"{path}: malformed YAML: {err}") from err
    try:
        return build(Params, raw)
    except ParamsError as err:
        raise ParamsError(f"{path}: {err}") from err
