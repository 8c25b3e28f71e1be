"""The one place params.yaml is read: frozen, typed params classes, one per params.yaml block.

Each block class mirrors a block of params.yaml (same names, same order); defaults are the
embedded synthetic default, and params.yaml documents every value. Stage functions receive these
objects, never raw dicts. An unknown key, a wrongly typed or out-of-range value, or a broken
cross-field rule is a `ParamsError` naming the dotted key, in one line (`check_params`, `load_params`).
Ranges are `annotated_types` constraints on the fields; rules spanning fields are a class's `_rules`.

The same validation serves every way of starting a run: `vrsflow check`, the first thing
`vrsflow stage` does, the `check` stage at the head of dvc.yaml, and the served pipeline's
overrides (`apply_overrides`), which are checked before DVC is called.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from annotated_types import Ge, Gt, Le, Lt, MinLen

from stages.core.runner import RunnerParams
from stages.core.typed_config import (
    SERVER,
    EnvName,
    Exp,
    ExpPath,
    ParamsError,
    Server,
    build,
    deep_merge,
    field_type,
    is_block,
    is_str_like,
)

__all__ = ["ParamsError", "Params", "apply_overrides", "load_params", "read_params_file"]

PosInt = Annotated[int, Ge(1)]
NonNegInt = Annotated[int, Ge(0)]
Seed = Annotated[int, Ge(0)]  # numpy and torch take non-negative seeds
MAX_SEEDS = 8  # seeds a pre-training stage trains (a process each; a UI run may not start more)
PosFloat = Annotated[float, Gt(0)]
NonNegFloat = Annotated[float, Ge(0)]
Fraction = Annotated[float, Ge(0), Le(1)]
# objects in one generated scene: each is a distinct (colour, kind) of the synth simulator's 30, and a scene of
# more than 16 in a 160×120 frame is occlusion, not a scene (tests/stages/test_synth.py holds the bound to the
# simulator's combinations); a larger value is refused when params are read, not deep in a stage
SceneObjects = Annotated[int, Ge(1), Le(16)]
# the tiny SAM2's image encoder widths (stages.models.tiny_sam2): 32 is the widest whose weights stay under the
# 16 MiB a committed file may take in bf16 (48: 16.5 MiB)
Sam2EncoderWidth = Literal[16, 32]
JpegQuality = Annotated[int, Ge(1), Le(100)]
NonPosFloat = Annotated[float, Le(0)]
NonEmptyStr = Annotated[str, MinLen(1)]
NonEmptyNames = Annotated[tuple[str, ...], MinLen(1)]
NonEmptyWeights = Annotated[tuple[Annotated[float, Gt(0)], ...], MinLen(1)]
PoolName = Literal["sft", "grpo", "eval"]
# Served-run policy (stages/core/typed_config.py, docs/ui.md): every value field is Exp[...] (a run from the UI
# may change it), ExpPath[...] (a path it may change inside the project) or Server[...] (fixed when `vrsflow serve`
# starts); a field naming an environment variable is SecretEnv (server side, names from SECRET_ENV_PREFIXES only).
SECRET_ENV_PREFIXES = ("VRSFLOW_",)
SecretEnv = Annotated[str, SERVER, EnvName(SECRET_ENV_PREFIXES)]


SOURCE_LAYOUTS = ("revos", "mevis", "refytvos", "refdavis")  # training-source layouts (stages/ingest/sources.py)


@dataclass(frozen=True)
class SourceParams:
    """One training source: a dataset root in its published layout (docs/sampling.md, "Training sources")."""

    name: Exp[str] = ""  # prefix of its video keys and ids (`<name>/<video>`): letters, digits, - and _
    layout: Exp[Literal["revos", "mevis", "refytvos", "refdavis"]] = "revos"
    root: ExpPath[str] = ""  # the dataset folder as published
    split: Exp[str] = "train"  # the published split read (its masks must be public)
    share: Exp[NonNegFloat] = 1.0  # relative share of the SFT and GRPO pools (normalised over the sources)

    def _rules(self) -> Iterator[tuple[str, str]]:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", self.name):
            yield "name", f"must be letters, digits, '-' or '_' (it prefixes video keys), got {self.name!r}"
        if not self.root:
            yield "root", "must name the source's dataset folder"
        splits = {"revos": ("train", "valid"), "mevis": ("train", "valid_u"), "refytvos": ("train",),
                  "refdavis": ("train", "valid")}[self.layout]
        if self.split not in splits:
            yield "split", f"{self.layout} has no public-mask split {self.split!r} (one of {', '.join(splits)})"


@dataclass(frozen=True)
class DataParams:
    root: ExpPath[str] = "data/raw/synth"  # ReVOS-layout root that ingest reads (the synthetic one by default)
    index_dir: ExpPath[str] = "data/index"
    # training sources; () = data.root alone (both splits). Given: the sources are the training split, data.root
    # gives only the evaluation (valid) split
    sources: ExpPath[tuple[SourceParams, ...]] = ()
    frames_dir: ExpPath[str] = "data/frames"  # with sources: links to every source's frames (rebuilt from params)
    # shares: the SFT / GRPO pools split by the sources' `share`; union: by their sizes (a uniform draw from the
    # union of the sources, what a paper that pools datasets without a ratio does)
    mix: Exp[Literal["shares", "union"]] = "shares"

    def _rules(self) -> Iterator[tuple[str, str]]:
        names = [s.name for s in self.sources]
        for name in sorted({n for n in names if names.count(n) > 1}):
            yield "sources", f"source name {name!r} used twice"
        if self.sources and not sum(s.share for s in self.sources) > 0:
            yield "sources", "at least one source needs a share > 0"


@dataclass(frozen=True)
class SynthScale:
    n_videos_train: Exp[PosInt] = 8
    n_videos_valid: Exp[PosInt] = 4
    min_frames: Exp[PosInt] = 8
    max_frames: Exp[PosInt] = 14
    height: Exp[PosInt] = 120
    width: Exp[PosInt] = 160
    min_objects: Exp[SceneObjects] = 2
    max_objects: Exp[SceneObjects] = 4
    # probability that a frame number is skipped (ReVOS has gaps)
    frame_gap_prob: Exp[Annotated[float, Ge(0), Lt(1)]] = 0.25
    jpeg_quality: Exp[JpegQuality] = 90
    # textured: gradient / noise / striped / checked backgrounds, plain / striped / dotted shapes; plain: one flat
    # background colour and untextured shapes (the same scenes, objects and paths otherwise)
    look: Exp[Literal["textured", "plain"]] = "textured"
    object_scale: Exp[Annotated[float, Gt(0), Le(3)]] = 1.0  # objects' radius × this (1: 7-14 % of the frame's side)

    def _rules(self) -> Iterator[tuple[str, str]]:
        if self.min_frames > self.max_frames:
            yield "min_frames", f"must be ≤ max_frames ({self.max_frames}), got {self.min_frames}"
        if self.min_objects > self.max_objects:
            yield "min_objects", f"must be ≤ max_objects ({self.max_objects}), got {self.min_objects}"


@dataclass(frozen=True)
class SynthParams:
    seed: Exp[Seed] = 0
    # default | large: simulated scenes at that block's scale; hostile: the geometry cases (stages/synth/hostile.py)
    size: Exp[Literal["default", "large", "hostile"]] = "default"
    out_dir: ExpPath[str] = "data/raw/synth"
    source: Exp[str] = "SYNTH"  # first component of the video keys (SYNTH/train/v0003)
    layout: Exp[Literal["revos", "mevis", "reasonvos", "refytvos", "refdavis"]] = "revos"  # on-disk layout written
    # training-source layouts also written, each a root of its own at <out_dir>/<layout> (same scale and seed,
    # its own video keys), for `data.sources` (profiles/ci.yaml: a three-source mixture)
    mixture: Exp[tuple[Literal["mevis", "refytvos", "refdavis"], ...]] = ()
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
    strict: Exp[bool] = True  # false: bad items go to the quarantine table and the rest proceeds
    check_jpeg: Exp[Literal["header", "decode"]] = "header"  # how deeply frames are checked
    foreground_tolerance: Exp[Fraction] = 0.0  # allowed fraction of pixels where foreground != union of masks


@dataclass(frozen=True)
class RemoteParams:
    name: Server[NonEmptyStr] = "storage"  # DVC remote name
    url: Server[str] = ""  # s3://bucket/path, gs://…, ssh://host/path or a local folder; empty = no remote
    url_env: SecretEnv = "VRSFLOW_DVC_REMOTE"  # environment variable that, when set, overrides `url`


@dataclass(frozen=True)
class SampleParams:
    sft_first_k: Exp[NonNegInt] = 12  # SFT candidates: the first k expressions of each training video (Veason-R1: 10)
    sft_size: Exp[NonNegInt] = 0  # SFT pool size after the first-k rule; 0 = all (ReVOS: ~5.8K)
    grpo_size: Exp[NonNegInt] = 24  # GRPO pool size (paper: 10K)
    eval_size: Exp[NonNegInt] = 0  # evaluation pool size from the valid split; 0 = all
    disjoint: Exp[bool] = True  # no expression in two pools
    include_no_target_train: Exp[bool] = False  # Veason-R1 skips type 2 in training
    include_no_target_eval: Exp[bool] = True  # kept for evaluation (excluded from J&F aggregates there)
    motion_strata: Exp[bool] = False  # add a motion-heavy / static split to the strata
    motion_threshold: Exp[PosFloat] = 0.25  # target box-centre travel ÷ frame diagonal that counts as motion-heavy
    difficulty_table: ExpPath[str] = ""  # a difficulty scores parquet to stratify by level too; "" = off
    sft_tasks: Exp[NonEmptyNames] = ("veason",)  # tasks every SFT sample is trained on (stages/tasks)
    grpo_tasks: Exp[NonEmptyNames] = ("veason",)  # tasks of GRPO and eval samples, one per sample, by grpo_task_weights
    grpo_task_weights: Exp[NonEmptyWeights] = (1.0,)  # shares of grpo_tasks (RCoT-Seg: AKS 4K : KTG 6K)
    # single:multi-instance expressions in SFT/GRPO; 0 = as the source (RCoT: 3)
    single_multi_ratio: Exp[NonNegFloat] = 0.0

    def _rules(self) -> Iterator[tuple[str, str]]:
        if len(self.grpo_task_weights) != len(self.grpo_tasks):
            yield "grpo_task_weights", f"needs one weight per grpo task ({len(self.grpo_tasks)}), " \
                f"got {len(self.grpo_task_weights)}"


@dataclass(frozen=True)
class KeyframesParams:
    n_frames: Exp[PosInt] = 6  # N frames shown to the model (Veason-R1: 6)
    top_k: Exp[PosInt] = 5  # keyframe drawn among the top-k frames by target area (Veason-R1: 5)
    mode: Exp[Literal["topk_random", "max_area"]] = "topk_random"  # max_area: RCoT-Seg's largest-area frame
    train_size: Exp[PosInt] = 112  # frames resized to train_size² for training (paper: 560; small on CPU)
    # side of single-frame task views (AKS, KTG, VideoSeg-R1); 0 = train_size (RCoT: 840)
    keyframe_size: Exp[NonNegInt] = 0


@dataclass(frozen=True)
class TeacherParams:
    backend: Server[Literal["template", "openai"]] = "template"  # template: offline, from annotations
    base_url: Server[str] = "https://ark.cn-beijing.volces.com/api/v3"  # any OpenAI-compatible endpoint
    model: Exp[str] = "doubao-1-5-thinking-vision-pro-250428"  # Seed1.5-VL on Volcengine Ark
    api_key_env: SecretEnv = "VRSFLOW_TEACHER_API_KEY"  # NAME of the env var holding the key (never the key)
    api_key_required: Server[bool] = True  # false for local servers without auth
    temperature: Exp[NonNegFloat] = 0.7
    max_tokens: Exp[PosInt] = 1024
    concurrency: Server[PosInt] = 32  # requests in flight
    timeout_s: Exp[PosFloat] = 120.0  # per request
    max_retries: Exp[NonNegInt] = 5  # on 429, 5xx, timeouts, connection errors, malformed bodies
    backoff_base_s: Exp[NonNegFloat] = 1.0  # exponential backoff base (full jitter)
    backoff_max_s: Exp[NonNegFloat] = 60.0
    rpm: Server[NonNegInt] = 0  # requests per minute limit; 0 = none
    # circuit breaker: stop sending after this many requests in a row failed for one transport / auth / server
    # reason (after their retries); 0 = never (docs/teachers.md)
    breaker_after: Exp[NonNegInt] = 20
    price_in_per_m: Exp[NonNegFloat] = 0.0  # USD per 1M prompt tokens, for the cost estimate
    price_out_per_m: Exp[NonNegFloat] = 0.0  # USD per 1M completion tokens
    image_size: Exp[PosInt] = 448  # longest side of frames sent to the teacher, pixels
    # provider fields merged into every request body (the OpenAI client's extra_body); JSON only (docs/teachers.md)
    extra_body: Exp[dict[str, Any]] = field(default_factory=dict)
    thinking: Exp[Literal["default", "enabled", "disabled", "auto"]] = "default"  # default: send no switch
    # how `thinking` is sent: ark = {"thinking": {"type": …}}; chat_template = chat_template_kwargs.enable_thinking
    thinking_switch: Server[Literal["ark", "chat_template"]] = "ark"

    def _rules(self) -> Iterator[tuple[str, str]]:
        if self.backoff_base_s > self.backoff_max_s:
            yield "backoff_base_s", f"must be ≤ backoff_max_s ({self.backoff_max_s:g}), got {self.backoff_base_s:g}"
        yield from _extra_body_rules(self.extra_body, self.thinking, self.thinking_switch)


# request-body keys the teacher client writes itself (extra_body may not override them); the keys each
# `teacher.thinking_switch` writes (stages/teacher/client.py `provider_fields` sends them)
TEACHER_BODY_KEYS = ("model", "messages", "temperature", "max_tokens", "response_format", "stream", "n")
THINKING_SWITCH_KEYS = {"ark": "thinking", "chat_template": "chat_template_kwargs"}


def _extra_body_rules(extra_body: Mapping[str, Any], thinking: str, switch: str) -> Iterator[tuple[str, str]]:
    import json

    try:
        json.dumps(_plain(extra_body), allow_nan=False)
    except (TypeError, ValueError) as err:
        yield "extra_body", f"must be JSON (mappings, lists, strings, finite numbers, true/false, null): {err}"
        return
    clash = sorted(set(extra_body) & set(TEACHER_BODY_KEYS))
    if clash:
        yield "extra_body", f"sets {clash}, which the client writes itself: set teacher.<key> instead"
    if thinking != "default" and THINKING_SWITCH_KEYS[switch] in extra_body:
        yield "thinking", (f"is {thinking!r} but extra_body already sets {THINKING_SWITCH_KEYS[switch]!r}: "
                           f"use one of the two")
    if thinking == "auto" and switch == "chat_template":
        yield "thinking", "'auto' has no chat_template switch (enable_thinking is true/false): use enabled or disabled"


def _plain(value: Any) -> Any:
    """Mappings (the read-only ones params hold) and tuples as dicts and lists, for JSON."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class CotParams:
    pools: Exp[Annotated[tuple[PoolName, ...], MinLen(1)]] = ("sft",)  # pools that get reasoning traces
    traces_per_sample: Exp[PosInt] = 1  # teacher calls per sample (different template draws / seeds)
    cache_dir: ExpPath[str] = "data/cot/cache"  # persistent response cache (DVC persist: true)
    max_error_share: Exp[Fraction] = 0.2  # above this share of unanswered requests the stage fails (nothing recorded)


