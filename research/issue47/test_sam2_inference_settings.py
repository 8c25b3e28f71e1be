"""sam2_inference_settings.py: each setting reaches the SAM2 that sam2's own builder makes, and only it."""

from __future__ import annotations

from pathlib import Path

import pytest
from sam2_inference_settings import config_with

from stages.sam2_wrapper import load_video_predictor
from stages.tiny_models.tiny_sam2 import build_tiny_sam2


@pytest.fixture(scope="module")
def tiny_sam2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-sam2")
    build_tiny_sam2(folder, 64, 0)
    return folder


def test_a_setting_reaches_the_predictor_sam2_builds(tiny_sam2: Path, tmp_path: Path) -> None:
    checkpoint, config = str(tiny_sam2 / "model.pt"), tiny_sam2 / "config.yaml"
    as_configured = load_video_predictor(checkpoint, str(config), "cpu")
    one_mask = load_video_predictor(checkpoint, str(config_with(config, [
        "++model.multimask_output_for_tracking=false", "++model.memory_temporal_stride_for_eval=2"], tmp_path)), "cpu")
    assert as_configured.multimask_output_for_tracking is True and as_configured.memory_temporal_stride_for_eval == 1
    assert one_mask.multimask_output_for_tracking is False and one_mask.memory_temporal_stride_for_eval == 2
    # the config's own overrides still apply (the tiny architecture), so the same weights load
    assert one_mask.image_size == as_configured.image_size == 64
    assert all((a == b).all() for a, b in zip(one_mask.state_dict().values(), as_configured.state_dict().values(),
                                              strict=True))


def test_the_record_keeps_what_trained_a_pretrain_sam2_folder(tmp_path: Path) -> None:
    from sam2_inference_settings import training_record

    assert training_record(tmp_path) is None  # a checkpoint from elsewhere: nothing to keep
    (tmp_path / "seeds.json").write_text('{"chosen_seed": 3, "seeds": {"3": {"track_iou_after": 0.4}}}')
    (tmp_path / "lineage.json").write_text('{"extra": {"steps": 1500, "seeds": [2, 3]}, '
                                           '"code_version": {"git": "abc"}, "params": {"pretrain_sam2": {}}}')
    assert training_record(tmp_path) == {
        "seeds": {"chosen_seed": 3, "seeds": {"3": {"track_iou_after": 0.4}}},
        "lineage": {"extra": {"steps": 1500, "seeds": [2, 3]}, "code_version": {"git": "abc"}}}
