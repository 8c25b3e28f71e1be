"""The verl engine, proven with verl's own pieces on CPU (everything except verl's trainer and vLLM).

One module-scoped run: a local Ray head (CPU only), the generated `launch.sh` run step by step with only
`verl.trainer.main_ppo` left out, and in its place what the trainer does with our code — verl's
`RLHFDataset` loads the shard stage's parquet with the tiny model's processor, verl's `RewardLoopManager`
(reward workers + naive reward manager + `custom_reward_function` = stages/rewards/verl_entry.py) scores
hand-written rollouts (the consistency term through the SAM2 service actor), verl dumps the rollouts and its
file log, and verl's `FSDPCheckpointManager` (gloo, world size 1) writes the final actor checkpoint. Then the
grpo stage brings the checkpoint back through verl's merger into `models/grpo`.

The oracle for the scores is the TRL engine's path: `score_group` on the GRPO shards' frames with SAM2 in
process. The oracle for the merged weights is W + s·B·A computed from the tensors that were checkpointed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import fields, is_dataclass, replace
from pathlib import Path

import numpy as np
import pytest
import yaml

pytest.importorskip("verl")
ray = pytest.importorskip("ray")

from stages.params.grpo import GrpoParams, GrpoVerlParams  # noqa: E402
from stages.params.reward import RewardParams  # noqa: E402
from stages.params.sam2 import Sam2Params  # noqa: E402
from stages.params.tiny_models import TinyModelsParams  # noqa: E402
from tests.stages.test_shard import build_upstream, shard  # noqa: E402

PROJECT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SERVICE = "vrsflow-sam2-test"
N = 4  # rollouts per prompt
STEP = 3  # the "final" training step of the simulated run
TRAINER = "python -m verl.trainer.main_ppo"


def _plain(value):
    """Params dataclasses → the plain YAML structure params.yaml has."""
    if is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return [_plain(v) for v in value] if isinstance(value, tuple | list) else value


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env(**extra: str) -> dict[str, str]:
    # launch.sh activates VRSFLOW_CLUSTER_VENV: here the environment the tests run in
    return {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "RAY_USAGE_STATS_ENABLED": "0",
            "VRSFLOW_CLUSTER_VENV": str(BIN.parent), **extra}


# a test's Ray node stops at once on SIGTERM: Ray drains a node for up to 30 s first (for Serve proxies), which a
# test's teardown sat out before killing it (RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S <= 0: "immediate teardown")
RAY_NODE_ENV = {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}


def wait_ray_up(address: str, process: subprocess.Popen, log_path: Path, timeout_s: float = 300) -> bool:
    """Until `ray status` answers for the node `process` started at `address` (True) or the process ended (False).
    `ray status` (a Python start of seconds) is asked only once the node's GCS port accepts connections."""
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout_s
    while process.poll() is None:
        assert time.monotonic() < deadline, log_path.read_text()[-3000:]
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
        except OSError:
            time.sleep(0.2)
            continue
        if subprocess.run([str(BIN / "ray"), "status", f"--address={address}"], env=_env(), capture_output=True,
                          timeout=120).returncode == 0:
            return True
        time.sleep(0.5)
    return False


def split_launch(text: str) -> tuple[str, str]:
    """launch.sh without verl's trainer: (header + the steps before it, header + the steps after it)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(TRAINER))
    end = start
    while lines[end].endswith("\\"):
        end += 1
    header = lines[:next(i for i, line in enumerate(lines) if line.startswith("ray status"))]
    return "\n".join(lines[:start]) + "\n", "\n".join(header + lines[end + 1:]) + "\n"


def run_bash(script: str, folder: Path, name: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    path = folder / name
    path.write_text(script)
    result = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def answer_text(gt: dict, shift: int = 0) -> str:
    """The ground truth's own answer (keyframe + integer boxes at it), boxes shifted right by `shift` px."""
    position = gt["timestamps"].index(gt["keyframe_timestamp"])
    boxes = [[round(b[0]) + shift, round(b[1]), round(b[2]) + shift, round(b[3])]
             for b in gt["boxes"][position] if b is not None]
    payload = {"keyframe_timestamp": gt["keyframe_timestamp"], "bbox_2d_list": boxes}
    think = f"The target is clearest at {gt['keyframe_timestamp']}s."
    return f"<think>{think}</think><answer>{json.dumps(payload)}</answer>"