@dataclass(frozen=True)
class FilterParams:
    min_chars: Exp[NonNegInt] = 120  # length bounds of a trace
    max_chars: Exp[PosInt] = 4000
    near_duplicate_ratio: Exp[Fraction] = 0.9  # difflib ratio at/above which a second trace of a sample is dropped
    check_faithfulness: Exp[bool] = True  # step-3 location words must agree with the ground-truth box

    def _rules(self) -> Iterator[tuple[str, str]]:
        if self.min_chars > self.max_chars:
            yield "min_chars", f"must be ≤ max_chars ({self.max_chars}), got {self.min_chars}"


@dataclass(frozen=True)
class DifficultyParams:
    backend: Server[Literal["heuristic", "mllm"]] = "heuristic"  # mllm: the teacher client rates (JSON output)
    easy_below: Exp[Annotated[float, Ge(1), Le(10)]] = 4.0  # D < easy_below → easy (VideoSeg-R1 uses two thresholds)
    hard_from: Exp[Annotated[float, Ge(1), Le(10)]] = 6.5  # D ≥ hard_from → hard
    min_budget: Exp[PosInt] = 128  # reasoning-token budget L(D) at D = 1
    max_budget: Exp[PosInt] = 768  # L(D) at D = 10 (linear in between, multiples of 16)
    json_retries: Exp[NonNegInt] = 2  # extra MLLM calls when the rating JSON does not validate
    cache_dir: ExpPath[str] = "data/difficulty/cache"
    max_error_share: Exp[Fraction] = 0.2  # mllm: above this share of unanswered samples the stage fails

    def _rules(self) -> Iterator[tuple[str, str]]:
        if self.easy_below > self.hard_from:
            yield "easy_below", f"must be ≤ hard_from ({self.hard_from:g}), got {self.easy_below:g}"
        if self.min_budget > self.max_budget:
            yield "min_budget", f"must be ≤ max_budget ({self.max_budget}), got {self.min_budget}"


