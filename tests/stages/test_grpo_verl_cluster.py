"""The GPU-node path, checked with the tools that refused it (issue 25), on a CPU machine.

One module-scoped Ray head that declares 8 GPUs (`ray start --head --num-gpus 8` accepts declared GPUs without
any), later joined by a second node with 8 more, carries every check that needs Ray:

- GPU layouts: launch.sh's own lines up to `main_ppo` (Ray check, `check-resources`, the SAM2 service), then
  verl's own resource pool (`PPOTrainer._init_resource_pool_mgr` → `ResourcePoolManager.create_resource_pool`,
  and its placement groups made ready by Ray) for the layout the job asks for: 1 node × 8, 1 × 2, 2 × 8, with
  SAM2 colocated (0 GPUs in Ray's books) and reserved (its own GPU). Where launch.sh refuses, verl refuses too
  ("Total available GPUs 7.0 is less than total desired GPUs 8" was the original failure).
- sam2.config as a sam2 package name and as a full SAM2 config file in the project, through sam2's own
  `build_sam2_video_predictor` and through launch.sh's SAM2 line; two jobs, two services on one Ray head; a
  service name serving other files is refused in one line; `finish` stops the job's service.
- The actor: verl's HFModelConfig + FSDP engine build the tiny model as the worker does (tests/stages/
  verl_actor_probe.py): sdpa attention from our overrides (verl's default flash_attention_2 is refused without
  flash-attn), LoRA on no `visual.` module unless grpo.train_vision, the vision tower frozen for full fine-tuning.
- `python -m stages.grpo.verl_engine prepare`: the job without GPUs, one line, exit 0.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

pytest.importorskip("verl")
ray = pytest.importorskip("ray")

from stages.params.grpo import GrpoParams, GrpoVerlParams  # noqa: E402
from stages.params.reward import RewardParams  # noqa: E402
from stages.params.sam2 import Sam2Params  # noqa: E402
from stages.params.tiny_models import TinyModelsParams  # noqa: E402
from tests.stages.test_grpo_verl import (  # noqa: E402
    RAY_NODE_ENV,
    TRAINER,
    _env,
    _free_port,
    _plain,
    wait_ray_up,
)

PROJECT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PACKAGE_CONFIG = "configs/sam2.1/sam2.1_hiera_t.yaml"  # the smallest config of the sam2 package


def _write_parquet(path: Path, seed: int) -> Path:
    """A verl parquet as the shard stage writes it, as far as the SAM2 service reads it (frames by sample id)."""
    import io

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    rng = np.random.default_rng(seed)
    rows = []
    for i in range(2):
        images = []
        for _ in range(3):
            buffer = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)).save(buffer, format="JPEG")
            images.append({"bytes": buffer.getvalue(), "path": None})
        rows.append({"data_source": "synth", "images": images, "extra_info": {"sample_id": f"s{seed}-{i}"}})
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _full_config_file(vrsflow_config: Path, target: Path) -> Path:
    """The tiny SAM2's vrsflow config (base + overrides) composed into one full SAM2 Hydra config file."""
    import sam2  # noqa: F401 - initialises sam2's Hydra search path
    from hydra import compose
    from omegaconf import OmegaConf

    from stages.sam2_wrapper import resolve_config

    name, overrides = resolve_config(str(vrsflow_config))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("# @package _global_\n" + OmegaConf.to_yaml(compose(config_name=name, overrides=overrides)))
    return target


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Tiny Qwen2.5-VL + micro SAM2 (vrsflow config), the same SAM2 as a full project config file, a hiera_t
    checkpoint for the package config name, two verl parquets."""
    import torch
    from sam2.build_sam import build_sam2

    from stages.tiny_models import build_tiny_models

    base = tmp_path_factory.mktemp("verlgpu")
    build_tiny_models(TinyModelsParams(vocab_size=512, hidden_size=64, num_layers=1, num_heads=2,
                                       max_image_side=56, sam2_image_size=256), base / "tiny")
    full = _full_config_file(base / "tiny/sam2/config.yaml", base / "project/configs/sam2/sam2_micro.yaml")
    hiera_t = base / "hiera_t.pt"
    torch.save({"model": build_sam2(PACKAGE_CONFIG, ckpt_path=None, device="cpu").state_dict()}, hiera_t)
    return {"base": base, "qwen": base / "tiny/qwen25vl", "micro": base / "tiny/sam2/model.pt",
            "micro_config": base / "tiny/sam2/config.yaml", "full_config": full, "hiera_t": hiera_t,
            "parquet": [_write_parquet(base / f"p{i}.parquet", i) for i in range(2)]}


def make_job(world: dict, name: str, n: int = 8, nnodes: int = 1, placement: str = "colocated", parquet: int = 0,
             checkpoint: str | None = None, config: str | None = None, lora_r: int = 4, train_vision: bool = False,
             write_params: bool = False) -> dict:
    """prepare_job for a layout (the paper's batch: 16 prompts × 8 rollouts, divisible by every GPU count here)."""
    from stages.grpo.verl_engine import prepare_job

    base = world["base"]
    grpo = GrpoParams(engine="verl", model_path=str(world["qwen"]), verl_parquet=str(world["parquet"][parquet]),
                      out_dir=str(base / name / "models/grpo"), checkpoint_dir=str(base / name / "models/ckpt"),
                      batch_size=16, num_generations=8, max_steps=2,
                      lora_r=lora_r, lora_alpha=8, train_vision=train_vision,
                      verl=GrpoVerlParams(n_gpus_per_node=n, nnodes=nnodes, sam2_placement=placement, sam2_gpus=1.0,
                                          out_dir=str(base / name / "job")))
    sam2 = Sam2Params(checkpoint=checkpoint or str(world["micro"]), config=config or str(world["micro_config"]))
    reward = RewardParams()
    params_path = base / name / "params.yaml"
    params_path.parent.mkdir(parents=True, exist_ok=True)
    params_path.write_text(yaml.safe_dump(_plain({"grpo": grpo, "reward": reward, "sam2": sam2}), sort_keys=False))
    if write_params:
        return {"params_path": params_path, "grpo": grpo}
    job = prepare_job(grpo, reward, sam2, params_path)
    return {**job, "dir": Path(grpo.verl.out_dir), "grpo": grpo, "params_path": params_path,
            "record": json.loads((Path(grpo.verl.out_dir) / "job.json").read_text())}


def launch_lines(job: dict) -> tuple[str, str]:
    """launch.sh up to (not including) main_ppo, and its SAM2 line alone (with the header)."""
    lines = Path(job["launch"]).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(TRAINER))
    header = lines[:next(i for i, line in enumerate(lines) if line.startswith("ray status"))]
    sam2_line = [line for line in lines[:start] if "stages.rewards.sam2_service" in line]
    return "\n".join(lines[:start]) + "\n", "\n".join(header + sam2_line) + "\n"


