"""The GPU bench's own logic, on the CPU: the commit a copied tree records, the two SAM2 paths' mask check, the SFT
variants' parsing and gpu.sh's command lines."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from bench import results_io
from bench.bench_sam2_reward import CUDA_MIN_IOU, compare
from bench.bench_sft import parse_variant

ROOT = Path(__file__).resolve().parents[1]


def test_a_copied_tree_records_the_commit_its_sender_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VRSFLOW_BENCH_COMMIT", "0" * 40)
    assert results_io.commit(("stages",)) == {"sha": "0" * 40, "dirty": False, "code": ["stages"],
                                              "from": "VRSFLOW_BENCH_COMMIT"}
    monkeypatch.delenv("VRSFLOW_BENCH_COMMIT")
    own = results_io.commit(("stages",))
    assert len(own["sha"]) == 40 and "from" not in own


def _masks(n: int = 2) -> list[np.ndarray]:
    masks = []
    for i in range(n):
        mask = np.zeros((3, 20, 20), dtype=bool)
        mask[:, 2 + i:12 + i, 3:13] = True  # 100 pixels per frame
        masks.append(mask)
    return masks


def test_the_cpu_check_fails_on_one_differing_pixel_and_the_cuda_check_on_a_low_iou() -> None:
    reference = _masks()
    assert compare(_masks(), reference, exact=True, n_keys=1) == {
        "masks_equal": True, "check": "bit-equal", "max_differing_pixels": 0, "min_iou_between_paths": 1.0}
    one_off = _masks()
    one_off[1][0, 0, 0] = True
    with pytest.raises(AssertionError, match="rollout 1: shared masks differ from re-encoding \\(1 pixels\\)"):
        compare(one_off, reference, exact=True, n_keys=1)
    close = compare(one_off, reference, exact=False, n_keys=1)
    assert close["masks_equal"] is False and close["max_differing_pixels"] == 1
    assert close["min_iou_between_paths"] == pytest.approx(300 / 301)
    shifted = _masks()
    shifted[0] = np.roll(shifted[0], 5, axis=2)  # half of each frame's square moves: IoU 50 / 150
    assert 50 / 150 < CUDA_MIN_IOU
    with pytest.raises(AssertionError, match="rollout 0: .* IoU 0.3333"):
        compare(shifted, reference, exact=False, n_keys=1)


def test_sft_variants_name_a_batch_size_and_checkpointing() -> None:
    assert parse_variant("1") == (1, False)
    assert parse_variant("8c") == (8, True)
    for bad in ("c", "0", "4x"):
        with pytest.raises(SystemExit, match=f"--variants: '{bad}'"):
            parse_variant(bad)


def test_gpu_sh_runs_each_figure_with_its_checks() -> None:
    out = subprocess.run(["bash", "bench/gpu.sh", "--dry-run"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert len(out) == 5
    assert "--precision fp32 --out bench/results/gpu-sam2_reward-fp32.json" in out[1]
    assert "bench_sft.py --gpu --steps 6 --variants 1 2 4c 8c --out bench/results/gpu-sft.json" in out[2]
    bad = subprocess.run(["bash", "bench/gpu.sh", "--only", "sam3"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown figure 'sam3'" in bad.stderr
