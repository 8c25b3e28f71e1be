"""verl's trainer on this machine's CPU gives the same weights for the same params: two uninterrupted runs, and a
run SIGKILLed at a random moment after its first checkpoint and rerun, end with the same adapter and merged
weights, tensor for tensor, and the same per-step rewards — the shape of the TRL engine's test
(tests/stages/test_kill_resume.py), on the grpo stage with `grpo.engine: verl`, `grpo.verl.device: cpu`.

Needs scripts/setup_verl_cpu.sh's venv;
markers slow and verl_cpu (never in the default run): `pytest -m verl_cpu tests/stages/test_grpo_verl_cpu_repro.py`.
About 3 × the grpo stage (ci profile + verl-cpu, tiny model widened to head size 64) after one `vrsflow repro`:
roughly 30-40 minutes on 2 cores. When the runs differ, the failure names the first divergence (step, prompt,
rollout, character) from verl's rollout dumps; `bench/bench_verl_cpu.py --repeat --kill-at-step 4` records the
same in bench/results/verl-cpu.json.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from stages.grpo.verl_cpu import SETUP, venv_dir
from tests.pipeline_repo import env_with_venv, make_repo, profile_overrides

PROJECT = Path(__file__).resolve().parents[2]
VENV = venv_dir(PROJECT)
KILL_DELAY_S = 20.0  # the kill falls at a random moment up to this long after the first checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.verl_cpu]

if not (VENV / "bin" / "python").is_file():
    pytest.skip(f"the verl CPU rehearsal venv ({VENV}) is absent: run {SETUP}", allow_module_level=True)

sys.path.insert(0, str(PROJECT))
from bench.bench_verl_cpu import first_divergence, fresh_job, read_rollouts, run_stage  # noqa: E402


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return {k: v for f in sorted(folder.glob("*.safetensors")) for k, v in load_file(str(f)).items()}


def _rewards(job_dir: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (job_dir / "verl_log.jsonl").read_text().splitlines() if line.strip()]
    earlier = job_dir / "verl_log.before_resume.jsonl"  # a resumed run: the steps before the kill
    if earlier.is_file():
        rows = [json.loads(line) for line in earlier.read_text().splitlines() if line.strip()] + rows
    by_step = {int(r["step"]): r["data"]["critic/score/mean"] for r in rows}  # the resumed run's value wins
    return sorted(by_step.items())


def _same_run(reference: dict, repo: Path, grpo: dict, what: str) -> None:
    import torch

    job_dir = repo / grpo["verl"]["out_dir"]
    divergence = first_divergence(reference["rollouts"], read_rollouts(job_dir / "rollouts"))
    for part in ("adapter", "merged"):
        want, got = reference[part], _weights(repo / grpo["out_dir"] / part)
        assert want and want.keys() == got.keys(), (what, part)
        differ = [k for k in want if not torch.equal(want[k], got[k])]
        assert differ == [], f"{what}: {part} differs in {len(differ)} tensors; first divergence {divergence}"
    assert _rewards(job_dir) == reference["rewards"], f"{what}: first divergence {divergence}"


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory, prefect_api: str) -> dict:
    """The ci pipeline with the verl CPU engine reproduced by `vrsflow repro`: the reference run."""
    # a run that trains: an SFT that learns the template traces (the ci profile's one epoch leaves noise, every
    # reward 0) and responses long enough to reach the answer (the traces are ~175 tokens; the ci profile's 8 end
    # inside the think part), so that rewards differ within a prompt's group and the update is not zero —
    # identical weights of runs that never moved would prove nothing
    overrides = {**profile_overrides(PROJECT, "verl-cpu"), "tiny_models.hidden_size": 128, "tiny_models.num_heads": 2,
                 "sft.epochs": 30, "grpo.max_response_length": 256}
    repo = make_repo(PROJECT, tmp_path_factory.mktemp("verlrepro") / "repo", params_overrides=overrides,
                     profile="ci")
    env = {**env_with_venv(), "VRSFLOW_VERL_CPU_VENV": str(VENV), "PREFECT_API_URL": prefect_api}
    proc = subprocess.run([sys.executable, "-m", "flows.cli", "repro"], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=2400)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    import yaml

    grpo = yaml.safe_load((repo / "params.yaml").read_text())["grpo"]
    job_dir, out = repo / grpo["verl"]["out_dir"], repo / grpo["out_dir"]
    return {"repo": repo, "grpo": grpo, "env": env, "adapter": _weights(out / "adapter"),
            "merged": _weights(out / "merged"), "rewards": _rewards(job_dir),
            "rollouts": read_rollouts(job_dir / "rollouts")}


def test_a_second_uninterrupted_run_gives_the_same_bytes(first_run: dict):
    repo, grpo = first_run["repo"], first_run["grpo"]
    assert len(first_run["rewards"]) == grpo["max_steps"]
    # the run trained: some reward above zero, and the LoRA B matrices (zero at the start) moved
    assert any(reward > 0 for _, reward in first_run["rewards"]), first_run["rewards"]
    assert any(bool(v.abs().max() > 0) for k, v in first_run["adapter"].items() if "lora_B" in k)
    fresh_job(repo, grpo)
    run_stage(repo, env=first_run["env"])
    _same_run(first_run, repo, grpo, "second uninterrupted run")


def test_a_run_killed_after_its_first_checkpoint_and_rerun_gives_the_same_bytes(first_run: dict):
    repo, grpo = first_run["repo"], first_run["grpo"]
    fresh_job(repo, grpo)
    delay = random.Random(62).uniform(0.0, KILL_DELAY_S)
    killed = run_stage(repo, kill_at_step=grpo["save_every_steps"], kill_delay_s=delay, env=first_run["env"])
    assert not killed["finished_before_kill"] and killed["alive_10s_after_kill"] == [], killed
    run_stage(repo, env=first_run["env"])  # the rerun resumes from verl's checkpoint (trainer.resume_mode=auto)
    _same_run(first_run, repo, grpo, f"killed {delay:.1f} s after the step-{grpo['save_every_steps']} checkpoint")
    assert not (repo / grpo["verl"]["out_dir"] / "set_aside").exists()  # the same params: nothing set aside
