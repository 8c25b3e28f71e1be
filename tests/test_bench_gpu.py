"""The GPU bench's own logic, on the CPU: the commit a copied tree records, the two SAM2 paths' mask check, the SFT
variants' parsing and micro-batch choice, gpu.sh's command lines, and (slow) every bench of gpu.sh at tiny size."""

from __future__ import annotations

import subprocess
import sys
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
    assert "--variants 2 4 4p 4pl --lengths 400 150 600 300 --profile" in out[0]
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
    assert [v["variant"] for v in sft["variants"]] == ["1", "2", "2p", "2c", "2pl"]
    assert sft["variants"][-1]["error"].startswith("Liger unavailable: needs a CUDA device")
    assert sft["profile"]["variant"] == "2c"
    packed = next(v for v in sft["variants"] if v["packed"])
    assert packed["padding_share"] == 0.0 and sft["variants"][1]["padding_share"] > 0.0
    assert sft["micro_batch_choice"]["gradient_checkpointing"] is False
    evaluate = json.loads((ROOT / "bench" / "out" / "gpu-evaluate.json").read_text())["figures"]
    phases = evaluate["phases_s"]  # the split of one video's time
    assert phases["vlm_prefill"] + phases["vlm_decode"] >= evaluate["vlm_s"] - 1e-3
    assert phases["sam2_encode"] > 0 and phases["sam2_encode"] + phases["sam2_propagate"] >= evaluate["sam2_s"] - 1e-3
    assert evaluate["static_cache"]["same_text_as_dynamic"] is True and evaluate["static_cache"]["vlm_s"] > 0


def _small_vocab(monkeypatch: pytest.MonkeyPatch, vocab_size: int = 512) -> None:
    """bench_gpu's smoke on a 512-token vocabulary: the 3B's 151,936-token lm_head in bf16 is most of the smoke's
    time on a CPU without bf16 matrix units (over 2 minutes). The config keeps the 3B's special tokens at the top
    of the shorter vocabulary (`qwen25vl_3b_config`); the batch's ids move down with them."""
    from bench import bench_sft
    from stages.models import qwen_shapes

    real_config, real_batch = qwen_shapes.qwen25vl_3b_config, bench_sft.gpu_batch
    shift = qwen_shapes.QWEN25VL_3B_TEXT["vocab_size"] - vocab_size
    first_special = qwen_shapes.QWEN25VL_3B_TEXT["bos_token_id"]

    def batch(*args, **kwargs) -> dict:
        sample = real_batch(*args, **kwargs)
        ids = sample["input_ids"]
        ids = ids.where(ids >= first_special, ids % (first_special - shift)).where(ids < first_special, ids - shift)
        sample["labels"] = sample["labels"].where(sample["labels"] < 0, ids)
        sample["mm_token_type_ids"] = (ids == qwen_shapes.IMAGE_TOKEN - shift).long()
        return {**sample, "input_ids": ids}

    monkeypatch.setattr(qwen_shapes, "qwen25vl_3b_config", lambda: real_config(vocab_size=vocab_size))
    monkeypatch.setattr(bench_sft, "gpu_batch", batch)


