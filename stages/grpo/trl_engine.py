"""GRPO with TRL's GRPOTrainer (the one-machine engine; the embedded default runs it on CPU).

Reads top to bottom: data, reward, model, config, train (resuming from the last checkpoint), save
(adapter + merged), metrics. Same reward as verl (`stages.rewards`), scored per prompt group so SAM2
encodes the frames once for all rollouts of a prompt.

Hyper-parameter names, verl → TRL: data.train_batch_size (prompts) → per_device_train_batch_size ×
gradient_accumulation_steps / num_generations (completions); rollout.n → num_generations;
kl_loss_coef + kl_loss_type=low_var_kl → beta (TRL's k3 estimator, without verl's ±10 clip);
loss_agg_mode=token-mean → loss_type="bnpo"; data.max_response_length → max_completion_length;
actor.grad_clip → max_grad_norm; actor.clip_ratio → epsilon; actor.ppo_epochs → num_iterations (TRL's
max_steps = grpo.max_steps × ppo_epochs optimizer steps; the curve has one row per rollout round).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from stages.core.live import checkpoint_step, live_callbacks
from stages.core.progress import quiet_library_deprecations, trainer_progress
from stages.grpo.curves import curves_markdown, trl_row
from stages.models.trainable import freeze_vision, last_complete_checkpoint, lora_targets, trainable_vision_parameters
from stages.params.grpo import GrpoParams
from stages.params.reward import RewardParams
from stages.params.sam2 import Sam2Params
from stages.rewards import score_group

log = logging.getLogger(__name__)
COMPONENT_PREFIX = "reward_components/"
SOURCE_PREFIX = "reward_source/"  # mean score of the step's rollouts of one training source


class GroupReward:
    """TRL batch reward: completions arrive prompt-major; each prompt's rollouts are scored together."""

    def __init__(self, params: RewardParams, predictor=None) -> None:
        self.params = params
        self.predictor = predictor
        self.__name__ = "vrsflow"  # TRL names the reward column after it
        self.seconds = 0.0  # time spent scoring (reported)

    def __call__(self, prompts, completions, ground_truth, sample_id, images=None, completion_ids=None,
                 log_metric=None, source=None, **kwargs: Any) -> list[float]:
        start = time.perf_counter()
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        order: dict[str, list[int]] = {}
        for i, sid in enumerate(sample_id):
            order.setdefault(sid, []).append(i)
        results: list[dict[str, float]] = [{}] * len(texts)
        for idx in order.values():
            frames = None
            if images is not None and self.predictor is not None:
                frames = [np.asarray(img.convert("RGB")) for img in images[idx[0]]]
            # the length penalty counts the <think> text itself (reward.length_tokenizer), as under verl
            scored = score_group([texts[i] for i in idx], ground_truth[idx[0]], self.params, frames, self.predictor)
            for i, result in zip(idx, scored, strict=True):
                results[i] = result
        if log_metric is not None:
            for key in results[0]:
                if key != "score":
                    log_metric(f"{COMPONENT_PREFIX}{key}", float(np.mean([r[key] for r in results])))
            for name in sorted(set(source or [])):  # only the sources this step drew: the others stay empty
                log_metric(f"{SOURCE_PREFIX}{name}",
                           float(np.mean([r["score"] for r, s in zip(results, source, strict=True) if s == name])))
        self.seconds += time.perf_counter() - start
        return [r["score"] for r in results]


def run_fingerprint(grpo: GrpoParams, reward: RewardParams, n_samples: int, processes: int = 1) -> str:
    """What a checkpoint must match to be resumed: the params and the starting model (its config and file
    sizes — cheap even for a multi-GB checkpoint), the pool size and the process count (it decides which
    rollouts each process generates)."""
    import hashlib
    import json

    from stages.core.typed_config import to_dict

    model = Path(grpo.model_path)
    files = sorted((p.relative_to(model).as_posix(), p.stat().st_size) for p in model.rglob("*") if p.is_file())
    config = (model / "config.json").read_text() if (model / "config.json").is_file() else ""
    payload = [to_dict(grpo), to_dict(reward), files, config, n_samples] + ([processes] if processes > 1 else [])
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def _prepare_checkpoints(folder: Path, fingerprint: str) -> None:
    """Keep checkpoints only when they come from the same run; otherwise start afresh."""
    stamp = folder / "fingerprint.txt"
    if folder.exists() and (not stamp.is_file() or stamp.read_text().strip() != fingerprint):
        log.info("GRPO checkpoints in %s are from other params or another model: starting afresh", folder)
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stamp.write_text(fingerprint + "\n")


