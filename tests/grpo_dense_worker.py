"""A TRL GRPO worker for tests/stages/test_kill_resume.py, run under torchrun by `stages.models.launch.run_launched`
exactly as `stages.grpo.trl_engine` is, but with a dense reward: the verifiable reward of a random tiny model is 0
for every rollout, and weights moved by weight decay alone would agree whatever the rollouts were."""

import argparse
import json
from pathlib import Path

from stages.core.io import write_json
from stages.core.typed_config import build
from stages.grpo.data import build_dataset, read_grpo_shards
from stages.grpo.trl_engine import train_trl
from stages.params.grpo import GrpoParams
from stages.params.reward import RewardParams
from stages.params.sam2 import Sam2Params


class LowTokenShare:
    """The share of completion tokens in the lower half of a 512-token vocabulary."""

    __name__ = "low_token_share"

    def __call__(self, prompts, completions, completion_ids, **kwargs) -> list[float]:
        return [sum(t < 256 for t in ids) / max(1, len(ids)) for ids in completion_ids]


parser = argparse.ArgumentParser()
parser.add_argument("--job", type=Path, required=True)
job = json.loads(parser.parse_args().job.read_text())
grpo = build(GrpoParams, job["grpo"], "grpo")
result = train_trl(grpo, RewardParams(components=("format",)), Sam2Params(),
                   build_dataset(read_grpo_shards(Path(grpo.shards_dir))), Path(grpo.out_dir),
                   Path(grpo.checkpoint_dir), reward_fn=LowTokenShare())
if result["is_main"]:
    write_json(Path(job["result"]), {"global_step": result["global_step"], "resumed_from": result["resumed_from"]})