@dataclass(frozen=True)
class TinyModelsParams:
    seed: Exp[Seed] = 0
    out_dir: ExpPath[str] = "models/tiny"  # qwen25vl/ and sam2/ are written below it
    vocab_size: Exp[PosInt] = 1024  # toy byte-level BPE (a small vocabulary keeps GRPO log-probs cheap on CPU)
    # text hidden size (head_dim = hidden_size / num_heads); 256 learns the format in SFT
    hidden_size: Exp[PosInt] = 256
    num_layers: Exp[PosInt] = 2
    num_heads: Exp[PosInt] = 4
    max_image_side: Exp[PosInt] = 112  # processor's longest_edge in pixels (28-pixel multiples)
    sam2_image_size: Exp[PosInt] = 256  # SAM2 input resolution of the micro model
    # the micro SAM2's image encoder width (stages.models.tiny_sam2.ENCODER_WIDTHS: 32 is the widest whose weights
    # stay under 16 MiB in bf16)
    sam2_encoder_width: Exp[Sam2EncoderWidth] = 16

    def _rules(self) -> Iterator[tuple[str, str]]:
        if self.hidden_size % self.num_heads:
            yield "hidden_size", f"must be a multiple of num_heads ({self.num_heads}), got {self.hidden_size}"


# The colours a plain pre-training scene may ask for: the synth palette's names (stages.synth.scene.COLOURS, with the
# same RGB values, so that a colour word means the same pixels in both kinds of scene; a test keeps them equal).
PLAIN_COLOURS = ("red", "green", "blue", "yellow", "orange", "white")