def rollouts(gt: dict) -> list[str]:
    """Hand-written rollouts: the ground truth, a shifted box, garbage, right tags around broken JSON."""
    broken = '{"keyframe_timestamp": 1, "bbox_2d_list": [[3, 4, 20, 30]'
    return [answer_text(gt), answer_text(gt, shift=6), "no idea, sorry",
            f"<think>The box is at the left.</think><answer>{broken}</answer>"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Shards + verl parquet from the real shard stage, tiny Qwen2.5-VL + micro SAM2, params, the job."""
    from stages.grpo.verl_engine import prepare_job
    from stages.tiny_models import build_tiny_models

    base = tmp_path_factory.mktemp("verl")
    build_upstream(base)
    shard(base, base / "shards")
    build_tiny_models(TinyModelsParams(vocab_size=512, hidden_size=64, num_layers=1, num_heads=2,
                                       max_image_side=56, sam2_image_size=256), base / "tiny")
    sam2 = Sam2Params(checkpoint=str(base / "tiny/sam2/model.pt"), config=str(base / "tiny/sam2/config.yaml"))
    grpo = GrpoParams(engine="verl", model_path=str(base / "tiny/qwen25vl"), shards_dir=str(base / "shards/grpo"),
                      verl_parquet=str(base / "shards/exports/verl/grpo.parquet"),
                      out_dir=str(base / "models/grpo"), checkpoint_dir=str(base / "models/ckpt"),
                      batch_size=2, num_generations=N, max_steps=STEP,
                      lora_r=4, lora_alpha=8, target_modules=("q_proj",), save_every_steps=2,
                      verl=GrpoVerlParams(n_gpus_per_node=1, sam2_service=SERVICE, sam2_gpus=0.0,
                                          out_dir=str(base / "job")))
    reward = RewardParams()
    params_path = base / "params.yaml"  # read by verl's reward workers and by `vrsflow stage grpo`
    params_path.write_text(yaml.safe_dump(_plain({"grpo": grpo, "reward": reward, "sam2": sam2}), sort_keys=False))
    job = prepare_job(grpo, reward, sam2, params_path)
    return {"base": base, "grpo": grpo, "reward": reward, "sam2": sam2, "params_path": params_path, "job": job}


@pytest.fixture(scope="module")
def ray_head(world: dict):
    """A local Ray head (CPU only, one GPU declared for launch.sh's check of the 1-GPU layout) in its own process
    group and temp dir; RAY_ADDRESS points at it."""
    temp = Path(tempfile.mkdtemp(prefix="vrsray"))  # short: Ray's socket paths have a length limit
    port = _free_port()
    log = open(world["base"] / "ray_head.log", "w")  # noqa: SIM115 - closed at teardown
    # the node advertises 127.0.0.1, the address the test connects to: by default it advertises the machine's
    # own IP, and a CI sandbox that does not route it fails ray.init ("Failed to connect to Ray cluster at <IP>")
    head = subprocess.Popen(
        [str(BIN / "ray"), "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
         "--num-cpus=2", "--num-gpus=1", "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}",
         f"--ray-client-server-port={_free_port()}", f"--dashboard-agent-listen-port={_free_port()}",
         f"--metrics-export-port={_free_port()}"],
        env=_env(**RAY_NODE_ENV), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        assert wait_ray_up(address, head, world["base"] / "ray_head.log", timeout_s=120), \
            (world["base"] / "ray_head.log").read_text()
        previous = os.environ.get("RAY_ADDRESS")
        os.environ["RAY_ADDRESS"] = address
        ray.init(address=address, logging_level="ERROR")
        yield address
    finally:
        ray.shutdown()
        if "previous" in locals():
            os.environ.pop("RAY_ADDRESS", None) if previous is None else os.environ.update(RAY_ADDRESS=previous)
        os.killpg(head.pid, signal.SIGTERM)  # the head and everything it started (own session)
        try:
            head.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def verl_run(world: dict, ray_head: str) -> dict:
    """launch.sh step by step with verl's pieces in the trainer's place (see the module docstring)."""
    import torch
    from verl import DataProto
    from verl.experimental.reward_loop import RewardLoopManager
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.utils import hf_processor, hf_tokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
    from verl.utils.tracking import FileLogger

    from stages.grpo.verl_engine import compose_config
    from stages.rewards.sam2_service import NAMESPACE

    job_dir = Path(world["grpo"].verl.out_dir)
    before, after = split_launch(Path(world["job"]["launch"]).read_text())
    env = _env(RAY_ADDRESS=ray_head)
    started = run_bash(before, world["base"], "launch_before_trainer.sh", env)  # Ray check + SAM2 service

    # the trainer's config, composed from the same overrides launch.sh hands to main_ppo
    overrides = (job_dir / "overrides.txt").read_text().split("\n")
    config = compose_config([o for o in overrides if o] + ["reward.num_workers=1"])
    tokenizer = hf_tokenizer(config.actor_rollout_ref.model.path)
    processor = hf_processor(config.actor_rollout_ref.model.path)
    dataset = RLHFDataset(config.data.train_files, tokenizer, config.data, processor)
    items = [dataset[i] for i in range(len(dataset))]
    texts = [t for item in items for t in rollouts(json.loads(item["reward_model"]["ground_truth"]))]

    batch = DataProto.from_single_dict(collate_fn(items)).repeat(repeat_times=N, interleave=True)
    prompt_ids = [tokenizer.apply_chat_template([{"role": "user", "content": "frames"}], add_generation_prompt=True,
                                                tokenize=True, return_dict=True)["input_ids"]] * len(texts)
    response_ids = [tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
    width = max(len(r) for r in response_ids)
    pad = tokenizer.pad_token_id
    prompts = torch.tensor(prompt_ids)
    responses = torch.tensor([r + [pad] * (width - len(r)) for r in response_ids])
    response_mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in response_ids])
    attention_mask = torch.cat([torch.ones_like(prompts), response_mask], dim=1)
    batch = batch.union(DataProto.from_dict(tensors={
        "prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask}))
    scored = RewardLoopManager(config).compute_rm_score(batch)
    service = ray.get_actor(world["job"]["sam2_service"], namespace=NAMESPACE)
    stats = ray.get(service.stats.remote())

    # what the trainer writes besides the checkpoint: its rollout dump and its file log
    outputs = [tokenizer.decode(r, skip_special_tokens=True) for r in responses]
    gts = [rm["ground_truth"] for rm in batch.non_tensor_batch["reward_model"]]
    totals = scored.batch["rm_scores"].sum(dim=1).tolist()
    PPOTrainer._write_generations(["prompt"] * len(texts), outputs, gts, totals, {}, config.trainer.rollout_data_dir,
                                  STEP)
    os.environ["VERL_FILE_LOGGER_PATH"] = str(job_dir / "verl_log.jsonl")
    try:
        logger = FileLogger("vrsflow", "grpo")
    finally:
        os.environ.pop("VERL_FILE_LOGGER_PATH")
    logger.log({"critic/score/mean": float(np.mean(totals)), "actor/kl_loss": 0.001,
                "response_length/mean": float(response_mask.sum(dim=1).float().mean())}, step=STEP)
    logger.finish()
    oracle_path = world["base"] / "oracle.pt"
    full_job = world["base"] / "job_full"
    subprocess.run([sys.executable, "-m", "tests.stages.grpo_factory", config.actor_rollout_ref.model.path,
                    str(oracle_path), f"{job_dir}:{STEP}:{world['grpo'].lora_r}", f"{full_job}:{STEP}:0"],
                   cwd=PROJECT, env=_env(), check=True, capture_output=True, timeout=300)
    finished = run_bash(after, world["base"], "launch_after_trainer.sh", env)  # curves + finish
    return {"texts": texts, "items": items, "scored": scored, "stats": stats, "started": started,
            "finished": finished, "oracles": torch.load(oracle_path), "full_job": full_job}


def test_launch_script_passes_bash_n_and_shellcheck(world: dict):
    launch = world["job"]["launch"]
    assert subprocess.run(["bash", "-n", launch], capture_output=True).returncode == 0
    lint = subprocess.run([str(BIN / "shellcheck"), launch], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout
    text = Path(launch).read_text()
    before, after = split_launch(text)
    assert "stages.rewards.sam2_service" in before and "--num-gpus 0 " in before
    assert "stages.grpo.verl_engine check-resources" in before
    assert "stages.grpo.curves" in after and "stages.grpo.verl_engine finish" in after
    assert text.count(TRAINER) == 1 and TRAINER not in before + after


def test_verl_dataset_keeps_every_row(world: dict, verl_run: dict):
    import pyarrow.parquet as pq

    rows = pq.read_table(world["grpo"].verl_parquet).num_rows
    assert rows == 2 and len(verl_run["items"]) == rows
    assert all(len(item["raw_prompt"][0]["content"]) > 6 for item in verl_run["items"])  # text + one image per frame


def test_verl_reward_loop_scores_equal_trl_score_group(world: dict, verl_run: dict):
    from stages.grpo.data import build_dataset, read_grpo_shards
    from stages.rewards import score_group
    from stages.sam2_wrapper import load_video_predictor

    reward, sam2 = world["reward"], world["sam2"]
    rows = {r["sample_id"]: r for r in build_dataset(read_grpo_shards(Path(world["grpo"].shards_dir)))}
    predictor = load_video_predictor(sam2.checkpoint, sam2.config)
    expected = []
    for item in verl_run["items"]:
        row = rows[item["extra_info"]["sample_id"]]
        frames = [np.asarray(image.convert("RGB")) for image in row["images"]]
        expected += score_group(rollouts(json.loads(row["ground_truth"])), row["ground_truth"], reward, frames,
                                predictor)
    scored = verl_run["scored"]
    totals = scored.batch["rm_scores"].sum(dim=1).tolist()
    extra = scored.non_tensor_batch
    assert len(totals) == len(expected) == 2 * N
    for j, want in enumerate(expected):
        assert totals[j] == pytest.approx(want["score"], abs=1e-5), j
        for key, value in want.items():
            assert float(extra[key][j]) == pytest.approx(value, abs=1e-9), (j, key)
    for j in range(0, 2 * N, N):  # per prompt: GT, shifted, garbage, broken JSON
        # the keyframe is one of the top-5 frames by area (not always the largest), the boxes are rounded
        assert expected[j]["parsed"] == 1 and expected[j]["keyframe"] > 0.5 and expected[j]["spatial"] > 0.8
        assert expected[j + 1]["spatial"] < expected[j]["spatial"]
        assert expected[j + 2]["parsed"] == 0 and expected[j + 2]["score"] == reward.failure_score
        assert expected[j + 3]["parsed"] == 0 and expected[j + 3]["format"] > 0
    # consistency came through the SAM2 service: one batch per prompt with both parsed rollouts
    assert verl_run["stats"]["batches"] >= 2 and verl_run["stats"]["mean_batch"] >= 2
    assert any(expected[j]["consistency"] > 0 for j in range(len(expected)))


def test_curves_and_finish_from_launch_steps(world: dict, verl_run: dict):
    from stages.grpo.curves import read_curve

    job_dir = Path(world["grpo"].verl.out_dir)
    rows = read_curve(job_dir / "grpo_curve.csv")
    assert [r["step"] for r in rows] == [STEP]
    scored = verl_run["scored"]
    assert rows[0]["reward"] == pytest.approx(float(scored.batch["rm_scores"].sum(dim=1).mean()), abs=1e-5)
    # the CSV keeps 6 significant digits
    assert rows[0]["reward_consistency"] == pytest.approx(float(np.mean(scored.non_tensor_batch["consistency"])),
                                                          abs=1e-5)
    record = json.loads((job_dir / "finished.json").read_text())
    assert record["step"] == STEP and record["actor"] == f"checkpoints/global_step_{STEP}/actor"


def _lora_models_back(world: dict, verl_run: dict, out: Path) -> None:
    """What the grpo stage brought back to `out` (grpo.out_dir): verl's LoRA checkpoint merged (W + s·B·A, the
    oracle) as evaluate loads it, the published adapter, lineage and model card."""
    import torch

    from stages.models import load_vlm

    grpo = world["grpo"]
    assert json.loads((out / "adapter" / "adapter_config.json").read_text())["r"] == grpo.lora_r
    lineage = json.loads((out / "lineage.json").read_text())
    assert lineage["stage"] == "grpo" and (out / "README.md").is_file()
    model, processor = load_vlm(out / "merged", device="cpu")  # what evaluate loads
    oracle = verl_run["oracles"][str(grpo.verl.out_dir)]
    want = oracle["W"] + oracle["scaling"] * oracle["B"] @ oracle["A"]
    got = model.model.language_model.layers[0].self_attn.q_proj.weight.detach()
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-3)  # verl's merger writes bf16
    assert (got - oracle["W"]).abs().max() > 0.05  # the adapter is in
    inputs = processor(text=["<think>"], return_tensors="pt")
    assert model.generate(**inputs, max_new_tokens=3, do_sample=False).shape[1] == inputs["input_ids"].shape[1] + 3

    # the published adapter loads with PEFT's own auto class from any directory, onto grpo.model_path
    from peft import AutoPeftModel

    from stages.models.adapter import publish_adapter

    config = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(Path(grpo.model_path).resolve()) and config["task_type"] is None
    assert "visual" in config["target_modules"]  # the rule it trained with (no vision module), not a name list
    elsewhere = Path(tempfile.mkdtemp(prefix="vrsflow-peft-"))
    cwd = os.getcwd()
    os.chdir(elsewhere)
    try:
        peft_model = AutoPeftModel.from_pretrained(str(out / "adapter"))
    finally:
        os.chdir(cwd)
        shutil.rmtree(elsewhere)
    again = peft_model.merge_and_unload().model.language_model.layers[0].self_attn.q_proj.weight.detach()
    torch.testing.assert_close(again.float(), got.float(), rtol=2e-2, atol=2e-3)
    hub = out.parent / "adapter_hub"
    shutil.rmtree(hub, ignore_errors=True)
    shutil.copytree(out / "adapter", hub)
    published = publish_adapter(hub, "Qwen/Qwen2.5-VL-3B-Instruct", type(model))
    assert published["base_model_name_or_path"] == "Qwen/Qwen2.5-VL-3B-Instruct"  # a hub id is kept as is


def test_grpo_stage_function_brings_the_lora_checkpoint_back(world: dict, verl_run: dict, tmp_path: Path):
    """The grpo stage's own function (what `vrsflow stage grpo` runs), in this process, on a machine without
    GPUs after launch.sh finished: the job is the one launch.sh ran (same params), verl's merger runs under the
    job's interpreter, the curve is read from verl's log. Its end-to-end twin through the console script (and a
    Prefect server): test_grpo_stage_brings_the_lora_checkpoint_back (slow)."""
    from stages.grpo import run_grpo

    grpo = world["grpo"]
    live = tmp_path / "live"
    report = run_grpo(grpo, world["reward"], world["sam2"], live, world["params_path"])
    assert report.metrics["engine_verl"] == 1 and report.metrics["steps"] == 1
    assert (live / "plots" / "metrics" / "reward.tsv").is_file()
    _lora_models_back(world, verl_run, Path(grpo.out_dir))


@pytest.mark.slow
def test_grpo_stage_brings_the_lora_checkpoint_back(world: dict, verl_run: dict, prefect_api: str):
    """`vrsflow stage grpo` (what `dvc repro grpo` runs) on a machine without GPUs, after launch.sh finished.
    Default-run twin: tests/stages/test_grpo_verl.py::test_grpo_stage_function_brings_the_lora_checkpoint_back
    (the same run_grpo in the test's process; this one adds the console script, its Prefect flow run and
    metrics/grpo.json)."""
    base, grpo = world["base"], world["grpo"]
    result = subprocess.run([str(BIN / "vrsflow"), "stage", "grpo", "--params", str(world["params_path"])],
                            cwd=base, env=_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    curve = base / "metrics" / "live" / "grpo" / "plots" / "metrics" / "reward.tsv"
    metrics = json.loads((base / "metrics" / "grpo.json").read_text())
    assert metrics["engine_verl"] == 1 and metrics["steps"] == 1 and curve.is_file()
    _lora_models_back(world, verl_run, Path(grpo.out_dir))


def test_full_parameter_checkpoint_merges_without_adapter(world: dict, verl_run: dict, tmp_path: Path):
    import torch

    from stages.grpo.verl_engine import latest_checkpoint, merge_checkpoint, write_models
    from stages.models import load_vlm

    step, actor = latest_checkpoint(verl_run["full_job"])
    written = write_models(merge_checkpoint(actor, tmp_path / "hf"), tmp_path / "grpo")
    assert step == STEP and written == {"adapter": False} and not (tmp_path / "grpo" / "adapter").exists()
    model, _ = load_vlm(tmp_path / "grpo" / "merged", device="cpu")
    want = verl_run["oracles"][str(verl_run["full_job"])]["W"]
    got = model.model.language_model.layers[0].self_attn.q_proj.weight.detach()
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-3)


def test_job_for_other_params_is_not_collected(world: dict, verl_run: dict, tmp_path: Path):
    from stages.grpo import run_grpo

    other_job = tmp_path / "job"
    shutil.copytree(world["grpo"].verl.out_dir, other_job)
    grpo = replace(world["grpo"], learning_rate=5e-4, out_dir=str(tmp_path / "grpo"),
                   verl=replace(world["grpo"].verl, out_dir=str(other_job)))
    with pytest.raises(RuntimeError, match="run .*launch.sh on the cluster"):
        run_grpo(grpo, world["reward"], world["sam2"], tmp_path / "curve.csv", world["params_path"])
    assert not (tmp_path / "grpo" / "merged").exists()