def train_trl(grpo: GrpoParams, reward: RewardParams, sam2: Sam2Params, dataset, out_dir: Path,
              checkpoint_dir: Path, reward_fn: Callable[..., list[float]] | None = None,
              live_dir: Path | None = None) -> dict[str, Any]:
    """Run GRPO; write `out_dir/adapter` (LoRA) and `out_dir/merged`; returns the trainer's log history + timing.

    `live_dir`: where the curves go while it trains (DVCLive's files and TensorBoard's, `stages.core.live`).

    Resumes from the newest `checkpoint_dir/checkpoint-*` when one exists. `reward_fn` replaces the
    verifiable reward (a TRL reward function with a `__name__`); the tests use it to check that the
    trainer moves the policy towards a reward at all. Only the language model trains (LoRA on it, or all
    of it with `lora_r: 0`) unless `grpo.train_vision`.

    Under `accelerate launch` / torchrun (`python -m stages.grpo.trl_engine`), each of the N processes
    generates batch_size × num_generations / N completions of a round; only the main process writes
    `out_dir` (the result's `is_main`).

    Raises:
        ValueError: a round's completions do not split evenly over the processes.
    """
    import torch
    from peft import LoraConfig
    from transformers import set_seed
    from trl import GRPOConfig

    from stages.grpo.resume import resumable_trainer
    from stages.models import load_vlm

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    set_seed(grpo.seed)
    cuda = torch.cuda.is_available()
    if not cuda and grpo.cpu_threads > 0:  # the same seed gives the same checkpoint only for the same count
        torch.set_num_threads(grpo.cpu_threads)
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    completions = grpo.batch_size * grpo.num_generations
    if completions % processes:
        raise ValueError(f"grpo.batch_size × grpo.num_generations = {completions} completions per round do not "
                         f"split over {processes} processes")
    device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if cuda else "cpu"  # each rank on its own GPU
    model, processor = load_vlm(grpo.model_path, "bfloat16" if cuda else "float32", device)
    processor.tokenizer.padding_side = "left"  # not saved with the tokenizer; generation needs it
    if grpo.lora_r == 0 and not grpo.train_vision:
        freeze_vision(model)  # full fine-tuning of the language model only (Veason-R1's released GRPO)
    if reward_fn is None:
        predictor = None
        if "consistency" in reward.components:
            from stages.sam2_wrapper import load_video_predictor

            predictor = load_video_predictor(sam2.checkpoint, sam2.config)
        reward_fn = GroupReward(reward, predictor)
    # TRL counts optimizer steps; params count rollout rounds (as verl does), each reused for ppo_epochs steps
    max_steps = grpo.max_steps * grpo.ppo_epochs if grpo.max_steps > 0 else -1
    args = GRPOConfig(
        output_dir=str(checkpoint_dir), use_cpu=not cuda, bf16=cuda, fp16=False,
        per_device_train_batch_size=completions // processes, gradient_accumulation_steps=1,
        num_generations=grpo.num_generations, max_completion_length=grpo.max_response_length,
        temperature=grpo.temperature, top_p=grpo.top_p, beta=grpo.kl_coef, loss_type="bnpo", scale_rewards="group",
        num_iterations=grpo.ppo_epochs, epsilon=grpo.clip_ratio, learning_rate=grpo.learning_rate,
        max_grad_norm=grpo.grad_clip,
        weight_decay=grpo.weight_decay, lr_scheduler_type="constant", warmup_steps=0,
        num_train_epochs=grpo.epochs, max_steps=max_steps, logging_steps=1,
        report_to=["tensorboard"],  # its writer goes to the live folder (stages.core.live)
        save_strategy="steps", save_steps=grpo.save_every_steps * grpo.ppo_epochs, save_total_limit=1,
        save_only_model=False,
        remove_unused_columns=False, dataloader_num_workers=0, seed=grpo.seed, data_seed=grpo.seed,
        log_completions=False, shuffle_dataset=True, gradient_checkpointing=grpo.gradient_checkpointing,
    )
    peft_config = None
    if grpo.lora_r > 0:
        peft_config = LoraConfig(r=grpo.lora_r, lora_alpha=grpo.lora_alpha, lora_dropout=0.0, task_type="CAUSAL_LM",
                                 target_modules=lora_targets(grpo.target_modules, grpo.train_vision))
    trainer = resumable_trainer(model=model, reward_funcs=[reward_fn], args=args, train_dataset=dataset,  # exact resume
                                processing_class=processor, peft_config=peft_config)
    trainer_progress(trainer, "grpo steps")  # a bar + a short line every 10 steps, not a 1.5 KB dict per step
    if not grpo.train_vision and trainable_vision_parameters(trainer.model):
        raise ValueError(f"grpo: vision parameters would train: {trainable_vision_parameters(trainer.model)[:3]}")
    state = args.distributed_state
    if state.is_main_process:
        _prepare_checkpoints(Path(checkpoint_dir), run_fingerprint(grpo, reward, len(dataset), processes))
    state.wait_for_everyone()
    resume = last_complete_checkpoint(Path(checkpoint_dir))
    if resume:
        log.info("resuming GRPO from %s", resume)
    if live_dir is not None:
        live_callbacks(trainer, Path(live_dir), trl_row, curves_markdown, resume_step=checkpoint_step(resume))
    start = time.perf_counter()
    with quiet_library_deprecations():  # TRL calls deprecated transformers APIs on every step
        trainer.train(resume_from_checkpoint=resume)
    wall = time.perf_counter() - start
    out_dir = Path(out_dir)
    # every process takes part in saving (FSDP / ZeRO gather the weights); the main process writes the files
    trainer.save_model(str(out_dir / ("adapter" if peft_config is not None else "merged")))
    if state.is_main_process:
        if peft_config is not None:
            _merge(grpo.model_path, out_dir)
        processor.save_pretrained(out_dir / "merged")
        shutil.rmtree(checkpoint_dir, ignore_errors=True)  # finished: nothing left to resume
    state.wait_for_everyone()
    return {"log_history": list(trainer.state.log_history), "wall_s": wall,
            "reward_s": getattr(reward_fn, "seconds", 0.0), "resumed_from": resume or "",
            "global_step": int(trainer.state.global_step), "processes": processes,
            "is_main": bool(state.is_main_process)}