def _seed_rules(seeds: tuple[int, ...]) -> Iterator[tuple[str, str]]:
    """A pre-training stage's seeds: each once, at most MAX_SEEDS (a process each)."""
    if len(set(seeds)) != len(seeds):
        yield "seeds", f"must not repeat a seed, got {list(seeds)}"
    elif len(seeds) > MAX_SEEDS:
        yield "seeds", f"at most {MAX_SEEDS} seeds (a process each), got {len(seeds)}"


@dataclass(frozen=True)
class PretrainPhase:
    """One phase of the pre-training curriculum: `steps` optimizer steps of one mix of scenes (docs/architecture.md)."""

    steps: Exp[PosInt] = 1  # optimizer steps of this phase (the phases run in order; they sum to pretrain.steps)
    frames: Exp[PosInt] = 1  # frames shown per sample, spread over the clip (the evaluation shows evaluate.n_frames)
    # share of the samples that are synth frames (the synth simulator's textured shapes, expressions of every kind);
    # the rest are plain scenes: flat rectangles on a plain background, one named by its colour
    synth_share: Exp[Fraction] = 0.0
    objects: Exp[Annotated[tuple[PosInt, ...], MinLen(1)]] = (3,)  # rectangles per plain frame, one count drawn each
    move: Exp[NonNegInt] = 0  # plain rectangles' largest speed, pixels per clip frame (0: they stay)
    # colours a plain scene may ask for, in the order the growth adds them (the other rectangles take any colour)
    colours: Exp[Annotated[tuple[str, ...], MinLen(1)]] = PLAIN_COLOURS
    # 0: any of `colours` from the phase's first step; k: the first colour only, one more every k steps (the probe's
    # GROW: the one curriculum under which the tiny model bound a colour word to what it sees)
    grow_every: Exp[NonNegInt] = 0

    def _rules(self) -> Iterator[tuple[str, str]]:
        unknown = [c for c in self.colours if c not in PLAIN_COLOURS]
        if unknown:
            yield "colours", f"unknown colour(s) {unknown}: one of {', '.join(PLAIN_COLOURS)}"
        if len(set(self.colours)) != len(self.colours):
            yield "colours", f"colours repeat: {list(self.colours)}"
        if max(self.objects) > len(PLAIN_COLOURS):
            yield "objects", f"at most {len(PLAIN_COLOURS)} rectangles (one per colour), got {max(self.objects)}"


