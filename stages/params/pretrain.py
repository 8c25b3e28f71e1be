"""`pretrain`: the tiny Qwen2.5-VL's pre-training on synthetic grounding (seeds, curriculum)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Literal

from annotated_types import MinLen

from stages.core.params import Fraction, NonNegFloat, NonNegInt, PosFloat, PosInt, Seed
from stages.core.typed_config import Exp, ExpPath, Server

# The colours a plain pre-training scene may ask for: the synth palette's names (stages.synth.scene.COLOURS, with the
# same RGB values, so that a colour word means the same pixels in both kinds of scene; a test keeps them equal).
PLAIN_COLOURS = ("red", "green", "blue", "yellow", "orange", "white")


# seeds a pre-training stage trains, one after another in at most stages.models.seed_runs.MAX_AT_ONCE processes at
# once: a screened run (`screen`) draws many seeds and keeps those that find objects (decision 021)
MAX_SEEDS = 64
MAX_HELD_OUT = 1024  # held-out samples of a check or a selection (kept rendered in memory for the whole run)


def seed_rules(seeds: tuple[int, ...]) -> Iterator[tuple[str, str]]:
    """A pre-training stage's seeds: each once, at most MAX_SEEDS."""
    if len(set(seeds)) != len(seeds):
        yield "seeds", f"must not repeat a seed, got {list(seeds)}"
    elif len(seeds) > MAX_SEEDS:
        yield "seeds", f"at most {MAX_SEEDS} seeds, got {len(seeds)}"


@dataclass(frozen=True)
class PretrainPhase:
    """One phase of the pre-training curriculum: `steps` optimizer steps of one mix of scenes (docs/architecture.md)."""

    steps: Exp[PosInt] = 1  # optimizer steps of this phase (the phases run in order; they sum to pretrain.steps)
    frames: Exp[PosInt] = 1  # frames shown per sample, spread over the clip (the evaluation shows evaluate.n_frames)
    # share of the samples that are synth frames (the synth simulator's shapes, expressions of every kind); the rest
    # are the phase's `scene`
    synth_share: Exp[Fraction] = 0.0
    # rectangles: flat rectangles on a plain background, one named by its colour ("the red rectangle"); shapes: synth
    # clips at the synth stage's scale, one shape named by its appearance ("the red star")
    scene: Exp[Literal["rectangles", "shapes"]] = "rectangles"
    objects: Exp[Annotated[tuple[PosInt, ...], MinLen(1)]] = (3,)  # objects per scene, one count drawn each
    move: Exp[NonNegInt] = 0  # rectangles' largest speed, pixels per clip frame (0: they stay; shapes move as synth's)
    # colours a scene may ask for, in the order the growth adds them (the other objects take any colour)
    colours: Exp[Annotated[tuple[str, ...], MinLen(1)]] = PLAIN_COLOURS
    # 0: any of `colours` from the phase's first step; k: the first colour only, one more every k steps (the probe's
    # GROW: the one curriculum under which the tiny model bound a colour word to what it sees)
    grow_every: Exp[NonNegInt] = 0
    # the thought before each answer: sentence ("The target is clearest at 4s.") | compact (the template teacher's
    # three steps in a few words, the last the target's place: teacher.template_style compact writes the same for the
    # SFT traces). A phase that must teach looking keeps sentence: with compact the box learns to follow the place
    # words, which are given in training, and the place words alone must learn to look (docs/decisions/021)
    think: Exp[Literal["sentence", "compact"]] = "sentence"

    def _rules(self) -> Iterator[tuple[str, str]]:
        unknown = [c for c in self.colours if c not in PLAIN_COLOURS]
        if unknown:
            yield "colours", f"unknown colour(s) {unknown}: one of {', '.join(PLAIN_COLOURS)}"
        if len(set(self.colours)) != len(self.colours):
            yield "colours", f"colours repeat: {list(self.colours)}"
        if max(self.objects) > len(PLAIN_COLOURS):
            yield "objects", f"at most {len(PLAIN_COLOURS)} objects (one per colour), got {max(self.objects)}"


