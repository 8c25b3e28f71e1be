"""A tiny project up to the keyframes stage, through the real stages, for tests of the stages that read it
(cot, difficulty, the teacher's failures)."""

from __future__ import annotations

from pathlib import Path

from stages.core.runner import RunnerParams
from stages.ingest import ingest
from stages.keyframes import select_keyframes
from stages.params.ingest import IngestParams
from stages.params.keyframes import KeyframesParams
from stages.params.sample import SampleParams
from stages.sample import sample_pools
from tests.revos_factory import simple_video, write_root


def keyframed_project(base: Path, n_train: int, n_frames: int, sft_first_k: int, grpo_size: int,
                      train_size: int | None = None) -> Path:
    """`n_train` training videos of `n_frames` frames and one validation video under `base/root`, then ingest,
    sample and keyframes (`train_size`, None = the default) into `base/{index,sample,keyframes}`; returns `base`."""
    write_root(base / "root", [simple_video(f"S/train/v{i}", n_frames=n_frames) for i in range(n_train)]
               + [simple_video("S/valid/w", split="valid")])
    ingest(IngestParams(), base / "root", base / "index", RunnerParams(kind="serial"))
    sample_pools(SampleParams(sft_first_k=sft_first_k, grpo_size=grpo_size), 0, base / "index", base / "sample")
    keyframes = KeyframesParams() if train_size is None else KeyframesParams(train_size=train_size)
    select_keyframes(keyframes, 0, base / "root", base / "index", base / "sample", base / "keyframes")
    return base