# The default curriculum (bench/probe_grounding.py's U1, then the evaluation's format): three rectangles in every frame,
# red asked first and one more colour every 600 steps (all six from step 3,001), one frame; then six frames, half of
# the samples synth frames.
DEFAULT_CURRICULUM = (PretrainPhase(steps=4200, frames=1, grow_every=600),
                      PretrainPhase(steps=1800, frames=6, synth_share=0.5, move=2))


@dataclass(frozen=True)
class PretrainParams:
    # training seeds, each in a process of its own; the stage keeps the one its held-out check scores best
    seeds: Exp[Annotated[tuple[Seed, ...], MinLen(1)]] = (0, 1, 2)
    base: ExpPath[str] = "models/tiny/qwen25vl"  # the tiny model's config and processor (tiny_models writes it)
    out_dir: ExpPath[str] = "models/pretrain"  # the pre-trained Qwen2.5-VL folder; runs only when model.path is this
    # resumable training state, one folder per seed, removed when a run ends: fixed at serve time, since the stage
    # deletes it and it is no DVC output that DVC would guard
    checkpoint_dir: Server[str] = "models/checkpoints/pretrain"
    steps: Exp[PosInt] = 6000  # optimizer steps per seed; every sample is generated for its step (never one twice)
    curriculum: Exp[Annotated[tuple[PretrainPhase, ...], MinLen(1)]] = DEFAULT_CURRICULUM
    batch_size: Exp[PosInt] = 32  # samples per optimizer step (per seed)
    micro_batches: Exp[PosInt] = 1  # forward/backward passes the step's batch is split into (memory; same update)
    learning_rate: Exp[PosFloat] = 1.0e-3  # AdamW peak LR: linear warm-up, then cosine to 0 (the probe's)
    warmup_steps: Exp[NonNegInt] = 50
    weight_decay: Exp[NonNegFloat] = 0.0
    grad_clip: Exp[PosFloat] = 1.0
    check_samples: Exp[PosInt] = 96  # held-out samples (a fixed stream, the same for every seed) of the last phase
    save_every_steps: Exp[PosInt] = 200  # resumable-state interval (resume after a kill)
    parallel: Server[NonNegInt] = 0  # seeds trained at once: 0 = all on a GPU, one per core on the CPU
    loader_workers: Server[NonNegInt] = 0  # processes rendering batches ahead of the training (GPU: a few per seed)
    cpu_threads: Exp[NonNegInt] = 1  # torch threads per seed on CPU; results depend on it; 0 = torch default
    # The language model's M-RoPE in the pre-trained base (rope has no weights: only the config changes). The random
    # tiny model keeps Qwen's theta 1e6 with [12, 10, 10] of its 32 frequency pairs for time, rows, columns: across
    # the 4×4 image grid at 112 px that rotates rows by < 0.02 rad, so no token can tell where in the image another
    # is. theta 3 with [2, 15, 15] gives rows and columns 0.3-0.9 rad per step (docs/architecture.md).
    rope_theta: Exp[PosFloat] = 3.0
    mrope_section: Exp[tuple[PosInt, ...]] = (2, 15, 15)
    max_new_tokens: Exp[PosInt] = 48  # answer length of the grounding check

    def _rules(self) -> Iterator[tuple[str, str]]:
        if len(self.mrope_section) != 3:
            yield "mrope_section", f"must be 3 counts (time, rows, columns), got {list(self.mrope_section)}"
        covered = sum(phase.steps for phase in self.curriculum)
        if covered != self.steps:
            yield "curriculum", f"phases cover {covered} steps, pretrain.steps is {self.steps}: they must be equal"
        yield from _seed_rules(self.seeds)
        if self.batch_size % self.micro_batches:
            yield "micro_batches", f"must divide batch_size ({self.batch_size}), got {self.micro_batches}"


