"""SAM2 propagation with a micro random SAM2: shared encoding gives the same masks as re-encoding per
rollout, both directions are covered, frames from arrays or a JPEG folder; the consistency reward on it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

pytest.importorskip("sam2")

from stages.core.params import RewardParams  # noqa: E402
from stages.segment import BoxGroup, load_video_predictor, propagate_boxes, propagate_groups  # noqa: E402
from tests.sam2_probe import count_encoded_frames
from tests.stages.grpo_factory import answer, frames, ground_truth  # noqa: E402


@pytest.fixture(scope="module")
def predictor(tmp_path_factory):
    from stages.models.tiny_sam2 import build_tiny_sam2

    torch.set_num_threads(2)
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
    assert sum(encoded) == len(video)  # frame 0 from SAM2's warm-up, the others in one batch; none twice
    encoded.clear()
    propagate_groups(predictor, video, groups, share_encoding=False)
    # the released way: a fresh state per group re-encodes (the warm-up frame 0, the keyframe, then every
    # frame it visits; frame 0 twice unless it is the keyframe)
    assert sum(encoded) == sum(len(video) + (g.key_idx != 0) for g in groups) == 9


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