def bash(script: str, folder: Path, name: str, address: str) -> subprocess.CompletedProcess:
    path = folder / name
    path.write_text(script)
    return subprocess.run(["bash", str(path)], env=_env(RAY_ADDRESS=address), capture_output=True, text=True,
                          timeout=600)


def _start_node(args: list[str], log_path: Path) -> subprocess.Popen:
    log = open(log_path, "w")  # noqa: SIM115 - closed with the process
    # every node advertises 127.0.0.1, the address the test connects to, not the machine's IP (which a CI
    # sandbox need not route: ray.init then fails to reach the GCS)
    process = subprocess.Popen([str(BIN / "ray"), "start", "--block", "--disable-usage-stats",
                                "--node-ip-address=127.0.0.1", *args],
                               env=_env(**RAY_NODE_ENV),
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    process.log = log
    return process


def _stop_nodes(processes: list[subprocess.Popen]) -> None:
    """SIGTERM to every node and everything it started (own session) at once, then wait for each."""
    for process in processes:
        os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        process.log.close()


def _wait_gpus(total: float, process: subprocess.Popen, log_path: Path) -> None:
    deadline = time.monotonic() + 300
    while ray.cluster_resources().get("GPU", 0) < total:
        assert process.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
        time.sleep(1)


@pytest.fixture(scope="module")
def cluster(world: dict):
    """A Ray head declaring 8 GPUs (and 32 CPUs: verl's bundles ask for 3 CPUs per GPU), private ports and temp
    dir; `add_node()` joins a second node with 8 more. RAY_ADDRESS points at the head."""
    temp = Path(tempfile.mkdtemp(prefix="vrsgpu"))  # short: Ray's socket paths have a length limit
    head_log = world["base"] / "ray_head.log"
    nodes = []
    previous = os.environ.get("RAY_ADDRESS")
    head = None
    try:
        for _ in range(3):  # Ray gives a starting node 30 s to register; a crowded machine can miss that
            port = _free_port()
            head = _start_node(["--head", f"--port={port}", "--num-cpus=32", "--num-gpus=8",
                                "--include-dashboard=false", f"--temp-dir={temp}",
                                f"--ray-client-server-port={_free_port()}",
                                f"--dashboard-agent-listen-port={_free_port()}",
                                f"--metrics-export-port={_free_port()}"], head_log)
            address = f"127.0.0.1:{port}"
            if wait_ray_up(address, head, head_log):
                break
            head.log.close()
        assert head.poll() is None, head_log.read_text()[-3000:]
        os.environ["RAY_ADDRESS"] = address
        from stages.rewards.sam2_service import NAMESPACE

        ray.init(address=address, namespace=NAMESPACE, logging_level="ERROR")

        def add_node() -> None:
            if nodes:
                return
            log_path = world["base"] / "ray_node2.log"
            nodes.append(_start_node([f"--address={address}", "--num-cpus=32", "--num-gpus=8",
                                      f"--dashboard-agent-listen-port={_free_port()}",
                                      f"--metrics-export-port={_free_port()}"], log_path))
            _wait_gpus(16, nodes[0], log_path)

        yield {"address": address, "add_node": add_node}
    finally:
        ray.shutdown()
        os.environ.pop("RAY_ADDRESS", None) if previous is None else os.environ.update(RAY_ADDRESS=previous)
        _stop_nodes(nodes + ([head] if head is not None and head.poll() is None else []))
        shutil.rmtree(temp, ignore_errors=True)


def verl_pool(job: dict):
    """verl's own resource pool for the job's config, built as its trainer builds it, then checked."""
    from types import SimpleNamespace

    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from stages.grpo.verl_engine import compose_config

    overrides = [o for o in (job["dir"] / "overrides.txt").read_text().split("\n") if o]
    trainer = SimpleNamespace(config=compose_config(overrides))
    PPOTrainer._init_resource_pool_mgr(trainer)
    manager = trainer.resource_pool_manager
    manager.create_resource_pool()  # raises ValueError when Ray lacks GPUs (verl's _check_resource_available)
    return manager


def place_verl_pool(manager) -> list[int]:
    """verl's placement groups (one per node entry, STRICT_PACK, 1 GPU + CPUs per bundle) made ready by Ray;
    returns the GPUs each holds, then removes them."""
    from ray.util.placement_group import remove_placement_group

    groups = manager.resource_pool_dict["global_pool"].get_placement_groups(device_name="cuda")
    try:
        return sorted(sum(b.get("GPU", 0) for b in g.bundle_specs) for g in groups)
    finally:
        for group in groups:
            remove_placement_group(group)


def free_gpus() -> float:
    return sum(info.get("GPU", 0.0) for info in ray._private.state.available_resources_per_node().values())


def _wait_free(total: float) -> None:
    deadline = time.monotonic() + 60
    while free_gpus() != total and time.monotonic() < deadline:
        time.sleep(0.5)
    assert free_gpus() == total


def test_gpu_layouts_launch_checks_agree_with_verl(world: dict, cluster: dict):
    from stages.grpo.verl_engine import check_resources
    from stages.rewards.sam2_service import stop_service

    base = world["base"]
    # 1 node × 8, SAM2 colocated (the default): launch.sh's lines up to main_ppo, then verl's own pool
    one8 = make_job(world, "one8")
    before, _ = launch_lines(one8)
    result = bash(before, base, "one8_before.sh", cluster["address"])
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "the GPU layout fits" in result.stdout and f"SAM2 service {one8['sam2_service']} is up" in result.stdout
    assert one8["record"]["sam2_gpus"] == 0 and free_gpus() == 8  # SAM2 is on a GPU, but not in Ray's books
    assert place_verl_pool(verl_pool(one8)) == [8]

    # 1 node × 8, SAM2 reserved on its own GPU: launch.sh stops before anything starts, in one line …
    reserved = make_job(world, "one8r", placement="reserved")
    before, sam2_line = launch_lines(reserved)
    result = bash(before, base, "one8r_before.sh", cluster["address"])
    assert result.returncode == 1 and "SAM2 service" not in result.stdout and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1].startswith("launch.sh: verl needs 1 × 8 GPUs and the SAM2 service "
                                                     "reserves 1 (grpo.verl.sam2_placement: reserved); Ray has 8 "
                                                     "free on 1 node(s) [8.0]")
    # … and verl refuses the same layout once the service holds its GPU (the failure this issue reported)
    assert bash(sam2_line, base, "one8r_sam2.sh", cluster["address"]).returncode == 0
    _wait_free(7)
    with pytest.raises(ValueError, match="Total available GPUs 7.0 is less than total desired GPUs 8"):
        verl_pool(reserved)
    assert check_resources(reserved["dir"]) is not None  # with the service running: still 7 < 8

    # 1 node × 2 (the moonshot shape), colocated: fits, verl's placement group is ready
    one2 = make_job(world, "one2", n=2)
    assert check_resources(one2["dir"]) is None
    assert place_verl_pool(verl_pool(one2)) == [2]

    # 2 nodes × 8: a second node joins
    cluster["add_node"]()
    # the reserved SAM2 (still running, on one node) leaves 8 on the other: 1 × 8 fits now, "a separate node"
    assert check_resources(reserved["dir"]) is None
    assert place_verl_pool(verl_pool(reserved)) == [8]
    two8r = make_job(world, "two8r", nnodes=2, placement="reserved")
    problem = check_resources(two8r["dir"])  # its service = reserved's (same files, same resources) runs
    assert two8r["sam2_service"] == reserved["sam2_service"]
    assert problem is not None and "2 × 8" in problem and "[8.0, 7.0]" in problem
    with pytest.raises(ValueError, match="Total available GPUs 15.0 is less than total desired GPUs 16"):
        verl_pool(two8r)
    assert stop_service(reserved["sam2_service"])
    _wait_free(16)
    two8 = make_job(world, "two8", nnodes=2)
    assert check_resources(two8["dir"]) is None
    assert place_verl_pool(verl_pool(two8)) == [8, 8]
    assert check_resources(two8r["dir"]) is not None  # reserved + 2 × 8 on 16 GPUs never fits


