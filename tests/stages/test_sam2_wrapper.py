"""SAM2 propagation with a micro random SAM2: shared encoding gives the same masks as re-encoding per
rollout, both directions are covered, frames from arrays or a JPEG folder; the consistency reward on it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

pytest.importorskip("sam2")

from stages.params.reward import RewardParams  # noqa: E402
from stages.sam2_wrapper import BoxGroup, load_video_predictor, propagate_boxes, propagate_groups  # noqa: E402
from tests.sam2_probe import count_encoded_frames
from tests.stages.grpo_factory import answer, frames, ground_truth  # noqa: E402


@pytest.fixture(scope="module")
def predictor(tmp_path_factory):
    from stages.tiny_models.tiny_sam2 import build_tiny_sam2

    torch.set_num_threads(1)  # two threads wait on each other beside the other worker (tests/conftest.py)
    checkpoint, config = build_tiny_sam2(tmp_path_factory.mktemp("sam2"), image_size=128, seed=0)
    return load_video_predictor(str(checkpoint), str(config), device="cpu")


def test_shared_encoding_equals_reencoding(predictor):
    video = frames()
    groups = [BoxGroup(1, [[12, 10, 32, 30]]), BoxGroup(2, [[20, 10, 36, 26], [0, 0, 10, 10]]), BoxGroup(1, [])]
    shared = propagate_groups(predictor, video, groups)
    baseline = propagate_groups(predictor, video, groups, share_encoding=False)
    assert [m.shape for m in shared] == [(1, 4, 56, 56), (2, 4, 56, 56), (0, 4, 56, 56)]
    for a, b in zip(shared, baseline, strict=True):
        assert np.array_equal(a, b)
    with pytest.raises(ValueError, match="keyframe 9"):
        propagate_groups(predictor, video, [BoxGroup(9, [[0, 0, 5, 5]])])


def test_each_frame_is_encoded_once_for_all_groups(predictor, monkeypatch):
    video = frames()
    encoded = count_encoded_frames(predictor, monkeypatch)
    groups = [BoxGroup(0, [[12, 10, 32, 30]]), BoxGroup(3, [[20, 10, 36, 26]])]
    propagate_groups(predictor, video, groups)
    assert encoded == [len(video)]  # every frame in one batch (SAM2's warm-up skipped); none twice
    encoded.clear()
    propagate_groups(predictor, video, groups, share_encoding=False)
    # the released way: a fresh state per group re-encodes (the warm-up frame 0, the keyframe, then every
    # frame it visits; frame 0 twice unless it is the keyframe)
    assert sum(encoded) == sum(len(video) + (g.key_idx != 0) for g in groups) == 9


def test_rollouts_with_distinct_keyframes_share_one_encoder_pass_and_equal_per_rollout_masks(predictor, monkeypatch):
    # GRPO's case: rollouts of one prompt (5 here), keyframes on 4 distinct frames (the first and last), 1–2
    # boxes each; fp32 on the CPU, so the shared path must give the per-rollout path's masks bit for bit
    video = frames()
    boxes = [[12, 10, 32, 30], [20, 10, 36, 26], [4, 10, 16, 22], [30, 30, 50, 52]]
    groups = [BoxGroup(key, [boxes[i % 4]] + ([boxes[(i + 1) % 4]] if i % 3 == 0 else []))
              for i, key in enumerate([0, 3, 1, 2, 3])]
    encoded = count_encoded_frames(predictor, monkeypatch)
    shared = propagate_groups(predictor, video, groups)
    assert encoded == [len(video)]  # one image-encoder pass over every frame, whatever the keyframes
    per_rollout = propagate_groups(predictor, video, groups, share_encoding=False)  # a fresh state each
    for g, (a, b) in enumerate(zip(shared, per_rollout, strict=True)):
        assert a.shape == (len(groups[g].boxes), len(video), 56, 56) and np.array_equal(a, b), f"rollout {g}"
    assert sum(int(m.sum()) for m in shared) > 0  # masks with pixels: the equality is not of empty masks


def test_gpu_only_sam2_options_are_refused_on_the_cpu(tmp_path):
    from stages.tiny_models.tiny_sam2 import build_tiny_sam2

    checkpoint, config = build_tiny_sam2(tmp_path, image_size=128, seed=0)
    with pytest.raises(ValueError, match="sam2: vos_optimized is GPU-only"):
        load_video_predictor(str(checkpoint), str(config), device="cpu", vos_optimized=True)
    with pytest.raises(ValueError, match="sam2: bf16 autocast is GPU-only"):
        load_video_predictor(str(checkpoint), str(config), device="cpu", dtype="bfloat16")
    with pytest.raises(ValueError, match="sam2 dtype: expected auto, float32 or bfloat16, got 'fp16'"):
        load_video_predictor(str(checkpoint), str(config), device="cpu", dtype="fp16")
    assert load_video_predictor(str(checkpoint), str(config), device="cpu").autocast_dtype is None


def test_sam2s_builder_makes_vrsflows_predictor_from_the_config(predictor) -> None:
    from sam2.modeling.memory_attention import MemoryAttentionLayer
    from sam2.sam2_video_predictor import SAM2VideoPredictor

    from stages.sam2_wrapper.predictor import SharedFrameSelfAttentionLayer, VideoPredictor

    assert type(predictor) is VideoPredictor and isinstance(predictor, SAM2VideoPredictor)
    # SAM2's own layer unless asked for (evaluation asks: tests/stages/test_evaluate_per_video.py)
    assert type(predictor.memory_attention.layers[0]) is MemoryAttentionLayer
    assert not isinstance(predictor.memory_attention.layers[0], SharedFrameSelfAttentionLayer)


def test_sam2s_builder_makes_the_compiled_predictor_with_vrsflows_additions(tmp_path) -> None:
    """`vos_optimized` is refused on the CPU by load_video_predictor (its compiled kernels are CUDA's), so sam2's own
    builder is called here with the same overrides: it instantiates vrsflow's subclass of SAM2VideoPredictorVOS (its
    torch.compile wrappers are lazy: nothing compiles until a call)."""
    from sam2.build_sam import build_sam2_video_predictor
    from sam2.sam2_video_predictor import SAM2VideoPredictorVOS

    from stages.sam2_wrapper import resolve_config, vrsflow_overrides
    from stages.sam2_wrapper.predictor import SharedFrameSelfAttentionLayer, VideoPredictorVOS
    from stages.tiny_models.tiny_sam2 import build_tiny_sam2

    checkpoint, config = build_tiny_sam2(tmp_path, image_size=128, seed=0)
    name, overrides = resolve_config(str(config))
    predictor = build_sam2_video_predictor(name, ckpt_path=str(checkpoint), device="cpu", vos_optimized=True,
                                           hydra_overrides_extra=[*overrides, *vrsflow_overrides(True, True, True)])
    assert type(predictor) is VideoPredictorVOS and isinstance(predictor, SAM2VideoPredictorVOS)
    assert predictor.autocast_dtype == torch.bfloat16 and callable(predictor.init_state_from_frames)
    assert type(predictor.memory_attention.layers[0]) is SharedFrameSelfAttentionLayer


def test_in_memory_state_is_the_state_sam2s_init_state_builds(predictor, tmp_path) -> None:
    """The oracle is SAM2's own `init_state` on a JPEG folder of the same frames: same keys, same values, the same
    warm-up features of frame 0 from the same images."""
    from stages.sam2_wrapper import FrameImages, load_frames

    for i, f in enumerate(frames()):
        Image.fromarray(f).save(tmp_path / f"{i:05d}.jpg", quality=95)
    video = load_frames(tmp_path)
    theirs = predictor.init_state(video_path=str(tmp_path), offload_video_to_cpu=True)
    ours = predictor.init_state_from_frames(FrameImages(video, predictor.image_size), *video[0].shape[:2])
    assert list(ours) == list(theirs)
    for key, value in theirs.items():
        if key not in ("images", "cached_features"):
            assert ours[key] == value, key
    images = torch.stack([ours["images"][t] for t in range(len(video))])
    assert images.shape == theirs["images"].shape and images.dtype == theirs["images"].dtype
    # SAM2 resizes with PIL, `frames_tensor` with torch's antialiased bilinear: the same picture, not the same bits
    assert (images - theirs["images"]).abs().mean() < 0.05
    assert list(ours["cached_features"]) == list(theirs["cached_features"]) == [0]
    theirs["images"] = images  # the same images in both states: then the same warm-up encoding
    theirs["cached_features"] = {}
    predictor._get_image_feature(theirs, frame_idx=0, batch_size=1)
    (ours_image, ours_out), (their_image, their_out) = ours["cached_features"][0], theirs["cached_features"][0]
    assert torch.equal(ours_image, their_image)
    for a, b in zip(ours_out["backbone_fpn"], their_out["backbone_fpn"], strict=True):
        assert torch.equal(a, b)
    no_warm_up = predictor.init_state_from_frames(FrameImages(video, predictor.image_size), *video[0].shape[:2],
                                                  warm_up=False)
    assert no_warm_up["cached_features"] == {}


def test_propagate_boxes_arrays_and_jpeg_folder(predictor, tmp_path):
    video = frames()
    for i, f in enumerate(video):
        Image.fromarray(f).save(tmp_path / f"{i:05d}.jpg", quality=95)
    from_arrays = propagate_boxes(predictor, video, 2, [[12, 10, 32, 30]])
    from_folder = propagate_boxes(predictor, tmp_path, 2, [[12, 10, 32, 30]])
    assert from_arrays.shape == from_folder.shape == (4, 1, 56, 56)
    assert from_arrays.dtype == bool


def test_consistency_reward_with_sam2(predictor):
    from stages.rewards import score_group

    texts = [answer(), answer(), answer(t=0, boxes=[[4, 10, 16, 22]]), "garbage"]
    results = score_group(texts, json.dumps(ground_truth()), RewardParams(), frames(), predictor)
    assert results[0] == results[1]
    assert all(0.0 <= r["consistency"] <= 1.0 for r in results)
    assert results[3]["score"] == 0.0