def test_sft_bench_smoke_records_why_liger_cannot_run_and_profiles_the_last_variant_measured(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The slow subprocess test below, in this process on a 512-token vocabulary (seconds instead of minutes): the
    same variants, the same assertions on the figures."""
    from bench.bench_sft import bench_gpu

    _small_vocab(monkeypatch)
    figures = bench_gpu(1, ["2p", "2pl"], None, smoke=True, profile=True, lengths=(40, 20))
    _check_liger_row_and_profile(figures)


def _check_liger_row_and_profile(figures: dict) -> None:
    measured, liger = figures["variants"]
    assert measured["variant"] == "2p" and measured["packed"] and measured["padding_share"] == 0.0
    assert liger["variant"] == "2pl" and liger["error"].startswith("Liger unavailable: needs a CUDA device")
    assert figures["best"] is None  # no MFU without a device peak (the CPU smoke)
    profile = figures["profile"]
    assert profile["variant"] == "2p" and 0 < profile["device_busy_s"] and profile["step_wall_s"] > 0
    top = profile["top_by_self_time"]
    assert len(top) == 25 and all(row["self_s"] > 0 and row["calls"] >= 1 for row in top)
    assert [row["self_s"] for row in top] == sorted((row["self_s"] for row in top), reverse=True)
    assert 0.5 < sum(row["share"] for row in top) <= 1.0 + 1e-6  # the top 25 hold most of the step, never more
    assert any(row["name"] == "aten::mm" for row in top)  # the model's matrix products are among them


@pytest.mark.slow  # bench_sft.py's command line with the 3B's vocabulary (over 2 minutes on 2 cores)
def test_sft_bench_records_why_liger_cannot_run_and_profiles_the_last_variant_measured(tmp_path: Path) -> None:
    """The CPU stands in for a machine where Liger cannot run (no CUDA; on the H200, liger-kernel 0.8.5 did not
    import its Qwen2.5-VL kernels with transformers 5.24 and ended the whole bench): a row says why, the run goes
    on, and the profile takes the last variant that ran. The default run's fast twin:
    `test_sft_bench_smoke_records_why_liger_cannot_run_and_profiles_the_last_variant_measured` (the same code and
    assertions in this process, on a 512-token vocabulary)."""
    import json

    out = tmp_path / "gpu-sft.json"
    run = subprocess.run([sys.executable, "bench/bench_sft.py", "--smoke", "--steps", "1", "--variants", "2p", "2pl",
                          "--lengths", "40", "20", "--profile", "--out", str(out)], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    _check_liger_row_and_profile(json.loads(out.read_text())["figures"])


@pytest.mark.slow  # the SAM2 recipe's steps on the CPU (about 1 min)
def test_sam2_clips_per_step_bench_times_the_stages_step_against_one_clip(tmp_path: Path) -> None:
    import json

    out = tmp_path / "clips.json"
    run = subprocess.run([sys.executable, "bench/sam2_clips_per_step.py", "--clips", "1", "2", "--steps", "1",
                          "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    figures = json.loads(out.read_text())["figures"]
    one, two = figures["rows"]
    assert (one["clips_per_step"], two["clips_per_step"], one["clips_per_s_vs_one"]) == (1, 2, 1.0)
    assert two["s_per_clip"] == pytest.approx(two["s_per_step"] / 2, abs=1e-3) and two["objects_per_step"] >= 2
    bad = subprocess.run([sys.executable, "bench/sam2_clips_per_step.py", "--clips", "4"], cwd=ROOT,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "the first value is the baseline, 1" in bad.stderr


def _gpu_pretrain(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(["bash", "bench/gpu_pretrain.sh", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**{k: v for k, v in os.environ.items() if k != "OUT"}, **(env or {})})


def test_gpu_pretrain_sh_probes_then_trains_sam2_then_the_vlm_and_packs_only_into_out() -> None:
    lines = _gpu_pretrain("--dry-run").stdout.splitlines()
    assert len(lines) == 3  # no $OUT: everything stays in place, nothing is packed
    assert lines[0].startswith("timeout --signal=TERM --kill-after=20 90 ")
    assert "gpu_pretrain.py probe --out bench/results/gpu-pretrain-throughput.json" in lines[0]
    assert [line.split(" stage ")[1].split()[0] for line in lines[1:]] == ["pretrain_sam2", "pretrain"]
    assert all("--root . " in line + " " and "--set" not in line for line in lines[1:])  # params.yaml as it is
    out = _gpu_pretrain("--dry-run", "--only", "pretrain", "--set", "pretrain.loader_workers=4",
                        env={"OUT": "/tmp/out"}).stdout.splitlines()
    assert len(out) == 2 and " stage pretrain " in out[0] and out[0].endswith("--set pretrain.loader_workers=4")
    assert "pack --root . --dest /tmp/out" in out[1]
    smoke = _gpu_pretrain("--dry-run", "--smoke").stdout
    assert "--root bench/out/gpu-pretrain " in smoke and "--dest bench/out/gpu-pretrain-out" in smoke
    assert "--set pretrain.seeds=[0,1] --set pretrain.parallel=2" in smoke and "bench/results" not in smoke
    for bad, message in ((["--only", "probe,sam3"], "unknown name 'sam3'"), (["--budget", "9m"], "whole seconds"),
                         (["--set", "pretrain.steps"], "KEY=VALUE"), (["--fast"], "unknown argument '--fast'")):
        run = _gpu_pretrain(*bad)
        assert run.returncode == 2 and message in run.stderr, (bad, run.stderr)
    assert _gpu_pretrain("--help").stdout.startswith("Pre-train the tiny SAM2 and the tiny Qwen2.5-VL")


def test_a_stage_is_up_to_date_only_when_its_lineage_records_these_params(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    import dataclasses
    import json

    from bench import gpu_pretrain
    from stages.core.lineage import write_lineage

    monkeypatch.chdir(tmp_path)
    params = gpu_pretrain.stage_params({})
    out = Path(params.pretrain_sam2.out_dir)
    assert gpu_pretrain.up_to_date("pretrain_sam2", params) is None  # nothing there
    write_lineage(out, "pretrain_sam2", {"pretrain_sam2": params.pretrain_sam2}, seed=0)  # as the stage writes it
    assert gpu_pretrain.up_to_date("pretrain_sam2", params) is None  # no seeds.json: not a finished stage
    (out / "seeds.json").write_text(json.dumps({"chosen_seed": 0}))
    assert "match these params" in gpu_pretrain.up_to_date("pretrain_sam2", params)
    other = dataclasses.replace(params, pretrain_sam2=dataclasses.replace(params.pretrain_sam2, learning_rate=1e-3))
    assert gpu_pretrain.up_to_date("pretrain_sam2", other) is None
    assert "other params (pretrain_sam2.learning_rate)" in capsys.readouterr().out
    # the VLM's lineage records the model block too: a model.path that is not the stage's out_dir differs
    write_lineage(Path(params.pretrain.out_dir), "pretrain", {"pretrain": params.pretrain, "model": params.model})
    (Path(params.pretrain.out_dir) / "seeds.json").write_text("{}")
    assert gpu_pretrain.up_to_date("pretrain", params)
    tiny = dataclasses.replace(params, model=dataclasses.replace(params.model, path="models/tiny/qwen25vl"))
    assert gpu_pretrain.up_to_date("pretrain", tiny) is None


def test_pack_brings_back_finished_seeds_first_then_states_in_parts_within_the_calls_limits(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import tarfile

    from bench import gpu_pretrain

    root, dest = tmp_path / "root", tmp_path / "out"
    dest.mkdir()
    (dest / "gpu-pretrain.log").write_text("log\n")  # the log, written there all along
    ckpt = root / "models" / "checkpoints" / "pretrain"
    mib = 1 << 20
    content = {ckpt / "seed-0" / "result.json": b"{}", ckpt / "seed-0" / "model" / "model.safetensors": b"w" * 1000,
               ckpt / "seed-0" / "pretrain_curve.tsv": b"step\n", ckpt / "seed-0" / "state.pt.partial": b"half",
               ckpt / "seed-1" / "state.pt": os.urandom(20 * mib), ckpt / "seed-2" / "state.pt": os.urandom(20 * mib),
               ckpt / "seed-3" / "state.pt": os.urandom(25 * mib)}
    for path, data in content.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    monkeypatch.chdir(ROOT)  # pack changes into --root: the test's own cwd is restored after it
    assert gpu_pretrain.main(["pack", "--root", str(root), "--dest", str(dest)]) == 0
    files = sorted(p.name for p in dest.iterdir())
    assert files == ["checkpoints.tar.00", "checkpoints.tar.01", "checkpoints.tar.02", "gpu-pretrain.log"]
    assert all((dest / name).stat().st_size < 16 * mib for name in files)  # the per-file limit of what comes back
    assert sum((dest / name).stat().st_size for name in files) < 64 * mib
    assert "left out models/checkpoints/pretrain/seed-3 (state)" in capsys.readouterr().out
    whole = tmp_path / "whole.tar"
    whole.write_bytes(b"".join((dest / name).read_bytes() for name in files[:3]))  # cat checkpoints.tar.* | tar -x
    unpacked = tmp_path / "unpacked"
    with tarfile.open(whole) as tar:
        tar.extractall(unpacked, filter="data")
    got = {p.relative_to(unpacked) for p in unpacked.rglob("*") if p.is_file()}
    assert got == {p.relative_to(root) for p in content if p.parent.name != "seed-3" and p.suffix != ".partial"}
    for path in got:
        assert (unpacked / path).read_bytes() == (root / path).read_bytes()


def test_fit_sizes_sam2_steps_to_the_deadline_in_whole_save_intervals(tmp_path: Path) -> None:
    import json

    from bench import gpu_pretrain

    params = gpu_pretrain.stage_params({"pretrain_sam2.save_every_steps": "50"})
    # 10 steps/s, 250 s: (250 - 50 s fixed) * 0.9 * 10 = 1,800 steps
    assert gpu_pretrain.fit_sam2_steps(10.0, 250.0, params) == 1800
    assert gpu_pretrain.fit_sam2_steps(3.3, 250.0, params) == 550  # 594 rounded down to a save interval
    assert gpu_pretrain.fit_sam2_steps(10.0, 40.0, params) == 50  # no time: one interval, never zero steps
    # the probe spent 60 s besides its steps: twice that is kept for the run's start-up and checks
    assert gpu_pretrain.fit_sam2_steps(10.0, 250.0, params, probe_fixed_s=60.0) == 1150  # (250 - 120) * 0.9 * 10
    for rate, seconds in ((0.4, 600.0), (7.7, 333.0), (25.0, 1000.0)):
        steps = gpu_pretrain.fit_sam2_steps(rate, seconds, params)
        assert steps % 50 == 0 and (steps == 50 or steps / rate <= seconds - gpu_pretrain.SAM2_FIXED_S)
    throughput = tmp_path / "t.json"
    throughput.write_text(json.dumps({"figures": {"pretrain_sam2": {"steps_per_s_per_seed": 10.0, "fixed_s": 10.0}}}))
    run = subprocess.run([sys.executable, "bench/gpu_pretrain.py", "fit", "--throughput", str(throughput),
                          "--seconds", "250"], cwd=ROOT, capture_output=True, text=True)
    assert (run.returncode, run.stdout) == (0, "1800\n")
    capped = subprocess.run([sys.executable, "bench/gpu_pretrain.py", "fit", "--throughput", str(throughput),
                             "--seconds", "250", "--at-most", "3"], cwd=ROOT, capture_output=True, text=True)
    assert capped.stdout == "3\n"
    throughput.write_text(json.dumps({"figures": {"pretrain_sam2": {"error": "stopped at the probe's budget"}}}))
    none = subprocess.run([sys.executable, "bench/gpu_pretrain.py", "fit", "--throughput", str(throughput),
                           "--seconds", "250"], cwd=ROOT, capture_output=True, text=True)
    assert none.returncode == 1 and "stopped at the probe's budget" in none.stderr and none.stdout == ""
    lines = _gpu_pretrain("--dry-run", "--fit", "--only", "probe,pretrain_sam2",
                          "--set", "pretrain_sam2.seeds=[0,1,2]").stdout.splitlines()
    assert "probe --out bench/results/gpu-pretrain-throughput.json" in lines[0]
    assert lines[0].endswith("--sam2-only --set pretrain_sam2.seeds=[0,1,2]")  # measured with the run's seeds
    assert "gpu_pretrain.py fit --throughput bench/results/gpu-pretrain-throughput.json" in lines[1]


@pytest.mark.slow  # the whole pre-training flow at tiny size on the CPU (about 4 min on 2 loaded cores)
def test_gpu_pretrain_smoke_trains_both_stages_packs_them_and_then_finds_them_up_to_date() -> None:
    import json
    import shutil
    import tarfile

    scratch = ROOT / "bench" / "out" / "gpu-pretrain"  # the smoke's project root: a fresh run (models/tiny kept)
    for leftover in ("models/pretrain", "models/pretrain_sam2", "models/checkpoints", "metrics"):
        shutil.rmtree(scratch / leftover, ignore_errors=True)
    run = _gpu_pretrain("--smoke", timeout=1800)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    dest = ROOT / "bench" / "out" / "gpu-pretrain-out"
    assert sorted(p.name for p in dest.iterdir()) == ["gpu-pretrain-throughput.json", "gpu-pretrain.log",
                                                        "pretrain.tar", "pretrain_sam2.tar"]
    probe = json.loads((dest / "gpu-pretrain-throughput.json").read_text())["figures"]
    assert all(v["samples_per_s_per_seed"] > 0 for v in probe["pretrain"].values())
    assert probe["pretrain_sam2"]["steps_per_s_per_seed"] > 0 and probe["estimate"]["pretrain"]["steps"] > 0
    with tarfile.open(dest / "pretrain.tar") as tar:
        names = set(tar.getnames())
        seeds = json.loads(tar.extractfile("models/pretrain/seeds.json").read())
    assert {"metrics/pretrain.json", "metrics/pretrain_curve.tsv", "models/pretrain/lineage.json"} <= names
    assert sorted(seeds["seeds"]) == ["0", "1"] and all(s["steps"] == 4 for s in seeds["seeds"].values())
    with tarfile.open(dest / "pretrain_sam2.tar") as tar:
        assert {"models/pretrain_sam2/model.pt", "models/pretrain_sam2/config.yaml",
                "metrics/pretrain_sam2.json"} <= set(tar.getnames())
    again = _gpu_pretrain("--smoke", "--only", "pretrain_sam2,pretrain", timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert again.stdout.count("up to date") >= 2 and "trained: none" in again.stdout


@pytest.mark.slow  # two legs cut at their deadline (about 4 min on 2 loaded cores)
def test_gpu_pretrain_cut_off_packs_its_state_and_the_next_run_resumes_it() -> None:
    import shutil
    import tarfile

    long = ["--only", "pretrain", "--set", "pretrain.seeds=[0]", "--set", "pretrain.parallel=1",
            "--set", "pretrain.steps=5000", "--set", "pretrain.curriculum=[{steps:5000,frames:1}]",
            "--set", "pretrain.save_every_steps=5", "--budget", "110"]
    ckpt = ROOT / "bench" / "out" / "gpu-pretrain" / "models" / "checkpoints" / "pretrain"
    shutil.rmtree(ckpt, ignore_errors=True)
    try:
        first = _gpu_pretrain("--smoke", *long, timeout=600)
        assert first.returncode == 5, first.stdout[-3000:] + first.stderr[-3000:]
        assert "[pretrain] cut off at the deadline" in first.stdout + first.stderr
        dest = ROOT / "bench" / "out" / "gpu-pretrain-out"
        parts = sorted(dest.glob("checkpoints.tar*"))
        whole = b"".join(p.read_bytes() for p in parts)
        with tarfile.open(fileobj=__import__("io").BytesIO(whole)) as tar:
            assert "models/checkpoints/pretrain/seed-0/state.pt" in tar.getnames()
        second = _gpu_pretrain("--smoke", *long, timeout=600)
        assert second.returncode == 5
        assert "pretrain: resuming at step" in second.stdout + second.stderr, second.stderr[-3000:]
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)


def test_gpu_pretrain_rebuilds_tiny_models_built_with_other_params(tmp_path: Path) -> None:
    # `--set tiny_models.sam2_encoder_width=32` must train the wider SAM2, not the one an earlier build left there
    from dataclasses import replace

    from bench.gpu_pretrain import tiny_models_built_as
    from stages.params.tiny_models import TinyModelsParams
    from stages.tiny_models import build_tiny_models

    params = TinyModelsParams(vocab_size=512, sam2_image_size=64, out_dir=str(tmp_path / "tiny"))
    assert tiny_models_built_as(params) == "missing"
    build_tiny_models(params, tmp_path / "tiny")
    assert tiny_models_built_as(params) is True
    assert tiny_models_built_as(replace(params, sam2_encoder_width=32)) == "built with other params"
