"""One line on what torch sees of the GPUs (the last line of scripts/setup_cluster.sh):
`cluster environment ready: torch 2.11.0+cu130, cuda_available=True, CUDA 13.0, driver 580.65.06, 8 GPU(s)`.

The driver version comes from NVML (`nvidia-smi`'s library, through torch's bundled pynvml when present, else
the `nvidia-smi` command); "none" when there is no NVIDIA driver. The lock's torch is the CUDA 13.0 build, which
needs driver ≥ 580 — with an older driver `cuda_available` is False (docs/grpo_verl.md: the CUDA 12.x build).
"""

from __future__ import annotations

import shutil
import subprocess


def driver_version() -> str:
    """The NVIDIA driver version, or "none"."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # noqa: BLE001 - no pynvml / no driver: ask nvidia-smi, else "none"
        pass
    if shutil.which("nvidia-smi"):
        result = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30)
        if result.returncode == 0 and result.stdout.strip():
            return result.stdout.strip().splitlines()[0]
    return "none"


def report() -> str:
    """`cluster environment ready: torch …, cuda_available=…, CUDA …, driver …, N GPU(s)`."""
    import torch

    available = torch.cuda.is_available()
    count = torch.cuda.device_count() if available else 0
    return (f"cluster environment ready: torch {torch.__version__}, cuda_available={available}, "
            f"CUDA {torch.version.cuda or 'none (CPU build)'}, driver {driver_version()}, {count} GPU(s)")


if __name__ == "__main__":
    print(report())
