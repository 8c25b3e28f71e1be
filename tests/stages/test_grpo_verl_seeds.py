"""Seeded verl rollouts without running verl: the seed derivation, the agent loop that puts the seed into vLLM's
sampling params, and that verl's own pieces accept it — its config composition and `validate_config`, its
agent-loop registry loading our YAML as its workers do, and its v1 agent-loop worker handing our loop the step
and sample index the seed is derived from. The run itself (two runs, byte-identical weights) is
`tests/stages/test_grpo_verl_cpu.py`, marker verl_cpu."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stages.grpo.verl_agent_loop import AGENT_LOOP, AGENT_LOOPS, rollout_seed, seeded_params
from stages.params.grpo import GrpoParams
from stages.params.reward import RewardParams

KWARGS = {"global_steps": 3, "session_id": 2, "extra_info": {"sample_id": "revos/vid7/exp1"}, "raw_prompt": []}


def test_the_derivation_is_pinned():
    # a changed derivation changes every verl run's rollouts: it must be a deliberate change of this literal
    assert rollout_seed(0, 1, "revos/vid7/exp1", 0) == 2125190533


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 10**6), st.text(max_size=40), st.integers(0, 63))
def test_seeds_are_valid_and_differ_in_every_argument(seed: int, step: int, prompt: str, sample: int):
    value = rollout_seed(seed, step, prompt, sample)
    assert 0 <= value < 2**31 and value == rollout_seed(seed, step, prompt, sample)
    others = {rollout_seed(seed + 1, step, prompt, sample), rollout_seed(seed, step + 1, prompt, sample),
              rollout_seed(seed, step, prompt + "x", sample), rollout_seed(seed, step, prompt, sample + 1)}
    assert value not in others


def test_seeded_params_add_the_seed_and_keep_the_rest():
    params = {"temperature": 1.0, "top_p": 1.0, "logprobs": False}
    seeded = seeded_params(params, 7, KWARGS)
    assert seeded == {**params, "seed": rollout_seed(7, 3, "revos/vid7/exp1", 2)} and "seed" not in params


@pytest.mark.parametrize(("drop", "named"), [("global_steps", "global_steps"), ("session_id", "session_id"),
                                             ("extra_info", "extra_info.sample_id")])
def test_missing_step_sample_or_prompt_is_one_line(drop: str, named: str):
    with pytest.raises(KeyError, match=named) as err:
        seeded_params({}, 0, {k: v for k, v in KWARGS.items() if k != drop})
    assert "\n" not in str(err.value)


def test_verl_composes_validates_and_registers_the_seeded_loop():
    pytest.importorskip("verl")
    from hydra.utils import get_class
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
    from verl.utils.import_utils import resolve_config_path

    from stages.grpo.verl_engine import compose_config, validate, verl_overrides

    grpo = replace(GrpoParams(), engine="verl", seed=5)
    config = compose_config(verl_overrides(grpo, RewardParams(), "/m", "/t.parquet", "/t.parquet", "/o", "/p.yaml"))
    validate(config)
    agent = config.actor_rollout_ref.rollout.agent
    assert agent.default_agent_loop == AGENT_LOOP and config.actor_rollout_ref.rollout.seed == 5
    env = config.ray_kwargs.ray_init.runtime_env.env_vars
    # Ray's runtime_env takes strings only (an int raised TypeError at ray.init in the first CPU run)
    assert all(isinstance(value, str) for value in env.values()), dict(env)
    # verl imports these in order on `import verl`, before its entry points: the CPU platform before the trainer
    # (whose verl imports ask for the platform; "Unknown platform 'cpu'" in the first CPU run)
    assert env.PYTHONHASHSEED == "5"
    assert env.VERL_USE_EXTERNAL_MODULES == "stages.grpo.verl_cpu_platform,stages.grpo.verl_trainer"
    assert config.trainer.v1.trainer_mode == "vrsflow_sync"
    # the training engines seed themselves from grpo.seed before the LoRA matrices are drawn (verl's own switch)
    for role in (config.actor_rollout_ref.actor, config.actor_rollout_ref.ref):
        assert role.fsdp_config.full_determinism is True and role.fsdp_config.seed == 5
    # what verl's AgentLoopWorker.__init__ does with agent_loop_config_path, then hydra's _target_ lookup
    entries = {e.name: e for e in OmegaConf.load(resolve_config_path(agent.agent_loop_config_path))}
    assert resolve_config_path(agent.agent_loop_config_path) == str(AGENT_LOOPS)
    cls = get_class(entries[AGENT_LOOP]["_target_"])
    assert issubclass(cls, SingleTurnAgentLoop)
    assert _agent_loop_registry[AGENT_LOOP]["_target_"] == entries[AGENT_LOOP]["_target_"]


def test_the_loop_hands_verls_single_turn_run_the_seeded_params(monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("verl")
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

    from stages.grpo.verl_agent_loop import SeededSingleTurnAgentLoop

    seen = []

    async def single_turn_run(self, sampling_params, **kwargs):  # stands in for the vLLM request
        seen.append(sampling_params)
        return "output"

    monkeypatch.setattr(SingleTurnAgentLoop, "run", single_turn_run)
    loop = SeededSingleTurnAgentLoop.__new__(SeededSingleTurnAgentLoop)
    loop.rollout_config = OmegaConf.create({"seed": 7})
    assert asyncio.run(loop.run({"temperature": 1.0}, **KWARGS)) == "output"
    assert seen == [{"temperature": 1.0, "seed": rollout_seed(7, 3, "revos/vid7/exp1", 2)}]


def test_verls_v1_worker_passes_the_step_and_sample_index(monkeypatch: pytest.MonkeyPatch):
    """verl's own `AgentLoopWorkerTQ._run_prompt` (the v1 trainer's) starts rollout.n loops per prompt; each gets
    `global_steps` and its `session_id`, so the n seeds differ and follow the step."""
    pytest.importorskip("transfer_queue")
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1 import agent_loop_tq

    class Queue:  # the TransferQueue client's status writes
        async def async_kv_put(self, **kwargs):
            return None

    monkeypatch.setattr(agent_loop_tq, "tq", Queue())
    worker_cls = agent_loop_tq.AgentLoopWorkerTQ.__ray_actor_class__
    worker = worker_cls.__new__(worker_cls)
    worker.config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"n": 4, "val_kwargs": {"n": 1}}}})
    calls = []

    async def run_agent_loop(sampling_params, trajectory, trace=False, **kwargs):
        calls.append(seeded_params(sampling_params, 0, kwargs)["seed"])

    worker._run_agent_loop = run_agent_loop
    prompt = {"uid": "u0", "global_steps": 6, "extra_info": {"sample_id": "revos/vid7/exp1"}}
    asyncio.run(worker._run_prompt(dict(prompt), {"temperature": 1.0}, trajectory={"validate": False}))
    assert calls == [rollout_seed(0, 6, "revos/vid7/exp1", i) for i in range(4)] and len(set(calls)) == 4


def test_first_divergence_names_step_prompt_rollout_and_character():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench.bench_verl_cpu import first_divergence

    a = {1: {"p": ["<think>a</think>", "<think>b</think>"]}, 2: {"p": ["x"]}}
    assert first_divergence(a, a) is None
    b = {1: a[1], 2: {"p": ["y"]}}
    assert first_divergence(a, b) == {"step": 2, "prompt": "p", "rollout": 0, "char": 0, "a": "x", "b": "y"}
    c = {1: {"p": ["<think>a</think>", "<think>c</think>"]}}
    assert first_divergence(a, c)["step"] == 1 and first_divergence(a, c)["char"] == 7


def test_the_trainer_gives_prompt_groups_deterministic_uids(monkeypatch: pytest.MonkeyPatch):
    """verl's trainer registry has the trainer the job names; it runs as verl's `sync` mode, and a fetched batch's
    uids are a function of (seed, step, position, sample id) — the order verl's replay buffer puts a step in."""
    pytest.importorskip("transfer_queue")
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from stages.grpo.verl_engine import TRAINER_MODE, TRAINER_MODULE
    from stages.grpo.verl_trainer import DeterministicUidTrainer, group_uid

    assert TRAINER_MODULE == DeterministicUidTrainer.__module__
    assert get_trainer_cls(TRAINER_MODE) is DeterministicUidTrainer
    modes = []
    monkeypatch.setattr(PPOTrainer, "__init__", lambda self, config: modes.append(config.trainer.v1.trainer_mode))
    config = OmegaConf.create({"trainer": {"v1": {"trainer_mode": TRAINER_MODE}},
                               "actor_rollout_ref": {"rollout": {"seed": 3}}})
    trainer = DeterministicUidTrainer(config)
    assert modes == ["sync"]  # verl's base trainer takes its sync code paths
    batch = {"raw_prompt": np.array([[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]],
                                    dtype=object),
             "extra_info": np.array([{"sample_id": "s0"}, {"sample_id": "s1"}], dtype=object),
             "input_ids": torch.zeros(2, 3, dtype=torch.long)}
    trainer.config, trainer.global_steps = config, 5
    trainer.train_dataloader, trainer.train_dataloader_it = [batch], None
    uids = list(trainer._fetch_one_gen_batch()["uid"])
    assert uids == [group_uid(3, 5, 0, "s0"), group_uid(3, 5, 1, "s1")] and len(set(uids)) == 2
    assert group_uid(3, 6, 0, "s0") != uids[0] and group_uid(4, 5, 0, "s0") != uids[0]