@dataclass(frozen=True)
class PretrainSam2Params:
    # training seeds (initialisation order and clip stream); each trains apart and the one with the best held-out
    # tracking J is kept (at 1e-3, one seed of three did not learn)
    seeds: Exp[Annotated[tuple[Seed, ...], MinLen(1)]] = (0, 1, 2)
    # seeds trained at once, a process each: 0 = all of them on a GPU, one per core on the CPU (fixed at serve time:
    # it sets how many processes a run starts)
    parallel: Server[NonNegInt] = 0
    base: ExpPath[str] = "models/tiny/sam2"  # folder of the random tiny SAM2 (model.pt + config.yaml; tiny_models)
    out_dir: ExpPath[str] = "models/pretrain_sam2"  # model.pt + config.yaml; runs only when sam2.checkpoint is in it
    # resumable training state, kept across runs and removed when a run ends: fixed at serve time, since the stage
    # deletes it and it is no DVC output that DVC would guard
    checkpoint_dir: Server[str] = "models/checkpoints/pretrain_sam2"
    steps: Exp[PosInt] = 600  # optimizer steps, clips_per_step generated clips each
    # clips per optimizer step, the visible objects of all of them one SAM2 batch. One clip's step is a chain of
    # small kernels that leaves a GPU waiting on launches (1.5 steps/s per seed on an H200, 0.4 on one CPU core), so
    # a GPU takes several clips for about the time of one; > 1 draws full-length clips only (they share a frame count)
    clips_per_step: Exp[Annotated[int, Ge(1), Le(64)]] = 1
    clip_frames: Exp[Annotated[int, Ge(2)]] = 4  # frames per training clip: the prompted frame, then tracked ones
    # objects in a generated training scene (the held-out check and the evaluation keep the synth default, 2-4).
    # With at most 4 objects, SAM2's three candidate masks on a tracked frame cover what is in view whatever the
    # memory holds, and the loss (its best candidate) never asks which one is the target; SAM2 trains on videos
    # with many objects, a few of them targets (its max_num_objects: 3)
    min_objects: Exp[SceneObjects] = 2
    max_objects: Exp[SceneObjects] = 4
    # targets per training clip: 0 = every object visible on its first frame; N = at most N of them, drawn from
    # the clip's own stream (the others stay in the frames as distractors)
    max_targets: Exp[Annotated[int, Ge(0), Le(16)]] = 0
    # share of clips whose targets are prompted with one click inside each (SAM2's training mixes clicks and boxes:
    # a click takes SAM2's three-candidate path, whose output tokens a box prompt falls back to when its own mask
    # is unstable); the other clips are prompted with boxes
    point_prompt_share: Exp[Fraction] = 0.5
    box_noise: Exp[NonNegFloat] = 0.1  # jitter of a prompted box's corners, a share of its size (SAM2's: 0.1)
    # clicks that correct the prompted frame one at a time, each where the last mask is wrong, the loss taken on
    # every pass (SAM2's training: 7); they teach the mask heads to follow a prompt rather than the likeliest object
    correction_clicks: Exp[Annotated[int, Ge(0), Le(16)]] = 7  # at most 16: each is another pass of the mask heads
    # weight of the loss's IoU term (L1 of each candidate's predicted IoU; SAM2.1's: 1). On a tracked frame the mask
    # terms train only the best of the three candidates, so the IoU head, which picks the one kept, is what is taught
    # which candidate is the target
    iou_loss_weight: Exp[Annotated[float, Ge(0), Le(100)]] = 1.0
    # AdamW peak LR, linear warm-up then cosine (at 1e-3 seed 1 of 3 did not learn: held-out J 0.008; at 3e-4 it did)
    learning_rate: Exp[PosFloat] = 3.0e-4
    warmup_steps: Exp[NonNegInt] = 50
    weight_decay: Exp[NonNegFloat] = 0.01
    grad_clip: Exp[PosFloat] = 1.0
    check_videos: Exp[PosInt] = 8  # held-out clips (another seed stream) for the before/after tracking check
    save_every_steps: Exp[PosInt] = 50  # resumable-state interval (resume after a kill)
    cpu_threads: Exp[NonNegInt] = 1  # torch threads on CPU; results depend on it; 0 = torch default

    def _rules(self) -> Iterator[tuple[str, str]]:
        yield from _seed_rules(self.seeds)
        if self.min_objects > self.max_objects:
            yield "min_objects", f"must be ≤ max_objects ({self.max_objects}), got {self.min_objects}"


@dataclass(frozen=True)
class FinetuneSam2Params(PretrainSam2Params):
    """The pre-trained SAM2 trained further (`finetune_sam2`): pretrain_sam2's loop and recipe from its output, with
    the decoder giving one mask on tracked frames. Three candidates on a tracked frame leave the memory unsure which
    one is the target (the loss trains only the best; the IoU head picks the kept one, on another object on 55 % of
    tracked frames); with one, the loss falls on the mask the memory is built from."""

    seeds: Exp[Annotated[tuple[Seed, ...], MinLen(1)]] = (10,)
    base: ExpPath[str] = "models/pretrain_sam2"  # the SAM2 it starts from (pretrain_sam2's committed output)
    # model.pt + config.yaml; runs only when sam2.checkpoint is in it. Under models/pretrain*/: the frozen pre-trained
    # weights are the only files over 5 MB git tracks
    out_dir: ExpPath[str] = "models/pretrain_sam2_finetuned"
    checkpoint_dir: Server[str] = "models/checkpoints/finetune_sam2"
    steps: Exp[PosInt] = 400
    clips_per_step: Exp[Annotated[int, Ge(1), Le(64)]] = 4
    clip_frames: Exp[Annotated[int, Ge(2)]] = 8
    learning_rate: Exp[PosFloat] = 1.0e-4
    # the model trained, checked and published answers a tracked frame with one mask
    # (`++model.multimask_output_for_tracking=false` added to the base's config); false: as the base does (three)
    one_mask_tracking: Exp[bool] = True


@dataclass(frozen=True)
class ModelParams:
    path: ExpPath[str] = "models/tiny/qwen25vl"  # local Qwen2.5-VL checkpoint folder (config, weights, processor)
    dtype: Exp[Literal["auto", "float32", "bfloat16"]] = "auto"  # auto: bf16 on GPU, fp32 on CPU


@dataclass(frozen=True)
class Sam2Params:
    checkpoint: ExpPath[str] = "models/tiny/sam2/model.pt"  # {"model": state_dict}, as the official sam2.1_hiera_*.pt
    config: ExpPath[str] = "models/tiny/sam2/config.yaml"  # a sam2 package config name or a vrsflow config file
    dtype: Exp[Literal["auto", "float32", "bfloat16"]] = "auto"


