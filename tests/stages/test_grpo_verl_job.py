"""A verl job folder belongs to its params: a rerun for other params never resumes the folder's checkpoints
(they are moved aside, one log line names the changed keys), a rerun for the same ones does. The merge of the
job's checkpoint runs under the job's own interpreter (the torch that wrote it), on GPU clusters as on the CPU.
Fast; no verl run."""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stages.grpo.job_params import RECORD, SET_ASIDE, changed_keys, claim_job, content_hash, weight_params
from stages.params.grpo import GrpoParams, GrpoVerlParams
from stages.params.reward import RewardParams
from stages.params.sam2 import Sam2Params

OUTPUTS = ("checkpoints", "finished.json")


@pytest.fixture
def job(tmp_path: Path) -> dict:
    model = tmp_path / "sft"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 64}')
    (model / "model.safetensors").write_bytes(b"weights v1")
    parquet = tmp_path / "grpo.parquet"
    pq.write_table(pa.table({"data_source": ["vrsflow/revos"]}), parquet)
    sam2 = tmp_path / "sam2.pt"
    sam2.write_bytes(b"sam2")
    grpo = GrpoParams(engine="verl", model_path=str(model), verl_parquet=str(parquet), learning_rate=0.001,
                      verl=GrpoVerlParams(out_dir=str(tmp_path / "job")))
    return {"grpo": grpo, "sam2": Sam2Params(checkpoint=str(sam2), config="configs/sam2.1/sam2.1_hiera_t.yaml"),
            "dir": tmp_path / "job", "model": model}


def _claim(job: dict, grpo: GrpoParams) -> Path | None:
    params, files = weight_params(grpo, RewardParams(), job["sam2"])
    return claim_job(job["dir"], params, files, OUTPUTS)


