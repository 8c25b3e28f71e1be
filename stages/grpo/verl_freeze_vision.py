"""verl `external_lib` for full-parameter GRPO with `grpo.train_vision: false` (`grpo.lora_r: 0`).

verl 0.9.1's FSDP engine has no switch that freezes a VLM's vision tower (its `freeze_vision_tower` is read by
the Megatron/VeOmni engines only). verl imports `actor_rollout_ref.model.external_lib` in every worker before
it builds the model (`HFModelConfig.__post_init__`); importing this module wraps `FSDPEngine._build_module` so
that a training engine's module leaves every `visual.` parameter frozen (stages.models.trainable.freeze_vision,
as SFT and the TRL engine do). The frozen and trainable parameters then share FSDP units, which FSDP1 allows
with `use_orig_params: true` — set alongside by stages.grpo.verl_engine.verl_overrides.
"""

from __future__ import annotations

import functools

from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

from stages.models.trainable import freeze_vision


def _patch() -> None:
    build = FSDPEngine._build_module
    if getattr(build, "vrsflow_freeze_vision", False):
        return

    @functools.wraps(build)
    def _build_module(self):
        module = build(self)
        libs = self.model_config.external_lib
        asked = __name__ in (libs if isinstance(libs, list | tuple) else [libs])  # this engine's model config
        if asked and not self.engine_config.forward_only:  # the actor; the reference only computes log-probs
            freeze_vision(module)
        return module

    _build_module.vrsflow_freeze_vision = True
    FSDPEngine._build_module = _build_module


_patch()
