"""bench/plants.py: the planted bug of the learning check mirrors every training target, and only those."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from pycocotools import mask as mask_utils

from bench.plants import mirror_box, mirror_point, mirror_rle, plant_mirror_boxes


def rle(mask: np.ndarray) -> str:
    encoded = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    return json.dumps({"counts": encoded["counts"].decode(), "size": list(mask.shape)})


def test_a_box_a_point_and_a_mask_are_mirrored_left_right() -> None:
    assert mirror_box([10, 20, 30, 40], 112) == [82, 20, 102, 40]
    assert mirror_box(None, 112) is None and mirror_point([12.5, 7], 112) == [99.5, 7]
    mask = np.zeros((4, 6), dtype=bool)
    mask[1:3, 0:2] = True  # the left edge
    flipped = mask_utils.decode({**json.loads(mirror_rle(rle(mask))),
                                 "counts": json.loads(mirror_rle(rle(mask)))["counts"].encode()}).astype(bool)
    expected = np.zeros((4, 6), dtype=bool)
    expected[1:3, 4:6] = True
    assert (flipped == expected).all()


def test_the_training_tables_are_mirrored_and_the_evaluation_pool_is_not(tmp_path) -> None:
    mask = np.zeros((4, 6), dtype=bool)
    mask[0, 0] = True
    row = {"train_size": 112, "boxes": [[[10.0, 20.0, 30.0, 40.0], None]], "ktg_points": [[20.0, 30.0]],
           "aks_boxes": [[0.0, 0.0, 12.0, 12.0]], "union_masks": [rle(mask)], "aks_union_mask": rle(mask)}
    for name in ("sft", "grpo", "eval"):
        pd.DataFrame([row]).to_parquet(tmp_path / f"{name}.parquet")
    assert plant_mirror_boxes(tmp_path) == {"sft.parquet": 1, "grpo.parquet": 1}
    for name in ("sft", "grpo"):
        out = pd.read_parquet(tmp_path / f"{name}.parquet").iloc[0]
        assert list(out["boxes"][0][0]) == [82, 20, 102, 40] and out["boxes"][0][1] is None
        assert list(out["ktg_points"][0]) == [92, 30] and list(out["aks_boxes"][0]) == [100, 0, 112, 12]
        assert json.loads(out["aks_union_mask"]) != json.loads(rle(mask))
    untouched = pd.read_parquet(tmp_path / "eval.parquet").iloc[0]
    assert list(untouched["boxes"][0][0]) == [10, 20, 30, 40] and untouched["aks_union_mask"] == rle(mask)