def _checkpoint(job_dir: Path) -> None:
    actor = job_dir / "checkpoints" / "global_step_4" / "actor"
    actor.mkdir(parents=True)
    (actor / "fsdp_config.json").write_text("{}")
    (job_dir / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("4")


def test_changed_learning_rate_sets_the_run_aside_with_one_line(job: dict, caplog: pytest.LogCaptureFixture):
    assert _claim(job, job["grpo"]) is None  # a new folder: recorded, nothing to move
    _checkpoint(job["dir"])
    with caplog.at_level(logging.WARNING, logger="stages.grpo.job_params"):
        moved = _claim(job, replace(job["grpo"], learning_rate=0.002))
    assert moved is not None and moved.parent == job["dir"] / SET_ASIDE
    assert not (job["dir"] / "checkpoints").exists()  # verl's resume_mode=auto finds no tracker: step 0
    assert (moved / "checkpoints" / "latest_checkpointed_iteration.txt").read_text() == "4"  # moved, not deleted
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "grpo.learning_rate: 0.001 → 0.002" in lines[0] and str(moved) in lines[0]
    record = json.loads((job["dir"] / RECORD).read_text())
    assert record["params"]["grpo.learning_rate"] == 0.002


@pytest.mark.parametrize("change", [
    {"save_every_steps": 2}, {"processes": 2}, {"out_dir": "elsewhere/grpo"}, {"checkpoint_dir": "elsewhere/ckpt"},
    {"verl": GrpoVerlParams(n_gpus_per_node=2, nnodes=2, sam2_placement="reserved", gpu_memory_utilization=0.5)},
])
def test_paths_parallelism_and_save_interval_keep_the_run(job: dict, change: dict):
    _claim(job, job["grpo"])
    _checkpoint(job["dir"])
    grpo = replace(job["grpo"], **change)
    if "verl" in change:  # the same folder
        grpo = replace(grpo, verl=replace(grpo.verl, out_dir=job["grpo"].verl.out_dir))
    assert _claim(job, grpo) is None
    assert (job["dir"] / "checkpoints" / "latest_checkpointed_iteration.txt").is_file()


def test_a_retrained_model_under_the_same_path_is_another_job(job: dict, caplog: pytest.LogCaptureFixture):
    _claim(job, job["grpo"])
    _checkpoint(job["dir"])
    (job["model"] / "model.safetensors").write_bytes(b"weights v2")
    with caplog.at_level(logging.WARNING, logger="stages.grpo.job_params"):
        assert _claim(job, job["grpo"]) is not None
    assert "grpo.model_path: sha256 " in caplog.records[0].getMessage()


def test_a_run_without_a_record_is_set_aside(job: dict, caplog: pytest.LogCaptureFixture):
    _checkpoint(job["dir"])  # made before job folders recorded their params
    with caplog.at_level(logging.WARNING, logger="stages.grpo.job_params"):
        moved = _claim(job, job["grpo"])
    assert moved is not None and "no record of the params" in caplog.records[0].getMessage()
    _checkpoint(job["dir"])  # a run made after the record: the same params resume it
    assert _claim(job, job["grpo"]) is None and len(list((job["dir"] / SET_ASIDE).iterdir())) == 1


def test_content_hash_reads_only_changed_files(tmp_path: Path):
    (tmp_path / "a").write_bytes(b"x")
    (tmp_path / "b").write_bytes(b"y")
    digest, table = content_hash(tmp_path)
    assert content_hash(tmp_path, table)[0] == digest
    table["a"][2] = "0" * 64  # a stale entry with the file's size and mtime is trusted, not re-read
    assert content_hash(tmp_path, table)[0] != digest
    assert content_hash(tmp_path / "missing") == ("absent", {})


def test_changed_keys_names_each_difference():
    assert changed_keys({"grpo.seed": 0, "reward.components": ["format"]},
                        {"grpo.seed": 1, "reward.components": ["format"], "grpo.new": True}) == [
        "grpo.new: (none) → true", "grpo.seed: 0 → 1"]


def test_prepare_job_sets_aside_a_run_for_other_params(job: dict):
    pytest.importorskip("verl")
    from stages.grpo.verl_engine import RUN_OUTPUTS, latest_checkpoint, prepare_job

    params, files = weight_params(job["grpo"], RewardParams(), job["sam2"])
    claim_job(job["dir"], params, files, RUN_OUTPUTS)  # what the first prepare_job records
    _checkpoint(job["dir"])
    (job["dir"] / "verl_log.jsonl").write_text("{}\n")
    moved = prepare_job(replace(job["grpo"], learning_rate=0.002), RewardParams(), job["sam2"],
                        job["dir"].parent / "params.yaml")["set_aside"]
    assert moved is not None and (Path(moved) / "verl_log.jsonl").is_file()
    with pytest.raises(FileNotFoundError):
        latest_checkpoint(job["dir"])
    assert (job["dir"] / "launch.sh").is_file()  # the new job is written beside what was set aside


def _fake_python(path: Path) -> Path:
    """An executable that records its arguments and makes the target folder, as the merger would."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('#!/bin/sh\necho "$0 $@ PYTHONPATH=$PYTHONPATH" > "$(dirname "$0")/argv"\n'
                    'while [ $# -gt 0 ]; do [ "$1" = --target_dir ] && mkdir -p "$2"; shift; done\n')
    path.chmod(0o755)
    return path


def test_the_merge_runs_under_the_interpreter_that_trained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from stages.grpo.verl_engine import merge_command, merge_in_job_venv

    python = _fake_python(tmp_path / "cluster-venv" / "bin" / "python")
    record = {"actor": "checkpoints/global_step_8/actor", "python": str(python), "versions": {"torch": "2.11.0"}}
    target = tmp_path / "hf"
    assert merge_in_job_venv(tmp_path, record, tmp_path / "job", "cuda", target) == target and target.is_dir()
    actor = (tmp_path / "job" / record["actor"]).resolve()
    assert merge_command(python, actor, target) == [
        str(python), "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", str(actor),
        "--target_dir", str(target)]
    ran = (python.parent / "argv").read_text().split()
    assert ran[:-1] == merge_command(python, actor, target) and ran[-1] == f"PYTHONPATH={tmp_path}"


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_without_a_recorded_interpreter_the_devices_venv_merges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 device: str):
    from stages.grpo.verl_engine import job_python

    venv = tmp_path / "venv"
    monkeypatch.setenv("VRSFLOW_CLUSTER_VENV" if device == "cuda" else "VRSFLOW_VERL_CPU_VENV", str(venv))
    python = _fake_python(venv / "bin" / "python")
    record = {"actor": "a", "python": "/elsewhere/bin/python", "versions": {"torch": "2.11.0"}}
    assert job_python(tmp_path, record, device) == python  # never .venv's torch for a cluster checkpoint


def test_without_the_jobs_venv_only_the_same_torch_merges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from importlib.metadata import version

    from stages.core.errors import SetupError
    from stages.grpo.verl_engine import job_python

    monkeypatch.setenv("VRSFLOW_CLUSTER_VENV", str(tmp_path / "none"))
    same = {"actor": "a", "versions": {"torch": version("torch")}}
    assert job_python(tmp_path, same, "cuda") == Path(sys.executable)
    with pytest.raises(SetupError, match=r"torch 2\.11\.0 .* run scripts/setup_cluster\.sh") as err:
        job_python(tmp_path, {"actor": "a", "versions": {"torch": "2.11.0"}}, "cuda")
    assert "\n" not in str(err.value) and os.fspath(tmp_path / "none") in str(err.value)


def test_finish_records_the_interpreter(tmp_path: Path):
    from stages.grpo.verl_engine import finish

    _checkpoint(tmp_path)
    (tmp_path / "overrides.txt").write_text("a=1\n")
    assert finish(tmp_path)["python"] == sys.executable
