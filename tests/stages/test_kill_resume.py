"""`kill -9` of a training stage's whole process group, as a user, a supervisor or the OOM killer does it:

- during SFT and during GRPO training (after the first checkpoint), each in 2 processes under torchrun, whose
  workers torch puts in sessions of their own (beyond the kill);
- no process of the killed run is alive 10 s later (the parent-death signal at each level, stages/core/lifeline);
- the rerun resumes and ends with the same weights, tensor for tensor, as an uninterrupted run of the same params;
  SFT's live curve (DVCLive's files) holds each step once, the uninterrupted run's values.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from stages.core.live import METRICS_DIR, live_dir
from stages.core.typed_config import to_dict
from stages.params.grpo import GrpoParams
from stages.params.model import ModelParams
from stages.params.sft import SftParams
from stages.params.tiny_models import TinyModelsParams
from tests.pipeline_repo import env_with_venv

pytestmark = pytest.mark.slow  # six short 2-process training runs: minutes of CPU

REPO = Path(__file__).resolve().parents[2]

# the stage: holds its folders, starts torchrun (2 processes) and waits — what `vrsflow stage sft|grpo` does
SFT_STAGE = """
import json, sys
from pathlib import Path
from stages.core.typed_config import build
from stages.params.model import ModelParams
from stages.params.sft import SftParams
from stages.sft import train_sft
job = json.loads(Path(sys.argv[1]).read_text())
report = train_sft(build(SftParams, job["sft"], "sft"), build(ModelParams, job["model"], "model"),
                   Path(job["shards"]), Path(job["out"]), Path(job["ckpt"]), Path(job["metrics"]))
assert report.metrics["processes"] == 2
"""
GRPO_STAGE = """
import json, sys
from pathlib import Path
from stages.core.output_lock import hold_outputs
from stages.models.launch import run_launched
job = json.loads(Path(sys.argv[1]).read_text())
with hold_outputs("grpo", [job["grpo"]["out_dir"], job["grpo"]["checkpoint_dir"]]):
    result = run_launched("grpo", 2, "", "tests.grpo_dense_worker", {"grpo": job["grpo"]})