def test_sam2_config_forms_two_jobs_one_ray_head(world: dict, cluster: dict):
    from hydra.errors import MissingConfigException
    from sam2.build_sam import build_sam2_video_predictor

    from stages.grpo.verl_engine import main as verl_main
    from stages.rewards.sam2_service import NAMESPACE
    from stages.sam2_wrapper import config_identity, load_video_predictor

    base = world["base"]
    full = str(world["full_config"])
    # the file form: sam2's builder alone cannot find a config by absolute path; with its folder as the search
    # path it builds the same model as the tiny SAM2's vrsflow config
    with pytest.raises(MissingConfigException):
        build_sam2_video_predictor(full, ckpt_path=str(world["micro"]), device="cpu")
    from_file = load_video_predictor(str(world["micro"]), full, device="cpu")
    from_vrsflow = load_video_predictor(str(world["micro"]), str(world["micro_config"]), device="cpu")
    assert from_file.image_size == from_vrsflow.image_size == 256
    assert sorted(from_file.state_dict()) == sorted(from_vrsflow.state_dict())
    assert config_identity(full)["form"] == "file" and config_identity(PACKAGE_CONFIG)["form"] == "package"

    # two jobs on one Ray head: the package config name (as is) and the project file (absolute), other parquet
    package = make_job(world, "pkg", checkpoint=str(world["hiera_t"]), config=PACKAGE_CONFIG)
    project = make_job(world, "file", config=full, parquet=1)
    _, package_line = launch_lines(package)
    _, project_line = launch_lines(project)
    assert f"--config {PACKAGE_CONFIG} " in package_line and f"--config {full} " in project_line
    assert package["sam2_service"] != project["sam2_service"]
    for job, line in ((package, package_line), (project, project_line)):
        result = bash(line, base, f"{job['dir'].parent.name}_sam2.sh", cluster["address"])
        assert result.returncode == 0, result.stderr[-3000:]
    for job in (package, project):
        actor = ray.get_actor(job["sam2_service"], namespace=NAMESPACE)
        assert ray.get(actor.fingerprint.remote()) == job["record"]["sam2_fingerprint"]

    # a stale service is never reused: the first job's files under the second job's name, and files that do
    # not exist, are refused in one line (the SAM2 line's own command, run in this process: the same Ray
    # cluster and namespace; sys.exit(message) is exit status 1 with that line on stderr, and any other
    # exception — a traceback — fails the test)
    clash = package_line.replace(package["sam2_service"], project["sam2_service"])
    message = service_refusal(clash)
    assert message.startswith(f"error: SAM2 service {project['sam2_service']} already runs for other files")
    missing = project_line.replace(str(world["micro"]), str(base / "nowhere.pt"))
    assert service_refusal(missing) == f"error: SAM2 service: {base / 'nowhere.pt'} not found"

    # finish stops the job's own service and no other
    actor = package["dir"] / "checkpoints/global_step_2/actor"
    actor.mkdir(parents=True)
    (actor / "fsdp_config.json").write_text("{}")
    (package["dir"] / "checkpoints/latest_checkpointed_iteration.txt").write_text("2")
    verl_main(["finish", "--job-dir", str(package["dir"])])
    assert _gone(package["sam2_service"]) and not _gone(project["sam2_service"], wait_s=0)
    verl_main(["stop-service", "--job-dir", str(project["dir"])])
    assert _gone(project["sam2_service"])


