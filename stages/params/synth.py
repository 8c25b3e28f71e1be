"""`synth`: the synthetic ReVOS-layout dataset the default run trains and evaluates on."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated, Literal

from annotated_types import Ge, Gt, Le, Lt

from stages.core.params import JpegQuality, PosInt, SceneObjects, Seed
from stages.core.typed_config import Exp, ExpPath


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
