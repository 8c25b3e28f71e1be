"""verl `external_lib` for full-parameter GRPO with `grpo.train_vision: false` (`grpo.lora_r: 0`).

verl 0.9.1's FSDP engine has no switch that freezes a VLM's vision tower (its `freeze_vision_tower` is read by
the Megatron/VeOmni engines only). This module adds an engine that does, through verl's own `EngineRegistry`:
`FrozenVisionFSDPEngine` is verl's `FSDPEngineWithLMHead` whose training module leaves every `visual.` parameter
frozen (stages.models.trainable.freeze_vision, as SFT and the TRL engine do). It is registered under a vendor
name of its own (`VENDOR`) for every device verl's FSDP engine serves, so verl picks it only in a job that names
that vendor in `VERL_ENGINE_VENDOR` — verl's own override of the detected vendor, read where the registry
chooses an engine. stages.grpo.verl_engine.verl_overrides sets both for such a job: this module as
`actor_rollout_ref.model.external_lib` (verl imports it in every worker when it builds the model config, before it
asks the registry for the engine) and the variable in the job's Ray runtime env (every worker has it). The frozen
and trainable parameters then share FSDP units, which FSDP1 allows with `use_orig_params: true`, set alongside.
Nothing of verl is replaced: any other job gets verl's own engine.
"""

from __future__ import annotations

from verl.workers.engine import EngineRegistry
from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

from stages.grpo.verl_engine import FREEZE_VISION_VENDOR as VENDOR  # the name the job's runtime env selects
from stages.models.trainable import freeze_vision

DEVICES = ("cuda", "npu", "cpu")  # verl's FSDP devices, and this project's CPU platform (verl_cpu_platform)
BACKENDS = ("fsdp", "fsdp2")


class FrozenVisionFSDPEngine(FSDPEngineWithLMHead):
    """verl's FSDP language-model engine; the module it trains has its vision tower frozen."""

    def _build_module(self):
        module = super()._build_module()
        if not self.engine_config.forward_only:  # the actor; the reference only computes log-probs
            freeze_vision(module)
        return module


def register() -> None:
    """`FrozenVisionFSDPEngine` in verl's registry for (device, VENDOR) of each device (once per process)."""
    registered = EngineRegistry._engines.get("language_model", {})
    devices = [d for d in DEVICES if any((d, VENDOR) not in registered.get(b, {}) for b in BACKENDS)]
    if devices:
        EngineRegistry.register(model_type="language_model", backend=list(BACKENDS), device=devices,
                                vendor=VENDOR)(FrozenVisionFSDPEngine)


register()
