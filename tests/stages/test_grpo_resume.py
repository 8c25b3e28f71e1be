"""TRL GRPO resumes exactly: a run interrupted after a checkpoint and rerun ends with the same adapter, tensor
for tensor, as an uninterrupted run — also when the checkpoint falls inside a later pass over the pool (the
prompt sampler's position) and the rerun must generate the same rollouts (the generation RNG)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from stages.params.grpo import GrpoParams
from stages.params.reward import RewardParams
from stages.params.sam2 import Sam2Params
from stages.params.tiny_models import TinyModelsParams
from tests.stages.grpo_factory import write_grpo_shards

# 3 prompts, one a round: a pass over the pool is 3 rounds; checkpoints every 2 rounds, so checkpoint-4 lies
# inside the second pass, where the sampler has drawn its second shuffle
PARAMS = {"batch_size": 1, "num_generations": 2, "max_steps": 6, "max_response_length": 8, "save_every_steps": 2,
          "learning_rate": 5e-3}
REWARD = RewardParams(components=("format", "keyframe", "spatial"))


class LowTokenShare:
    """A dense reward (the share of completion tokens in the lower half of the vocabulary): the verifiable
    reward of a random tiny model is 0 for every rollout, and weights moved by weight decay alone would agree
    whatever the rollouts were."""

    __name__ = "low_token_share"

    def __call__(self, prompts, completions, completion_ids, **kwargs) -> list[float]:
        return [sum(t < 256 for t in ids) / max(1, len(ids)) for ids in completion_ids]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    import torch

    from stages.tiny_models.tiny_qwen import build_tiny_qwen

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("grpo_resume")
    build_tiny_qwen(TinyModelsParams(vocab_size=512, hidden_size=64, num_layers=1, num_heads=2, max_image_side=56),
                    root / "model")
    write_grpo_shards(root / "shards", 3)
    return root


def _train(root: Path, folder: Path):
    from stages.grpo.data import build_dataset, read_grpo_shards
    from stages.grpo.trl_engine import train_trl

    params = replace(GrpoParams(), model_path=str(root / "model"), shards_dir=str(root / "shards"),
                     out_dir=str(folder / "out"), checkpoint_dir=str(folder / "ckpt"), **PARAMS)
    return train_trl(params, REWARD, Sam2Params(), build_dataset(read_grpo_shards(root / "shards")), folder / "out",
                     folder / "ckpt", reward_fn=LowTokenShare())


def _adapter(folder: Path):
    from safetensors.torch import load_file

    return load_file(str(folder / "out" / "adapter" / "adapter_model.safetensors"))


@pytest.mark.slow  # three short GRPO runs: ~40 s on a quiet machine
def test_interrupted_grpo_resumes_to_the_uninterrupted_adapter(inputs, tmp_path, monkeypatch):
    import torch
    from transformers import Trainer

    reference = _train(inputs, tmp_path / "reference")
    assert reference["global_step"] == 6

    real_save, saves = Trainer._save_checkpoint, []

    def save_then_die(self, *args, **kwargs):  # a kill right after the second checkpoint (round 4)
        real_save(self, *args, **kwargs)
        saves.append(self.state.global_step)
        if len(saves) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "_save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        _train(inputs, tmp_path / "killed")
    monkeypatch.undo()
    assert saves == [2, 4]
    resumed = _train(inputs, tmp_path / "killed")
    assert resumed["resumed_from"].endswith("checkpoint-4") and resumed["global_step"] == 6
    a, b = _adapter(tmp_path / "reference"), _adapter(tmp_path / "killed")
    assert a.keys() == b.keys() and [k for k in a if not torch.equal(a[k], b[k])] == []
    rewards = [[e["reward"] for e in r["log_history"] if "reward" in e] for r in (reference, resumed)]
    assert rewards[0] == rewards[1] and len(set(rewards[0])) > 1  # the same rollouts, round for round
