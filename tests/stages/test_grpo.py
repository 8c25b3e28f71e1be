"""GRPO stage: verl config generated from params and validated by verl itself; a two-step TRL run on CPU
that writes the checkpoint and curves, then resumes; curve summaries."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stages.core.params import GrpoParams, GrpoVerlParams, RewardParams, Sam2Params, TinyModelsParams
from stages.grpo.curves import read_curve, window_summary
from tests.stages.grpo_factory import write_grpo_shards

PAPER = replace(GrpoParams(), batch_size=16, num_generations=8, learning_rate=1e-6, max_response_length=1024)


def test_verl_config_validates_with_paper_values():
    pytest.importorskip("verl")
    from stages.grpo.verl_engine import compose_config, validate, verl_overrides

    config = compose_config(verl_overrides(PAPER, RewardParams(), "/m", "/t.parquet", "/t.parquet", "/o", "/p.yaml"))
    validate(config)
    actor, rollout = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
    assert config.algorithm.adv_estimator == "grpo" and config.data.train_batch_size == 16
    assert (rollout.n, rollout.temperature, config.data.max_response_length) == (8, 1.0, 1024)
    assert (actor.use_kl_loss, actor.kl_loss_coef, actor.kl_loss_type) == (True, 0.005, "low_var_kl")
    assert (actor.optim.lr, actor.grad_clip, config.actor_rollout_ref.model.lora_rank) == (1e-6, 1.0, 8)
    assert config.reward.custom_reward_function.name == "compute_score"
    assert config.reward.custom_reward_function.reward_kwargs.sam2_service == "vrsflow-sam2"


def test_verl_validation_rejects_indivisible_batch():
    pytest.importorskip("verl")
    from stages.grpo.verl_engine import compose_config, validate, verl_overrides

    bad = replace(PAPER, batch_size=3, num_generations=3)
    with pytest.raises(AssertionError, match="divisible"):
        validate(compose_config(verl_overrides(bad, RewardParams(), "/m", "/t", "/t", "/o", "/p")))


def test_prepare_verl_job_writes_config_and_launch(tmp_path):
    pytest.importorskip("verl")
    from stages.grpo.verl_engine import prepare_job

    parquet = tmp_path / "grpo.parquet"
    pq.write_table(pa.table({"data_source": ["vrsflow/revos"]}), parquet)
    params = replace(PAPER, verl_parquet=str(parquet), verl=GrpoVerlParams(out_dir=str(tmp_path / "verl")))
    job = prepare_job(params, RewardParams(), Sam2Params(), tmp_path / "params.yaml")
    launch = Path(job["launch"]).read_text()
    assert "stages.rewards.sam2_service" in launch and "verl.trainer.main_ppo" in launch
    assert "stages.grpo.curves" in launch and (tmp_path / "verl" / "config.yaml").is_file()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """Two TRL GRPO steps on CPU with a tiny model built here (small vocabulary)."""
    import torch

    from stages.grpo import run_grpo
    from stages.models.tiny_qwen import build_tiny_qwen

    torch.set_num_threads(2)
    root = tmp_path_factory.mktemp("grpo")
    build_tiny_qwen(TinyModelsParams(vocab_size=512, hidden_size=64, num_layers=1, num_heads=2, max_image_side=56),
                    root / "model")
    write_grpo_shards(root / "shards", 2)
    params = replace(GrpoParams(), model_path=str(root / "model"), shards_dir=str(root / "shards"),
                     out_dir=str(root / "out"), checkpoint_dir=str(root / "ckpt"), batch_size=1, num_generations=2,
                     max_steps=2, max_response_length=12, save_every_steps=1)
    reward = RewardParams(components=("format", "keyframe", "spatial"))
    report = run_grpo(params, reward, Sam2Params(), root / "curve.csv")
    return root, params, reward, report


def test_trl_two_steps_write_checkpoint_and_metrics(tiny_run):
    root, _, _, report = tiny_run
    rows = read_curve(root / "curve.csv")
    assert [r["step"] for r in rows] == [1, 2]
    assert {"reward", "kl", "response_length", "reward_format", "reward_keyframe", "reward_spatial"} <= set(rows[0])
    assert report.metrics["steps"] == 2 and "reward_first" in report.metrics and "reward_last" in report.metrics
    assert (root / "out" / "adapter" / "adapter_config.json").is_file()
    assert (root / "out" / "merged" / "config.json").is_file() and (root / "out" / "lineage.json").is_file()


def test_trl_resumes_from_checkpoint(tiny_run):
    from stages.grpo import run_grpo

    root, params, reward, _ = tiny_run
    report = run_grpo(params, reward, Sam2Params(), root / "curve2.csv")
    assert report.metrics["steps"] == 2  # nothing left to train: the history comes from checkpoint-2
    assert [r["step"] for r in read_curve(root / "curve2.csv")] == [1, 2]


@pytest.mark.parametrize(("rewards", "first", "last"), [([0, 1, 2, 3, 4, 5], 0.5, 4.5), ([1.0], 1.0, 1.0)])
def test_window_summary(rewards, first, last):
    rows = [{"step": i + 1, "reward": r, "kl": 0.0, "response_length": 5.0} for i, r in enumerate(rewards)]
    summary = window_summary(rows, 2)
    assert (summary["reward_first"], summary["reward_last"]) == (first, last)
