"""bench/bench_sam2_pretrain.py: fine-tuning a trained SAM2 folder (`--init`) with an override of how the model runs
(`--architecture`) trains and publishes that config, leaves the folder it started from as it was, and an override
that changes a weight's shape is refused where sam2's builder loads the checkpoint."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from bench.bench_sam2_pretrain import pretrain_seed
from stages.params import read_params_file
from stages.pretrain_sam2 import CHECKPOINT, CONFIG
from stages.sam2_wrapper import load_video_predictor

ONE_MASK = "++model.multimask_output_for_tracking=false"
SHORT = ["pretrain_sam2.steps=1", "pretrain_sam2.check_videos=1", "pretrain_sam2.correction_clicks=0",
         "pretrain_sam2.clip_frames=2", "pretrain_sam2.warmup_steps=1"]


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_an_init_folder_fine_tunes_under_the_added_override_and_stays_as_it_was(project_root: Path,
                                                                              tmp_path: Path) -> None:
    committed = project_root / "models/pretrain_sam2"
    before = _digest(committed)
    own = yaml.safe_load((committed / CONFIG).read_text())["overrides"]
    raw = read_params_file(project_root / "params.yaml")
    figures, out = pretrain_seed(raw, SHORT, 10, tmp_path, (ONE_MASK,), committed)
    assert figures["steps"] == 1 and 0.0 <= figures["track_iou_after"] <= 1.0
    # the trained folder's config: the init folder's own overrides, then the added one
    assert yaml.safe_load((out / CONFIG).read_text())["overrides"] == [*own, ONE_MASK]
    predictor = load_video_predictor(str(out / CHECKPOINT), str(out / CONFIG), "cpu")
    assert predictor.multimask_output_for_tracking is False
    assert load_video_predictor(str(committed / CHECKPOINT), str(committed / CONFIG),
                                "cpu").multimask_output_for_tracking is True
    assert _digest(committed) == before


def test_an_init_override_that_changes_a_weights_shape_fails_at_load(project_root: Path, tmp_path: Path) -> None:
    raw = read_params_file(project_root / "params.yaml")
    with pytest.raises(RuntimeError, match="memory_attention"):
        pretrain_seed(raw, SHORT, 10, tmp_path, ("++model.memory_attention.num_layers=2",),
                      project_root / "models/pretrain_sam2")