@dataclass(frozen=True)
class PretrainScreen:
    """A bar a seed must clear to go on training: after optimizer step `step`, its greedy answers to `screen_samples`
    held-out samples of the phase it is in (the colours asked so far) must reach `min_box_iou`. Whether a fresh tiny
    model finds objects at all is a draw on its seed (docs/decisions/021: one shape per scene was found by step
    1,000 in two seeds of six), so a seed that has not by then is stopped and its core goes to the next seed."""

    step: Exp[PosInt] = 1000
    min_box_iou: Exp[Fraction] = 0.2


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
    # resumable training state, one folder per seed, a listed seed's removed when the stage publishes (an unlisted
    # seed's stays, to resume when it is listed again): fixed at serve time, since the stage deletes in it and it is
    # no DVC output that DVC would guard
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
    # every k steps of the last phase each seed answers `select_samples` held-out samples of that phase (a stream
    # apart from the check's) and the stage publishes the weights of its best such step, not only its last (a seed
    # that found the shapes lost them by its end: docs/decisions/021); 0 = the last weights
    select_every_steps: Exp[NonNegInt] = 0
    select_samples: Exp[PosInt] = 48
    # bars a seed must clear on its way (none: every seed trains to the end); a seed that misses one stops there, and
    # the stage keeps the best of those that cleared them all (none did: it fails, keeping every seed's outcome, so
    # that a rerun with more seeds trains only the new ones)
    screen: Exp[tuple[PretrainScreen, ...]] = ()
    screen_samples: Exp[PosInt] = 48  # held-out samples a screen asks (a stream apart), at most 1024 as check_samples
    save_every_steps: Exp[PosInt] = 200  # resumable-state interval (resume after a kill)
    parallel: Server[NonNegInt] = 0  # seeds trained at once: 0 = all on a GPU (up to 8), one per core on the CPU
    loader_workers: Server[NonNegInt] = 0  # processes rendering batches ahead of the training (GPU: a few per seed)
    cpu_threads: Exp[NonNegInt] = 1  # torch threads per seed on CPU; results depend on it; 0 = torch default
    # The language model's M-RoPE in the pre-trained base (rope has no weights: only the config changes). The random
    # tiny model keeps Qwen's theta 1e6 with [12, 10, 10] of its 32 frequency pairs for time, rows, columns: across
    # the 4×4 image grid at 112 px that rotates rows by < 0.02 rad, so no token can tell where in the image another
    # is. theta 3 with [2, 15, 15] gives rows and columns 0.3-0.9 rad per step (docs/architecture.md).
    rope_theta: Exp[PosFloat] = 3.0
    mrope_section: Exp[tuple[PosInt, ...]] = (2, 15, 15)
    max_new_tokens: Exp[PosInt] = 48  # answer length of the grounding check (a compact thought: 96)

    def _rules(self) -> Iterator[tuple[str, str]]:
        if len(self.mrope_section) != 3:
            yield "mrope_section", f"must be 3 counts (time, rows, columns), got {list(self.mrope_section)}"
        covered = sum(phase.steps for phase in self.curriculum)
        if covered != self.steps:
            yield "curriculum", f"phases cover {covered} steps, pretrain.steps is {self.steps}: they must be equal"
        yield from seed_rules(self.seeds)
        steps = [bar.step for bar in self.screen]
        if steps != sorted(set(steps)) or (steps and steps[-1] >= self.steps):
            yield "screen", f"steps must rise, each below pretrain.steps ({self.steps}), got {steps}"
        # each held in memory, rendered, for the whole run (a screen's only while it asks)
        for name in ("check_samples", "select_samples", "screen_samples"):
            if getattr(self, name) > MAX_HELD_OUT:
                yield name, f"at most {MAX_HELD_OUT} held-out samples, got {getattr(self, name)}"
        if self.batch_size % self.micro_batches:
            yield "micro_batches", f"must divide batch_size ({self.batch_size}), got {self.micro_batches}"
