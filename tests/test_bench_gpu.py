"""The GPU bench's own logic, on the CPU: the commit a copied tree records, the two SAM2 paths' mask check, the SFT
variants' parsing and micro-batch choice, gpu.sh's command lines, and (slow) every bench of gpu.sh at tiny size."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from bench import results_io
from bench.bench_sam2_reward import CUDA_MIN_IOU, compare
from bench.bench_sft import check_order, micro_batch_choice, parse_variant

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


def test_sft_variants_name_a_batch_size_checkpointing_packing_and_liger() -> None:
    assert parse_variant("1") == (1, False, False, False)
    assert parse_variant("8c") == (8, True, False, False)
    assert parse_variant("4p") == (4, False, True, False)
    assert parse_variant("2cpl") == (2, True, True, True)
    for bad in ("c", "0", "4x", "4lp"):
        with pytest.raises(SystemExit, match=f"--variants: '{bad}'"):
            parse_variant(bad)
    with pytest.raises(SystemExit, match="Liger variants \\(l\\) must come after all others"):
        check_order([parse_variant(v) for v in ("2l", "2")])
    check_order([parse_variant(v) for v in ("2", "4p", "2l", "4pl")])


def test_the_micro_batch_is_the_largest_that_fits_without_checkpointing() -> None:
    rows = [{"variant": "1", "batch": 1, "gradient_checkpointing": False, "mfu": 0.1},
            {"variant": "2", "batch": 2, "gradient_checkpointing": False, "mfu": 0.12},
            {"variant": "4", "batch": 4, "gradient_checkpointing": False, "error": "CUDA out of memory"},
            {"variant": "4c", "batch": 4, "gradient_checkpointing": True, "mfu": 0.03}]
    assert micro_batch_choice(rows) == {"variant": "2", "batch": 2, "gradient_checkpointing": False}
    assert micro_batch_choice([rows[2], rows[3]]) == {"variant": "4c", "batch": 4, "gradient_checkpointing": True}
    assert micro_batch_choice([rows[2]]) is None


def test_gpu_sh_runs_each_figure_with_its_variants() -> None:
    out = subprocess.run(["bash", "bench/gpu.sh", "--dry-run"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert [line.split("--out ")[1] for line in out] == [
        "bench/results/gpu-sft.json", "bench/results/gpu-sam2_reward.json", "bench/results/gpu-sam2_reward-vos.json",
        "bench/results/gpu-evaluate.json", "bench/results/gpu-sft-flex.json", "bench/results/gpu-sam2_reward-fp32.json",
        "bench/results/gpu-segment.json"]
    assert "--variants 2 4 2p 4p 4c 4pl 2l --lengths 400 150 600 300" in out[0]
    assert "--vos-optimized" in out[2] and "--attention flex_attention" in out[4]
    assert "--precision fp32" in out[5]
    bad = subprocess.run(["bash", "bench/gpu.sh", "--only", "sam3"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown figure 'sam3'" in bad.stderr
    usage = subprocess.run(["bash", "bench/gpu.sh", "--help"], cwd=ROOT, capture_output=True, text=True).stdout
    assert usage.startswith("Every GPU figure") and "--dry-run prints the commands" in usage


@pytest.mark.slow  # every figure's script at tiny size on the CPU (12 min on 2 loaded cores)
def test_gpu_sh_smoke_runs_every_bench_at_tiny_size(tmp_path: Path) -> None:
    run = subprocess.run(["bash", "bench/gpu.sh", "--smoke", "--only", "sft,sftflex,sam2,sam2vos,sam2fp32,evaluate"],
                         cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    import json

    sft = json.loads((ROOT / "bench" / "out" / "gpu-sft.json").read_text())["figures"]
    assert [v["variant"] for v in sft["variants"]] == ["1", "2", "2p", "2c"]
    packed = next(v for v in sft["variants"] if v["packed"])
    assert packed["padding_share"] == 0.0 and sft["variants"][1]["padding_share"] > 0.0
    assert sft["micro_batch_choice"]["gradient_checkpointing"] is False
