"""Seeded rollouts for verl: every rollout's vLLM sampling seed is a function of (grpo.seed, step, prompt id,
sample index), so which tokens a rollout draws does not depend on which requests vLLM batched it with, in which
order they arrived, or on a restart of the vLLM server after a resume.

verl 0.9.1 sets no per-request seed: its agent loops hand vLLM the same sampling params for every request, and
vLLM then draws all unseeded requests of a batch from one generator (`rollout.seed` seeds the server once), so
the draws depend on request timing. Its `full_determinism` mode gives every request the *same* seed
(`vllm_async_server.py`: `sampling_params.setdefault("seed", replica_rank + seed)`), which makes the n rollouts of a
prompt identical. vLLM's `SamplingParams.seed` gives a request a generator of its own.

The agent loop here is verl's single-turn loop with the seed put into the request's sampling params; it reaches
verl through verl's own extension points: the agent-loop registry, filled from the YAML file named by
`actor_rollout_ref.rollout.agent.agent_loop_config_path` (`AGENT_LOOPS`, read by every agent-loop worker), and
`actor_rollout_ref.rollout.agent.default_agent_loop` (`seeded_overrides`). verl's v1 trainer passes each agent loop
the step (`global_steps`) and the sample index among the prompt's `rollout.n` (`session_id`,
`verl/trainer/ppo/v1/agent_loop_tq.py`, `AgentLoopWorkerTQ._run_prompt`); the prompt id is the shard stage's
`extra_info.sample_id`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

AGENT_LOOP = "vrsflow_seeded"  # its name in verl's agent-loop registry
AGENT_LOOPS = Path(__file__).with_name("verl_agent_loops.yaml")  # the registry entries verl's workers load
SEED_BITS = 31  # vLLM seeds a torch.Generator per request; a non-negative 31-bit int is valid everywhere


def rollout_seed(seed: int, step: int, prompt_id: str, sample_index: int) -> int:
    """The sampling seed of one rollout: sha256 of (grpo.seed, step, prompt id, sample index), 31 bits.

    Independent of batch composition, request order, worker count and restarts; distinct for the n samples of a
    prompt (their draws differ) and for the same prompt at another step.
    """
    key = f"vrsflow-rollout\0{int(seed)}\0{int(step)}\0{prompt_id}\0{int(sample_index)}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") >> (64 - SEED_BITS)


def seeded_params(sampling_params: Mapping[str, Any], seed: int, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """`sampling_params` with the rollout's `seed`, from what verl's v1 agent-loop worker passes a loop.

    Raises:
        KeyError: verl passed no step, sample index or prompt id (another trainer than verl's v1 one, or a
            parquet without `extra_info.sample_id`) — one line naming the key.
    """
    missing = [key for key in ("global_steps", "session_id") if key not in kwargs]
    extra = kwargs.get("extra_info") or {}
    if "sample_id" not in extra:
        missing.append("extra_info.sample_id")
    if missing:
        raise KeyError(f"seeded rollouts ({AGENT_LOOP}): verl passed no {', '.join(missing)} to the agent loop "
                       "(verl's v1 trainer and the shard stage's verl parquet pass them)")
    return {**sampling_params,
            "seed": rollout_seed(seed, int(kwargs["global_steps"]), str(extra["sample_id"]), int(kwargs["session_id"]))}


def seeded_overrides() -> list[str]:
    """The Hydra overrides that make verl's agent-loop workers use the seeded loop for every prompt."""
    return [f"actor_rollout_ref.rollout.agent.agent_loop_config_path={AGENT_LOOPS}",
            f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_LOOP}"]


def _define():
    # verl is imported only where the loop runs (verl's workers) or is checked, never by the grpo stage itself
    from verl.experimental.agent_loop.agent_loop import register
    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

    class SeededSingleTurnAgentLoop(SingleTurnAgentLoop):
        """verl's single-turn agent loop whose vLLM request carries the rollout's own seed (`rollout_seed`)."""

        async def run(self, sampling_params: dict[str, Any], **kwargs) -> Any:
            seeded = seeded_params(sampling_params, int(self.rollout_config.seed), kwargs)
            return await super().run(seeded, **kwargs)

    # named as hydra's `_target_` in AGENT_LOOPS finds it (register records this name too)
    SeededSingleTurnAgentLoop.__module__ = __name__
    SeededSingleTurnAgentLoop.__qualname__ = "SeededSingleTurnAgentLoop"
    register(AGENT_LOOP)(SeededSingleTurnAgentLoop)
    return SeededSingleTurnAgentLoop


def __getattr__(name: str):
    if name == "SeededSingleTurnAgentLoop":  # defined on first use: importing this module needs no verl
        cls = _define()
        globals()[name] = cls
        return cls
    raise AttributeError(name)