@dataclass(frozen=True)
class ShardParams:
    samples_per_shard: Exp[PosInt] = 256  # WebDataset samples per tar
    jpeg_quality: Exp[JpegQuality] = 95  # frames re-encoded at train size
    export_sharegpt: Exp[bool] = True  # LLaMA-Factory ShareGPT JSON + images (SFT)
    export_verl: Exp[bool] = True  # verl parquet (GRPO, eval)


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


BENCHMARK_NAMES = ("revos", "mevis", "reasonvos", "refytvos", "refdavis")


@dataclass(frozen=True)
class BenchmarksParams:
    names: Exp[NonEmptyNames] = BENCHMARK_NAMES  # one `bench@<name>` DVC stage each (docs/benchmarks.md)
    models: ExpPath[dict[str, str]] = field(default_factory=lambda: {  # table rows: label → Qwen2.5-VL folder
        "base": "models/tiny/qwen25vl", "sft": "models/sft/merged", "grpo": "models/grpo/merged"})
    # name → published root; missing = synthetic from data.root
    roots: ExpPath[dict[str, str]] = field(default_factory=dict)
    # name → split of a given root; missing = evaluation split
    splits: Exp[dict[str, str]] = field(default_factory=dict)
    videos: Exp[NonNegInt] = 1  # first videos per benchmark; 0 = all
    expressions: Exp[NonNegInt] = 2  # first expressions of those (Ref-DAVIS17: whole objects, 4 each); 0 = all
    # mevis / reasonvos: an expression whose prediction video folder is missing scores 0 (zero) or is left out
    # (skip); authors = the dataset authors' script (mevis: zero, reasonvos: skip)
    missing: Exp[Literal["authors", "zero", "skip"]] = "authors"
    # a `ground_truth` row (the ground-truth answers through the same segmenter and protocol: the ceiling), an
    # `empty_answer` row (no boxes: empty masks, what answering nothing scores) and, in the pipeline, a
    # `constant_answer` row (the SFT traces' prior given to every query)
    reference: Exp[bool] = True

    def _rules(self) -> Iterator[tuple[str, str]]:
        for name in (*self.names, *self.roots, *self.splits):
            if name not in BENCHMARK_NAMES:
                yield "names", f"unknown benchmark {name!r} (one of {', '.join(BENCHMARK_NAMES)})"
        if not self.models:
            yield "models", "needs at least one model"
        for label in ("ground_truth", "empty_answer", "constant_answer"):
            if label in self.models:
                yield "models", f"{label!r} is the label of a reference row (benchmarks.reference): rename it"


@dataclass(frozen=True)
class RewardWeights:
    format: Exp[NonNegFloat] = 1.0  # weight of each reward component (Veason-R1 / RCoT-Seg / VideoSeg-R1: all 1)
    keyframe: Exp[NonNegFloat] = 1.0
    spatial: Exp[NonNegFloat] = 1.0
    consistency: Exp[NonNegFloat] = 1.0
    rcot_match: Exp[NonNegFloat] = 1.0
    aks_option: Exp[NonNegFloat] = 2.0  # RCoT-Seg λ_a = 2 (λ_f = the format weight = 1)
    negative_point: Exp[NonNegFloat] = 1.0
    non_repeat: Exp[NonNegFloat] = 1.0


@dataclass(frozen=True)
class RewardParams:
    components: Exp[NonEmptyNames] = ("format", "keyframe", "spatial", "consistency")  # Veason-R1's four
    weights: RewardWeights = field(default_factory=RewardWeights)
    failure_score: Exp[NonPosFloat] = 0.0  # base total of an unparseable completion (≤ 0), plus its format credit
    iou_threshold: Exp[Fraction] = 0.5  # RCoT-Seg / VisionReasoner: a match counts when IoU > 0.5
    box_l1_threshold: Exp[PosFloat] = 10.0  # mean box-corner L1 in pixels at threshold_size (VisionReasoner: 10)
    point_l1_threshold: Exp[PosFloat] = 30.0  # point distance in pixels at threshold_size (VisionReasoner: 30)
    threshold_size: Exp[PosInt] = 840  # image side the pixel thresholds are stated at (RCoT-Seg: 840)
    # VideoSeg-R1 τ_neg: negative points count within this many px of the target
    negative_point_tau: Exp[PosFloat] = 40.0
    length_penalty: Exp[bool] = False  # VideoSeg-R1 soft length penalty (multiplies the total)
    length_beta: Exp[NonNegFloat] = 0.002  # penalty per token over the difficulty budget
    # tokenizer folder counting reasoning tokens in both engines; "" = whitespace words
    length_tokenizer: ExpPath[str] = ""
    mask_threshold: Exp[float] = 0.0  # SAM2 mask logit threshold for the consistency reward

    def _rules(self) -> Iterator[tuple[str, str]]:
        known = [f.name for f in fields(RewardWeights)]
        for name in self.components:
            if name not in known:
                yield "components", f"unknown component '{name}' (known: {', '.join(known)})"
        if len(set(self.components)) != len(self.components):
            yield "components", f"a component is listed twice: {list(self.components)}"


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


# -- later stages add their block classes above this line --