def service_refusal(script: str) -> str:
    """The one line `python -m stages.rewards.sam2_service …` (the script's last line) exits with."""
    from stages.rewards import sam2_service

    argv = shlex.split(script.strip().splitlines()[-1])
    assert argv[:3] == ["python", "-m", "stages.rewards.sam2_service"], argv
    with pytest.raises(SystemExit) as exit_:
        sam2_service.main(argv[3:])
    message = exit_.value.code
    assert isinstance(message, str) and "\n" not in message, message  # exit status 1, one line
    return message


def _gone(name: str, wait_s: float = 30) -> bool:
    """Whether the named actor is no longer found (a killed actor's name is released within moments)."""
    from stages.rewards.sam2_service import NAMESPACE

    deadline = time.monotonic() + wait_s
    while True:
        try:
            ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


def test_dvc_yaml_lists_no_sam2_config_as_a_file():
    stages = yaml.safe_load((PROJECT / "dvc.yaml").read_text())["stages"]
    deps = [d for stage in stages.values() for d in (stage.get("do", stage).get("deps") or [])]
    assert "${sam2.checkpoint}" in deps and not any("sam2.config" in str(d) for d in deps)


def test_verl_actor_attention_and_trainable_modules(world: dict):
    """verl's HFModelConfig and FSDP engine build the model folder launch.sh names, as verl's worker does."""
    from stages.grpo.verl_engine import compose_config, verl_overrides

    job = make_job(world, "actor")
    overrides = [o for o in (job["dir"] / "overrides.txt").read_text().split("\n") if o]
    model_path = compose_config(overrides).actor_rollout_ref.model.path
    assert f"actor_rollout_ref.model.path={model_path}" in Path(job["launch"]).read_text()
    assert Path(model_path) == world["qwen"]

    def variant(**changes) -> list[str]:
        grpo = replace(job["grpo"], **changes)
        return verl_overrides(grpo, RewardParams(), model_path, "t.parquet", "t.parquet", str(job["dir"]),
                              str(job["params_path"]), sam2_name=job["sam2_service"])

    cases = {"lora": overrides, "lora_vision": variant(train_vision=True), "full": variant(lora_r=0),
             "full_vision": variant(lora_r=0, train_vision=True),
             # verl's own default attention (no override): refused without the flash-attn package
             "verl_default_attention": [o for o in overrides if "attn_implementation" not in o]}
    cases_path, out_path = world["base"] / "actor_cases.json", world["base"] / "actor_built.json"
    cases_path.write_text(json.dumps(cases))
    result = subprocess.run([sys.executable, "-m", "tests.stages.verl_actor_probe", str(cases_path), str(out_path)],
                            cwd=PROJECT, env=_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    built = json.loads(out_path.read_text())

    assert "FlashAttention2" in built["verl_default_attention"]["error"]
    for name in ("lora", "lora_vision", "full", "full_vision"):
        assert "error" not in built[name], built[name]
        assert built[name]["attn"] == built[name]["model_attn"] == "sdpa"

    def vision(names: list[str]) -> list[str]:
        return [n for n in names if ".visual." in f".{n}"]

    lora = built["lora"]
    targets = set(job["grpo"].target_modules)
    assert lora["lora"] and not vision(lora["lora"])  # before: 6 of 20 wrapped modules were vision MLPs
    assert {n.rsplit(".", 1)[-1] for n in lora["lora"]} == targets
    assert lora["trainable"] and all("lora_" in n for n in lora["trainable"]) and not vision(lora["trainable"])
    wrapped_vision = vision(built["lora_vision"]["lora"])
    assert wrapped_vision and {n.rsplit(".", 1)[-1] for n in wrapped_vision} <= targets
    # verl's own engine, except for full fine-tuning with the vision tower frozen: the engine vrsflow registered
    assert {name: built[name]["engine"] for name in ("lora", "lora_vision", "full", "full_vision")} == {
        "lora": "FSDPEngineWithLMHead", "lora_vision": "FSDPEngineWithLMHead", "full": "FrozenVisionFSDPEngine",
        "full_vision": "FSDPEngineWithLMHead"}
    full = built["full"]
    assert full["use_orig_params"] and not vision(full["trainable"]) and vision(full["parameters"])
    assert set(full["trainable"]) == set(full["parameters"]) - set(vision(full["parameters"]))
    assert set(built["full_vision"]["trainable"]) == set(built["full_vision"]["parameters"])


def test_prepare_only_writes_the_job_without_gpus(world: dict, capfd: pytest.CaptureFixture,
                                                 monkeypatch: pytest.MonkeyPatch):
    """The command's own `main` in this process (verl is imported here already; `python -m
    stages.grpo.verl_engine` itself runs in launch.sh's check-resources line in
    test_gpu_layouts_launch_checks_agree_with_verl): exit 0 (no SystemExit) and its one line, without GPUs."""
    from stages.grpo.verl_engine import PREPARED, main

    job = make_job(world, "prep", write_params=True)
    monkeypatch.chdir(world["base"])
    capfd.readouterr()
    main(["prepare", "--params", str(job["params_path"])])  # sys.exit(…) on any error: the test fails with it
    stdout = capfd.readouterr().out
    job_dir = Path(job["grpo"].verl.out_dir)
    assert stdout == f"{PREPARED}: run bash {job_dir / 'launch.sh'} on the head GPU node, then " \
                     f"`dvc repro grpo` here\n"
    assert all((job_dir / f).is_file() for f in ("launch.sh", "config.yaml", "overrides.txt", "job.json",
                                                 "data/train.parquet"))
