"""verl's CPU platform: lets verl's own trainer (FSDP over gloo, Ray, the vLLM CPU rollout server) run on a
machine without an accelerator — the CPU rehearsal of the cluster job (docs/grpo_verl.md, "verl on this
machine").

verl 0.9.1 resolves its device through `verl.plugin.platform` (CUDA, NPU and ROCm built in). This module is
an out-of-tree platform registered through verl's own plugin mechanism: the `verl.plugins` entry point of
the vrsflow distribution (pyproject.toml), which `import verl` loads in every process, the trainer's Ray
actors included. It is never chosen by auto-detection: `VERL_PLATFORM=cpu` selects it (the rehearsal's
launch script sets it), so a GPU node that has vrsflow installed keeps verl's CUDA platform.

What differs from a GPU and why:
- the device is `cpu`; `current_device()` is `torch.device("cpu")`, not an index, because verl moves tensors
  with `.to(get_device_id())` and an integer there means CUDA device N in torch;
- collectives are gloo; a rank joins its group when verl selects its device (`bind_rank`: verl's own
  `cpu:gloo,cpu:gloo` backend string is refused by torch);
- Ray has no CPU accelerator, so verl's workers ask Ray for `GPU` slots, declared on the CPU head
  (`ray start --head --num-gpus N`) — one slot per FSDP rank, as on a GPU node; the slots reach no GPU;
- no CUDA IPC: verl's vLLM rollout then hands weights to the server through shared memory
  (`vllm_rollout.ServerAdapter.use_shm`), its built-in fallback;
- memory figures are the process's resident memory (psutil), the only memory a CPU run has.
"""

from __future__ import annotations

import contextlib
import os
import platform as host
import resource
from types import SimpleNamespace
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

NAME = "cpu"
NOSET_ENV = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"
# vLLM's CPU backend sizes its KV cache from this variable (GiB) instead of gpu_memory_utilization; a tiny
# model needs little. Kept unless the environment sets it.
KV_CACHE_GIB = "1"


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def _peak_rss() -> int:
    # ru_maxrss is in KiB on Linux: the process's peak resident memory since it started
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _mem_get_info(device: Any = None) -> tuple[int, int]:
    import psutil

    memory = psutil.virtual_memory()
    return memory.available, memory.total


def bind_rank(device: Any = None) -> None:
    """Selecting a rank's device on a CPU means joining its gloo process group.

    verl's workers build their group as `cpu:gloo,<device>:<backend>` (verl/utils/distributed.py,
    `initialize_global_process_group_ray`), which torch refuses when the device is the CPU itself ("Duplicate
    device type cpu in backend string": torch.distributed's BackendConfig). verl skips that call when a group
    exists, and its `Worker.__init__` selects the rank's device first (`get_torch_device().set_device(...)`,
    when RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES is set — the rehearsal's Ray head sets it); so the
    platform forms the group there, from the same RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT verl's
    worker group put in the environment, with the backend verl would have used for the CPU half of its pair.
    """
    import torch.distributed as dist

    if dist.is_initialized() or not all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR",
                                                                     "MASTER_PORT")):
        return
    dist.init_process_group(backend="cpu:gloo", rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]))


def _device_module() -> SimpleNamespace:
    """`torch.cpu` with the calls verl makes on `get_torch_device()` that torch.cpu lacks: a CPU has no
    caching allocator (emptying it, IPC collection and a memory fraction are no-ops) and its memory is the
    process's resident memory."""
    cpu = torch.cpu
    return SimpleNamespace(
        is_available=lambda: True,
        device_count=lambda: 1,
        current_device=lambda: torch.device(NAME),
        set_device=bind_rank,
        synchronize=lambda device=None: cpu.synchronize(),
        current_stream=cpu.current_stream,
        stream=cpu.stream,
        Stream=cpu.Stream,
        Event=cpu.Event,
        empty_cache=lambda: None,
        ipc_collect=lambda: None,
        set_per_process_memory_fraction=lambda fraction, device=None: None,
        mem_get_info=_mem_get_info,
        memory_allocated=lambda device=None: _rss(),
        memory_reserved=lambda device=None: _rss(),
        max_memory_allocated=lambda device=None: _peak_rss(),
        max_memory_reserved=lambda device=None: _peak_rss(),
        reset_peak_memory_stats=lambda device=None: None,
        get_rng_state=lambda device=None: torch.get_rng_state(),
        set_rng_state=lambda state, device=None: torch.set_rng_state(state),
        manual_seed=torch.manual_seed,
        manual_seed_all=torch.manual_seed,
        get_device_name=lambda device=None: host.processor() or host.machine(),
    )


_DEVICE_MODULE = _device_module()


@PlatformRegistry.register(platform=NAME)
class PlatformCPU(PlatformBase):
    """verl's platform interface on the host CPU (gloo collectives, declared Ray GPU slots, no IPC)."""

    @property
    def device_name(self) -> str:
        return NAME

    @property
    def vendor_name(self) -> str:
        return NAME

    @property
    def device_module(self) -> Any:
        return _DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # never auto-detected: a machine with a GPU keeps CUDA; VERL_PLATFORM=cpu selects this platform
        return False

    def current_device(self) -> Any:
        return torch.device(NAME)

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        bind_rank(device_index)

    def synchronize(self, device_index: int | None = None) -> None:
        torch.cpu.synchronize()

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None  # CUDA's caching-allocator options (expandable segments) have no CPU counterpart

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Ray sets it for the declared GPU slots; on a CPU-only machine it selects nothing
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        with torch.profiler.record_function(msg):
            yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        # Ray then leaves CUDA_VISIBLE_DEVICES alone and verl's Worker selects the rank's device (`bind_rank`)
        return [NOSET_ENV]

    def is_ipc_supported(self) -> bool:
        return False

    def rollout_env_vars(self) -> dict[str, str]:
        # vLLM's CPU platform, named rather than inferred from its version label
        return {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GIB),
                "VLLM_TARGET_DEVICE": "cpu"}

    def cudart(self) -> Any:
        return None


def register_engines() -> None:
    """verl's FSDP training engines for the CPU device, in verl's own `EngineRegistry`.

    verl registers its FSDP engines (`FSDPEngineWithLMHead`, `FSDPEngineWithValueHead`) for the devices
    `cuda` and `npu` only, and picks an engine by the platform's device name ("No engine registered for
    device='cpu'"). The engines themselves reach the device only through the platform (`get_device_id`,
    `get_torch_device`), so the same classes are registered, unchanged, for `cpu`.
    """
    from verl.workers.engine import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead

    for model_type, engine in (("language_model", FSDPEngineWithLMHead), ("value_model", FSDPEngineWithValueHead)):
        registered = EngineRegistry._engines.get(model_type, {})
        if all(NAME in registered.get(backend, {}) for backend in ("fsdp", "fsdp2")):
            continue
        EngineRegistry.register(model_type=model_type, backend=["fsdp", "fsdp2"], device=NAME)(engine)


# Only processes that run on this platform pay for importing the engines (verl loads this module on every
# `import verl`, GPU nodes included).
if os.environ.get("VERL_PLATFORM", "").strip().lower() == NAME:
    register_engines()
