"""pretrain stage: grounding scenes true by construction and apart from the evaluation videos; a real model.path
skips the stage; a short run writes a Qwen2.5-VL folder the pipeline loads like any checkpoint."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from schemas.answer import parse_answer
from stages.core.params import (
    ModelParams,
    ParamsError,
    PretrainParams,
    SynthScale,
    TinyModelsParams,
    apply_overrides,
    read_params_file,
)
from stages.core.report import SKIPPED
from stages.models import load_vlm
from stages.models.tiny_qwen import build_tiny_qwen
from stages.pretrain import box_iou, pretrain
from stages.pretrain.scenes import scene_samples

SIZE = 56
SCALE = SynthScale()


def test_scenes_are_deterministic_and_streams_differ() -> None:
    a = scene_samples(0, "train", 2, 4, SIZE, SCALE)
    b = scene_samples(0, "train", 2, 4, SIZE, SCALE)
    c = scene_samples(0, "check", 2, 4, SIZE, SCALE)
    assert [(s.expression, s.keyframe, s.boxes) for s in a] == [(s.expression, s.keyframe, s.boxes) for s in b]
    assert [np.asarray(i).tobytes() for i in a[0].images] == [np.asarray(i).tobytes() for i in b[0].images]
    assert np.asarray(a[0].images[0]).tobytes() != np.asarray(c[0].images[0]).tobytes()


def test_answers_parse_and_box_the_target_inside_the_frame() -> None:
    samples = scene_samples(3, "train", 3, 6, SIZE, SCALE)
    assert samples and all(s.type_id in (0, 1) for s in samples)
    for s in samples:
        assert s.keyframe in s.timestamps and len(s.images) == len(s.timestamps) <= 6
        assert all(img.size == (SIZE, SIZE) for img in s.images)
        answer = parse_answer(s.response)
        assert answer is not None and answer.keyframe_timestamp == s.keyframe
        assert [list(map(int, box)) for box in answer.boxes] == s.boxes
        for x1, y1, x2, y2 in s.boxes:
            assert 0 <= x1 < x2 <= SIZE and 0 <= y1 < y2 <= SIZE


def test_box_iou() -> None:
    assert box_iou([0, 0, 10, 10], [0, 0, 10, 10]) == 1.0
    assert box_iou([0, 0, 10, 10], [5, 0, 15, 10]) == pytest.approx(50 / 150)
    assert box_iou([0, 0, 10, 10], [10, 10, 20, 20]) == 0.0


def test_a_real_model_path_skips_the_stage(tmp_path: Path) -> None:
    params = PretrainParams(out_dir=str(tmp_path / "pretrain"), base=str(tmp_path / "absent"))
    report = pretrain(params, ModelParams(path="/ckpt/Qwen2.5-VL-3B-Instruct"), SIZE, tmp_path / "pretrain", tmp_path)
    assert report.metrics == {"skipped": 1}
    assert json.loads((tmp_path / "pretrain" / SKIPPED).read_text())["skipped"] is True
    assert not (tmp_path / "pretrain" / "config.json").exists()
    assert (tmp_path / "pretrain_curve.tsv").read_text() == "step\tloss\tlr\n"


@pytest.mark.slow  # ~1 min alone, minutes on a loaded machine
def test_a_short_run_writes_a_loadable_checkpoint_and_lowers_the_loss(tmp_path: Path) -> None:
    torch.set_num_threads(2)
    base = tmp_path / "tiny"
    build_tiny_qwen(TinyModelsParams(vocab_size=512, hidden_size=64, num_layers=1, max_image_side=SIZE), base)
    out = tmp_path / "pretrain"
    params = replace(PretrainParams(), base=str(base), out_dir=str(out), videos=2, check_videos=1, n_frames=2,
                     epochs=3.0, batch_size=4, learning_rate=5e-3, max_new_tokens=16, mrope_section=(2, 3, 3))
    report = pretrain(params, ModelParams(path=str(out)), SIZE, out, tmp_path / "metrics")
    metrics = report.metrics
    assert metrics["steps"] > 0 and metrics["train_samples"] > 0 and metrics["processes"] == 1
    curve = (tmp_path / "metrics" / "pretrain_curve.tsv").read_text().splitlines()
    assert len(curve) == metrics["steps"] + 1
    losses = [float(line.split("\t")[1]) for line in curve[1:]]
    assert losses[-1] < losses[0]
    model, processor = load_vlm(out, "float32")  # the same loading path as a real checkpoint
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert processor.tokenizer.chat_template
    assert json.loads((out / "lineage.json").read_text())["stage"] == "pretrain"
    for key in ("parse_rate", "box_iou", "keyframe_hit_rate"):
        assert 0.0 <= metrics[f"{key}_before"] <= 1.0 and 0.0 <= metrics[f"{key}_after"] <= 1.0


def test_the_pretrained_base_gets_the_grounding_rope_and_a_bad_section_is_named(tmp_path: Path) -> None:
    """Rope has no weights: the base's config changes, and the language model's rotary frequencies with it."""
    base = tmp_path / "tiny"
    build_tiny_qwen(TinyModelsParams(vocab_size=512, hidden_size=64, num_layers=1, max_image_side=SIZE), base)
    model, _ = load_vlm(base, "float32", "cpu", rope_parameters={"rope_theta": 3.0, "mrope_section": [2, 3, 3]})
    rope = model.config.text_config.rope_parameters
    assert rope["rope_theta"] == 3.0 and rope["mrope_section"] == [2, 3, 3]
    rotary = model.model.language_model.rotary_emb
    assert rotary.mrope_section == [2, 3, 3]
    # head_dim 16: 8 frequency pairs theta^(-2k/16), k = 0..7 (the RoPE definition)
    assert torch.allclose(rotary.inv_freq, torch.tensor([3.0 ** (-2 * k / 16) for k in range(8)]))
    untouched, _ = load_vlm(base, "float32", "cpu")
    assert untouched.config.text_config.rope_parameters["rope_theta"] == 1_000_000.0
    out = tmp_path / "pretrain"
    params = replace(PretrainParams(), base=str(base), out_dir=str(out), videos=1, check_videos=1)
    out.mkdir()
    (out / "kept").write_text("an earlier output")
    with pytest.raises(ValueError, match=r"^pretrain\.mrope_section \[2, 15, 15\] must sum to 8 \(head_dim / 2"):
        pretrain(params, ModelParams(path=str(out)), SIZE, out, tmp_path / "metrics")
    assert (out / "kept").read_text() == "an earlier output"  # nothing deleted before the check
    with pytest.raises(FileNotFoundError, match=r"^pretrain\.base .*absent is not a model folder"):
        pretrain(replace(params, base=str(tmp_path / "absent")), ModelParams(path=str(out)), SIZE, out, tmp_path)
    assert (out / "kept").exists()
    raw = read_params_file(Path(__file__).resolve().parents[2] / "params.yaml")
    with pytest.raises(ParamsError, match=r"pretrain\.mrope_section: must be 3 counts \(time, rows, columns\)"):
        apply_overrides(raw, {"pretrain.mrope_section": "[16, 16]"})