def _merge(base_path: str, out_dir: Path) -> None:
    """Base + saved adapter → `out_dir/merged` (the same for DDP, FSDP and ZeRO: the adapter on disk is whole);
    the adapter published for PEFT's `AutoPeftModel` from any directory (`stages.models.adapter`)."""
    from peft import PeftModel

    from stages.models import load_vlm
    from stages.models.adapter import publish_adapter

    base, _ = load_vlm(base_path)
    publish_adapter(out_dir / "adapter", base_path, type(base))
    PeftModel.from_pretrained(base, out_dir / "adapter").merge_and_unload().save_pretrained(out_dir / "merged")


def main(argv: list[str] | None = None) -> None:
    """One process of a multi-process TRL GRPO run: `accelerate launch … -m stages.grpo.trl_engine --job JOB`.

    JOB (JSON): the `grpo`, `reward` and `sam2` blocks, `live_dir` (the live curves) and `result`, where the
    main process writes the log history and step count.
    """
    import argparse
    import json

    from stages.core.io import write_json
    from stages.core.typed_config import build
    from stages.grpo.data import build_dataset, read_grpo_shards

    parser = argparse.ArgumentParser(description="one process of a TRL GRPO run (under accelerate / torchrun)")
    parser.add_argument("--job", type=Path, required=True, help="JSON with grpo, reward, sam2 and result")
    job = json.loads(parser.parse_args(argv).job.read_text())
    grpo = build(GrpoParams, job["grpo"], "grpo")
    result = train_trl(grpo, build(RewardParams, job["reward"], "reward"), build(Sam2Params, job["sam2"], "sam2"),
                       build_dataset(read_grpo_shards(Path(grpo.shards_dir))), Path(grpo.out_dir),
                       Path(grpo.checkpoint_dir), live_dir=Path(job["live_dir"]) if job.get("live_dir") else None)
    if result["is_main"]:
        write_json(Path(job["result"]), result)


if __name__ == "__main__":
    main()