@dataclass(frozen=True)
class Params:
    """All of params.yaml. Blocks for later stages are added as their stages arrive."""

    seed: Exp[Seed] = 0  # global seed; every stage derives its own (seed, stage, sample id) seeds from it
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
    pretrain: PretrainParams = field(default_factory=PretrainParams)
    pretrain_sam2: PretrainSam2Params = field(default_factory=PretrainSam2Params)
    finetune_sam2: FinetuneSam2Params = field(default_factory=FinetuneSam2Params)
    model: ModelParams = field(default_factory=ModelParams)
    sam2: Sam2Params = field(default_factory=Sam2Params)
    shard: ShardParams = field(default_factory=ShardParams)
    sft: SftParams = field(default_factory=SftParams)
    evaluate: EvaluateParams = field(default_factory=EvaluateParams)
    benchmarks: BenchmarksParams = field(default_factory=BenchmarksParams)
    reward: RewardParams = field(default_factory=RewardParams)
    grpo: GrpoParams = field(default_factory=GrpoParams)
    # -- later stages add their block field above this line (one line each) --


class _ParamsLoader(yaml.SafeLoader):
    """PyYAML's safe loader reading floats as YAML 1.2 does.

    PyYAML follows YAML 1.1, where `1e-05` (no dot) is a string; DVC writes `-S` floats that way
    (ruamel, YAML 1.2), so `dvc exp run -S grpo.learning_rate=1e-5` must still load as a number.
    """


_ParamsLoader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_ParamsLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def read_params_file(path: str | Path = "params.yaml") -> dict:
    """The raw mapping of a params file (no validation of its keys yet).

    Raises:
        ParamsError: a missing file, malformed YAML, or a top level that is not a mapping.
    """
    path = Path(path)
    try:
        raw = yaml.load(path.read_text(), Loader=_ParamsLoader)  # noqa: S506 (a SafeLoader)
    except FileNotFoundError as err:
        raise ParamsError(f"{path}: no such file") from err
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ParamsError(f"{path}: malformed YAML{where}: {problem}") from err
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ParamsError(f"{path}: expected a mapping of params blocks, got {type(raw).__name__}")
    return raw


def load_params(path: str | Path = "params.yaml") -> Params:
    """Read and validate params.yaml.

    Raises:
        ParamsError: unknown key, wrong type, out-of-range value, broken rule, or malformed YAML
            (one line naming the file and the dotted key).
    """
    raw = read_params_file(path)
    try:
        return build(Params, raw)
    except ParamsError as err:
        raise ParamsError(f"{path}: {err}") from err


# Characters refused in override values: they mean something to a shell or to the override grammar
# DVC's `-S` parses (Hydra: quotes, `$` interpolation), and no params value needs them.
FORBIDDEN_IN_OVERRIDES = frozenset(";&|$`<>\"'\\")
KEY_PATTERN = r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*"


def cli_overrides(items: Iterable[str], error: type[Exception] = ValueError) -> dict[str, str]:
    """`-S key=value` command-line items as `{"key": "value"}` for `apply_overrides` (the last of a repeated key
    wins, as in `dvc exp run -S`); an item without "=" raises `error` (the caller's usage-error type) naming it."""
    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise error(f"-S {item!r}: expected key=value")
        overrides[key] = value
    return overrides


def apply_overrides(raw: Mapping[str, Any], overrides: Mapping[str, Any]) -> tuple[Params, dict[str, Any]]:
    """Lay `{"dotted.key": value}` overrides over a params mapping and validate the result.

    A string value is read as `dvc exp run -S` reads it (a YAML scalar or list: "32" → 32, "[a, b]" → a
    list), except for text params, which take the string as it is.

    Args:
        raw: the params file's mapping (`read_params_file`).
        overrides: dotted params keys → values (strings as typed in the UI, or typed values).

    Returns:
        The validated params, and the overrides as typed values (same keys).

    Raises:
        ParamsError: a key that is not a params value (with "did you mean"), a value of the wrong
            type or range, a refused character, or a rule the merged params break.
    """
    typed: dict[str, Any] = {}
    nested: dict[str, Any] = {}
    for key, value in overrides.items():
        if not isinstance(key, str) or not re.fullmatch(KEY_PATTERN, key):
            raise ParamsError(f"{str(key)[:80]!r}: not a params key (dotted lower-case names, e.g. sample.grpo_size)")
        tp = field_type(Params, key)
        if is_block(tp):
            raise ParamsError(f"{key}: is a block of params; override one of its keys (e.g. {key}.<name>)")
        typed[key] = _override_value(tp, value, key)
        node = nested
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = typed[key]
    return build(Params, deep_merge(raw, nested)), typed


def _override_value(tp: Any, value: Any, key: str) -> Any:
    for text in value if isinstance(value, list | tuple) else [value]:
        if isinstance(text, str):
            bad = sorted({c for c in text if c in FORBIDDEN_IN_OVERRIDES or ord(c) < 32})
            if bad:
                raise ParamsError(f"{key}: refusing the character(s) {' '.join(map(repr, bad))} in an override value")
    if not isinstance(value, str) or is_str_like(tp):
        return value
    if "{" in value:  # a mapping ({name:mevis,share:1.0}): read with the grammar DVC's -S uses (Hydra), not YAML
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from hydra.errors import HydraException

        try:
            return OverridesParser.create().parse_overrides([f"value={value}"])[0].value()
        except HydraException as err:
            raise ParamsError(f"{key}: cannot read {value!r} as a value") from err
    try:
        return yaml.load(value, Loader=_ParamsLoader) if value.strip() else value  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as err:
        raise ParamsError(f"{key}: cannot read {value!r} as a value") from err