Path(job["result"]).write_text(json.dumps(result))
"""


def _stage(code: str, job: dict, folder: Path) -> subprocess.Popen:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.json").write_text(json.dumps(job))
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), str(folder / "job.json")], cwd=REPO,
                            env={**env_with_venv(), "PYTHONPATH": str(REPO)}, process_group=0,  # as a shell does
                            stdout=open(folder / "log.txt", "ab"), stderr=subprocess.STDOUT)  # noqa: SIM115


def _finish(proc: subprocess.Popen, folder: Path) -> None:
    assert proc.wait(timeout=1800) == 0, (folder / "log.txt").read_text()[-4000:]


def _complete_checkpoints(ckpt: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in ckpt.glob("checkpoint-*") if (p / "trainer_state.json").is_file())


def _kill_after_first_checkpoint(proc: subprocess.Popen, ckpt: Path, out: Path, first: int) -> list[psutil.Process]:
    """Wait for checkpoint `first` (or a later one) inside training, `kill -9` the stage's process group; return
    every process the run had started (workers included), watched since the stage began."""
    seen: dict[int, psutil.Process] = {proc.pid: psutil.Process(proc.pid)}
    deadline = time.monotonic() + 1800
    while not [s for s in _complete_checkpoints(ckpt) if s >= first]:
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before its first checkpoint"
        for child in seen[proc.pid].children(recursive=True):
            seen.setdefault(child.pid, child)
        time.sleep(0.05)
    for child in seen[proc.pid].children(recursive=True):
        seen.setdefault(child.pid, child)
    lifelines = [p for p in seen.values() if "stages.core.lifeline" in " ".join(_cmdline(p))]
    sessions = {_sid(p) for p in lifelines} - {None, os.getsid(proc.pid)}
    os.killpg(proc.pid, signal.SIGKILL)
    assert not out.exists(), "the run had finished training before the kill"
    assert len(lifelines) >= 3  # the launcher and 2 workers, each through the lifeline
    assert len(sessions) >= 2  # torchrun's workers, each in a session of its own: beyond the kill
    proc.wait()
    return list(seen.values())


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def _sid(p: psutil.Process) -> int | None:
    try:
        return os.getsid(p.pid)
    except OSError:
        return None


def _alive_after(processes: list[psutil.Process], seconds: float) -> list[str]:
    time.sleep(seconds)
    alive = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:  # is_running also checks the start time
                alive.append(f"{p.pid} {' '.join(_cmdline(p))[:120]}")
        except psutil.NoSuchProcess:
            pass
    return alive


def _weights(folder: Path):
    from safetensors.torch import load_file

    return {k: v for f in sorted(folder.glob("*.safetensors")) for k, v in load_file(str(f)).items()}


def _same_tensors(a: Path, b: Path) -> None:
    import torch

    wa, wb = _weights(a), _weights(b)
    assert wa and wa.keys() == wb.keys()
    assert [k for k in wa if not torch.equal(wa[k], wb[k])] == []


def test_sft_killed_with_sigkill_leaves_nothing_and_resumes_exactly(tmp_path: Path) -> None:
    from stages.tiny_models import build_tiny_models
    from tests.stages.test_sft import write_sft_shards

    build_tiny_models(TinyModelsParams(vocab_size=384, hidden_size=64, num_layers=1, max_image_side=56),
                      tmp_path / "tiny")
    write_sft_shards(tmp_path / "shards", n_train=4, n_eval=1)
    params = SftParams(epochs=10, learning_rate=5e-3, grad_accum=1, warmup_ratio=0.0, lora_dropout=0.0,
                       save_every_steps=2, format_eval_samples=1, max_new_tokens=4, cpu_threads=1, processes=2)
    model = ModelParams(path=str(tmp_path / "tiny" / "qwen25vl"), dtype="float32")

    def job(run: Path) -> dict:
        return {"sft": to_dict(params), "model": to_dict(model), "shards": str(tmp_path / "shards"),
                "out": str(run / "sft"), "ckpt": str(run / "ckpt"), "metrics": str(run / "metrics")}

    reference = tmp_path / "reference"
    _finish(_stage(SFT_STAGE, job(reference), reference), reference)
    killed = tmp_path / "killed"
    processes = _kill_after_first_checkpoint(_stage(SFT_STAGE, job(killed), killed), killed / "ckpt",
                                             killed / "sft", first=2)
    assert _alive_after(processes, 10) == []
    assert _complete_checkpoints(killed / "ckpt")  # what the rerun resumes from
    _finish(_stage(SFT_STAGE, job(killed), killed), killed)
    _same_tensors(reference / "sft" / "adapter", killed / "sft" / "adapter")
    _same_tensors(reference / "sft" / "merged", killed / "sft" / "merged")
    # one curve (the main process's), each step once, with the uninterrupted run's losses (DVCLive's files)
    curves = {run: (live_dir(run / "metrics", "sft") / METRICS_DIR / "loss.tsv").read_text().splitlines()
              for run in (reference, killed)}
    steps = [int(line.split("\t")[0]) for line in curves[killed][1:]]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) == 20  # 4 samples ÷ 2 processes × 10 epochs
    assert curves[killed] == curves[reference]


def test_grpo_killed_with_sigkill_leaves_nothing_and_resumes_exactly(tmp_path: Path) -> None:
    from stages.tiny_models.tiny_qwen import build_tiny_qwen
    from tests.stages.grpo_factory import write_grpo_shards

    build_tiny_qwen(TinyModelsParams(vocab_size=512, hidden_size=64, num_layers=1, num_heads=2, max_image_side=56),
                    tmp_path / "model")
    write_grpo_shards(tmp_path / "shards", 3)  # 3 prompts, 1 a round: checkpoint-4 lies inside the second pass

    def job(run: Path) -> dict:
        params = replace(GrpoParams(), model_path=str(tmp_path / "model"), shards_dir=str(tmp_path / "shards"),
                         out_dir=str(run / "out"), checkpoint_dir=str(run / "ckpt"), batch_size=1, num_generations=2,
                         max_steps=12, max_response_length=8, save_every_steps=2, learning_rate=5e-3, processes=2)
        return {"grpo": to_dict(params), "result": str(run / "result.json")}

    reference = tmp_path / "reference"
    _finish(_stage(GRPO_STAGE, job(reference), reference), reference)
    killed = tmp_path / "killed"
    processes = _kill_after_first_checkpoint(_stage(GRPO_STAGE, job(killed), killed), killed / "ckpt",
                                             killed / "out", first=4)
    assert _alive_after(processes, 10) == []
    _finish(_stage(GRPO_STAGE, job(killed), killed), killed)
    result = json.loads((killed / "result.json").read_text())
    assert result["global_step"] == 12 and "checkpoint-" in result["resumed_from"]
    _same_tensors(reference / "out" / "adapter", killed / "out" / "adapter")
    _same_tensors(reference / "out" / "merged", killed / "out" / "merged")
