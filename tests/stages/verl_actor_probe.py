"""Build verl's actor module the way its worker does (`ActorRolloutRefWorker.init_model` → `TrainingWorker` →
`FSDPEngine._build_module` [+ `_build_lora_module`]), on CPU with gloo and world size 1, up to the FSDP wrap
(which needs a GPU), and report what it built. verl's forward patches are left out (see `main`).

    python -m tests.stages.verl_actor_probe CASES.json OUT.json

CASES.json: {"name": [override, …], …} — each a full list of verl overrides (as in the job's overrides.txt).
OUT.json: per case either {"error": "<type>: <first line>"} or {"attn": hf_config._attn_implementation,
"model_attn": the built model's, "engine": the class verl's registry chose, "lora": [wrapped module names],
"trainable": [trainable parameter names]}.

Runs in its own process: verl's `apply_monkey_patch` replaces Qwen2.5-VL's forward for the whole process, and,
as on the GPU nodes (requirements-cluster.txt has no TRL), trl is made unimportable first.
"""

from __future__ import annotations

import json
import os
import socket
import sys

sys.modules["trl"] = None  # the GPU-node environment has no TRL (see tests/stages/test_grpo_verl_env.py)


def main(cases_path: str, out_path: str) -> None:
    import torch.distributed as dist
    import verl.workers.engine.fsdp.transformer_impl as fsdp_impl
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.engine import EngineRegistry

    # verl's forward patches (apply_monkey_patch) import classes of verl's own transformers (5.9, as pinned in
    # constraints-cluster.txt; this environment has 5.23); they replace forwards and attention kernels for
    # sequence packing, not which modules exist, train or which attention the config selects
    fsdp_impl.apply_monkey_patch = lambda **kwargs: None

    from stages.grpo.verl_engine import compose_config

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    results = {}
    for name, overrides in json.loads(open(cases_path).read()).items():
        try:
            config = compose_config(overrides)
            # what the job's Ray runtime env gives every worker (verl's engine choice reads VERL_ENGINE_VENDOR)
            os.environ.pop("VERL_ENGINE_VENDOR", None)
            env_vars = OmegaConf.select(config, "ray_kwargs.ray_init.runtime_env.env_vars") or {}
            os.environ.update({key: str(value) for key, value in env_vars.items()})
            model_config = omega_conf_to_dataclass(config.actor_rollout_ref.model)  # verl's HFModelConfig
            actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
            engine = EngineRegistry.new(model_type="language_model", backend=actor.engine.strategy,
                                        model_config=model_config, engine_config=actor.engine,
                                        optimizer_config=actor.optim, checkpoint_config=actor.checkpoint)
            module = engine._build_module()
            if model_config.lora_rank > 0:
                module = engine._build_lora_module(module)
        except Exception as err:  # noqa: BLE001 - reported to the test, which asserts on it
            results[name] = {"error": f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"}
            continue
        results[name] = {
            "engine": type(engine).__name__,
            "attn": model_config.hf_config._attn_implementation,
            "model_attn": module.config._attn_implementation,
            "use_orig_params": bool(actor.engine.use_orig_params),
            "lora": sorted(n.removesuffix(".lora_A") for n, _ in module.named_modules() if n.endswith(".lora_A")),
            "trainable": sorted(n for n, p in module.named_parameters() if p.requires_grad),
            "parameters": sorted(n for n, _ in module.named_parameters()),
        }
    dist.destroy_process_group()
    with open(out_path, "w") as out:
        json.dump(results, out, indent=1, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
