"""`sft` stage: supervised fine-tuning of Qwen2.5-VL on the accepted reasoning traces, with transformers'
`Trainer` under `accelerate` (one process on CPU; DDP, FSDP or DeepSpeed ZeRO on GPUs and nodes).

Reads top to bottom like a torchtune recipe: params → seed → data (indexed shards, encoded once) → model
(LoRA or full fine-tuning of the language model; the vision tower stays frozen unless `sft.train_vision`)
→ format rate before → train (cosine schedule, gradient accumulation, checkpoints that resume only for
the same params, data and process count; the curves go to DVCLive and TensorBoard in `metrics/live/sft` as it
trains, `stages.core.live`) → adapter + merged weights → format rate after → metrics. Loss is on assistant
tokens only. bf16 on GPU, fp32 on CPU.

Several processes: `sft.processes > 1` makes the stage start `accelerate launch` (config
`sft.accelerate_config`) or torchrun itself; on several nodes run `accelerate launch … -m stages.sft` on
each (docs/sft.md). Only the main process writes outputs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
import tarfile
from pathlib import Path

import numpy as np
import torch

from schemas.answer import parse_answer
from stages.core.errors import EmptyInput
from stages.core.io import atomic_write_text, write_json
from stages.core.lineage import write_lineage
from stages.core.live import checkpoint_step, live_callbacks, live_dir, live_markdown
from stages.core.model_card import write_model_card
from stages.core.output_lock import hold_outputs
from stages.core.progress import ProgressReporter
from stages.core.report import StageReport, curves_markdown, summary_line
from stages.core.typed_config import to_dict
from stages.models import load_vlm
from stages.models.batches import PackCollator, PadCollator
from stages.models.kernels import resolve_liger
from stages.models.trainable import freeze_vision, last_complete_checkpoint, lora_targets, trainable_vision_parameters
from stages.params import default_params
from stages.params.model import ModelParams
from stages.params.sft import SftParams
from stages.sft.data import (
    SftDataset,
    encode_example,
    encode_prompts,
    index_shards,
    meta_json,
    read_shards,
)

log = logging.getLogger(__name__)


def seed_everything(seed: int) -> None:
    """Python, numpy and torch generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@torch.no_grad()
def format_rate(model, processor, samples: list[dict], max_new_tokens: int, batch_size: int = 8,
                batches: list[dict] | None = None) -> tuple[float, list[str]]:
    """Share of greedy outputs that parse as the answer format (exact tags + answer JSON), and the outputs.

    `batches` are `encode_prompts` outputs of `samples` in `batch_size` groups, encoded once by the caller
    when it checks several models on the same prompts.
    """
    model.eval()
    outputs: list[str] = []
    batches = batches if batches is not None else prompt_batches(processor, samples, batch_size)
    for batch in batches:
        inputs = {k: v.to(model.device) for k, v in batch.items()}
        generated = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        outputs += processor.batch_decode(generated[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    ok = [(a := parse_answer(o)) is not None and a.well_formed for o in outputs]
    return (sum(ok) / len(ok) if ok else 0.0), outputs


SOURCE_LOSS_SAMPLES = 32  # per training source: the first samples (key order) whose loss is reported


def source_samples(train: list, limit: int = SOURCE_LOSS_SAMPLES) -> dict[str, list]:
    """Training source → its first `limit` samples (key order); {} when the pool has one source."""
    by_source: dict[str, list] = {}
    for sample in train:
        by_source.setdefault(str(sample.meta.get("source", "root")), []).append(sample)
    return {name: samples[:limit] for name, samples in sorted(by_source.items())} if len(by_source) > 1 else {}


@torch.no_grad()
def source_losses(model, processor, by_source: dict[str, list]) -> dict[str, float]:
    """Per training source: the mean loss (assistant tokens, as in training) of `model` over its samples."""
    model.eval()
    out = {}
    for name, samples in by_source.items():
        losses = []
        for sample in samples:
            inputs = encode_example(processor, {"meta": sample.meta, "frames": sample.load_frames()})
            losses.append(float(model(**{k: v.to(model.device) for k, v in inputs.items()}).loss))
        out[name] = round(float(np.mean(losses)), 6)
    return out


def prompt_batches(processor, samples: list[dict], batch_size: int = 8) -> list[dict]:
    """The generation inputs of `samples`, `batch_size` prompts each."""
    return [encode_prompts(processor, samples[i:i + batch_size]) for i in range(0, len(samples), batch_size)]


def train_sft(params: SftParams, model_params: ModelParams, shards_dir: Path, out_dir: Path,
              checkpoint_dir: Path, metrics_dir: Path) -> StageReport:
    """Fine-tune `model.path` on `shards_dir/sft`; write adapter/ (LoRA), merged/, a model card, the curve.

    Holds the locks of `out_dir` and `checkpoint_dir` for the whole run (`stages.core.output_lock`: a second
    run on them refuses with OutputLocked). Resumes from the newest complete checkpoint of the same run
    (params, data, process count): the Trainer's checkpoint holds weights, optimizer, schedule, step and every
    process's RNG state, and accelerate's seeded sampler re-derives each epoch's order from (seed, epoch).

    Args:
        params: the `sft` block.
        model_params: the `model` block (base checkpoint folder, dtype).
        shards_dir: the shard stage's folder (sft/ for training, eval/ for the held-out format rate).
        out_dir: `models/sft`.
        checkpoint_dir: persistent folder for resumable checkpoints.
        metrics_dir: where the live curves go (`live/sft`: DVCLive's files and TensorBoard's, per step).

    Raises:
        EmptyInput: no training samples (one line naming the shard stage, before any process is launched).
        ValueError: params that cannot work (named).
        OutputLocked: another live run writes `out_dir` or `checkpoint_dir`.
    """
    _refuse_empty(Path(shards_dir) / "sft")  # here, not in each launched rank: one line, no traceback per rank
    with hold_outputs("sft", [out_dir, checkpoint_dir]):
        return _train_sft(params, model_params, shards_dir, out_dir, checkpoint_dir, metrics_dir)


def _train_sft(params: SftParams, model_params: ModelParams, shards_dir: Path, out_dir: Path,
               checkpoint_dir: Path, metrics_dir: Path) -> StageReport:
    if params.processes > 1 and "WORLD_SIZE" not in os.environ:
        return _launch(params, model_params, shards_dir, out_dir, checkpoint_dir, metrics_dir)
    from transformers import PrinterCallback, Trainer, TrainingArguments, set_seed

    _check(params)
    liger = resolve_liger(params.liger, "sft.liger")
    seed_everything(params.seed)
    train = index_shards(Path(shards_dir) / "sft")
    cuda = torch.cuda.is_available()
    if not cuda and params.cpu_threads > 0:
        # measured here: the tiny model runs ~50× faster on 1 thread than on 2 when another process holds a core
        torch.set_num_threads(params.cpu_threads)
    args = TrainingArguments(
        output_dir=str(checkpoint_dir), use_cpu=not cuda, bf16=cuda and model_params.dtype != "float32",
        per_device_train_batch_size=params.batch_size, gradient_accumulation_steps=params.grad_accum,
        num_train_epochs=params.epochs, learning_rate=params.learning_rate, weight_decay=params.weight_decay,
        max_grad_norm=params.max_grad_norm, lr_scheduler_type=params.lr_scheduler, warmup_steps=params.warmup_ratio,
        logging_steps=1, save_strategy="steps", save_steps=params.save_every_steps, save_total_limit=1,
        report_to=["tensorboard"],  # its writer goes to the live folder (stages.core.live)
        seed=params.seed, data_seed=params.seed, remove_unused_columns=False, dataloader_num_workers=0,
        activation_checkpointing=params.gradient_checkpointing, disable_tqdm=True, save_only_model=False,
        ddp_find_unused_parameters=False, use_liger_kernel=liger,
        # transformers counts the tokens every process trains on (attention mask, or the packed row's length)
        include_num_input_tokens_seen="non_padding",
    )
    state = args.distributed_state  # set up by TrainingArguments: one process, or the launched group
    main = state.is_main_process
    fingerprint = _fingerprint(params, model_params, train, state.num_processes)
    if main:
        _prepare_checkpoints(Path(checkpoint_dir), fingerprint)
    state.wait_for_everyone()

    dtype = model_params.dtype if model_params.dtype != "auto" else ("bfloat16" if cuda else "float32")
    model, processor = load_vlm(model_params.path, dtype, str(args.device))  # this rank's device
    held_out = read_shards(Path(shards_dir) / "eval")[: params.format_eval_samples] if main else []
    prompts = prompt_batches(processor, held_out)  # encoded once for the before and after checks
    before = format_rate(model, processor, held_out, params.max_new_tokens, batches=prompts)[0] if main else 0.0
    by_source = source_samples(train) if main else {}  # several training sources: their loss before and after
    before_sources = source_losses(model, processor, by_source)
    state.wait_for_everyone()

    set_seed(params.seed)
    collator = _collator(params, model, processor)
    model = _trainable(model, params)
    dataset = SftDataset(train, processor, params.cache_mb * 2**20)
    log.info("sft: %s micro-batches, Liger kernels %s", "packed" if params.packing else "padded",
             "on" if liger else "off")
    trainer = Trainer(model=model, args=args, train_dataset=dataset, data_collator=collator,
                      callbacks=[_progress_callback()])
    trainer.remove_callback(PrinterCallback)  # steps go to logging and the progress reporter instead
    resume = last_complete_checkpoint(Path(checkpoint_dir))
    if resume:
        log.info("sft: resuming from %s", resume)
    earlier = _tokens_seen(resume)  # read now: the trainer removes that checkpoint once it saves a newer one
    live_callbacks(trainer, live_dir(Path(metrics_dir), "sft"), curve_values, _render_curves,
                   resume_step=checkpoint_step(resume))
    output = trainer.train(resume_from_checkpoint=resume)
    tokens = trainer.state.num_input_tokens_seen - earlier  # this sitting's, as train_runtime

    out_dir = Path(out_dir)
    if main:
        shutil.rmtree(out_dir, ignore_errors=True)
    state.wait_for_everyone()
    lora = params.lora_r > 0
    trainer.save_model(str(out_dir / ("adapter" if lora else "merged")))  # all ranks: FSDP/ZeRO gather here
    curve = _curve(trainer.state.log_history)
    steps = int(trainer.state.global_step)
    result: dict = {}
    if main:
        result = _finish(params, model_params, processor, out_dir, held_out, prompts, before, curve, steps,
                         train, tokens, output.metrics, Path(shards_dir), Path(metrics_dir), state.num_processes,
                         by_source, before_sources)
        shutil.rmtree(checkpoint_dir, ignore_errors=True)  # finished: nothing to resume
        # this process's micro-batches: padding as padded rows would hold it, and as fed (0 when packed)
        result.update(collator.count.stats(), liger=liger)
    state.wait_for_everyone()
    return StageReport("sft", metrics=result, markdown=_curves(Path(metrics_dir)) if main else "")


def curve_values(logs: dict) -> dict[str, float]:
    """A Trainer log entry → the SFT curves (loss, learning rate, gradient norm); {} for the final summary."""
    if "loss" not in logs or "learning_rate" not in logs:
        return {}
    return {"loss": float(logs["loss"]), "learning_rate": float(logs["learning_rate"]),
            **({"grad_norm": float(logs["grad_norm"])} if "grad_norm" in logs else {})}


def _tokens_seen(checkpoint: str | None) -> int:
    """Tokens transformers had counted when `checkpoint` was saved (0 for a fresh start): a resumed sitting's own
    tokens are the count at its end less these."""
    if not checkpoint:
        return 0
    state = json.loads((Path(checkpoint) / "trainer_state.json").read_text())
    return int(state.get("num_input_tokens_seen") or 0)


def _curves(metrics_dir: Path) -> str:
    """The loss and learning-rate curves as pictures for the stage's Prefect artifact."""
    return live_markdown(live_dir(metrics_dir, "sft"), _render_curves)


def _render_curves(table: Path) -> str:
    return curves_markdown(table, "step", [(["loss"], "SFT training loss", "cross-entropy loss"),
                                           (["learning_rate"], "SFT learning rate", "learning rate")])


def _progress_callback():
    """A Trainer callback: optimizer steps → the stage's progress reporter (Prefect progress) and `logging`."""
    from transformers import TrainerCallback

    class Progress(TrainerCallback):
        reporter: ProgressReporter | None = None

        def on_train_begin(self, args, state, control, **kwargs) -> None:
            if state.is_world_process_zero:
                self.reporter = ProgressReporter(state.max_steps, desc="sft steps")
                self.reporter.advance(state.global_step)

        def on_log(self, args, state, control, logs=None, **kwargs) -> None:
            if state.is_world_process_zero and logs and "loss" in logs:
                log.info("sft step %d/%d: %s", state.global_step, state.max_steps, logs)

        def on_step_end(self, args, state, control, **kwargs) -> None:
            if self.reporter is not None:
                self.reporter.advance()

        def on_train_end(self, args, state, control, **kwargs) -> None:
            if self.reporter is not None:
                self.reporter.close()

    return Progress()


def _finish(params: SftParams, model_params: ModelParams, processor, out_dir: Path, held_out: list[dict],
            prompts: list[dict], before: float, curve: list[dict], steps: int, train: list, tokens: int,
            train_metrics: dict, shards_dir: Path, metrics_dir: Path, processes: int,
            by_source: dict[str, list], before_sources: dict[str, float]) -> dict:
    """Main process: merged weights, format rate after, metrics (per training source too: training
    samples, loss before and after on up to SOURCE_LOSS_SAMPLES of them), lineage, model card."""
    if params.lora_r > 0:
        _merge(model_params, out_dir)
    processor.save_pretrained(out_dir / "merged")
    merged, _ = load_vlm(out_dir / "merged", model_params.dtype)
    after, samples_out = format_rate(merged, processor, held_out, params.max_new_tokens, batches=prompts)
    after_sources = source_losses(merged, processor, by_source)
    runtime = float(train_metrics.get("train_runtime", 0.0))
    metrics = {"format_rate_before": round(before, 4), "format_rate_after": round(after, 4), "steps": steps,
               "final_loss": curve[-1]["loss"] if curve else float("nan"), "train_samples": len(train),
               "held_out_samples": len(held_out), "processes": processes,
               "samples_per_s": round(float(train_metrics.get("train_samples_per_second", 0.0)), 3),
               "tokens_per_s": round(tokens / runtime, 1) if runtime > 0 else 0.0}
    trained = {name: sum(1 for s in train if s.meta.get("source", "root") == name) for name in by_source}
    for name in by_source:
        metrics.update({f"source.{name}.samples": trained[name], f"source.{name}.loss_samples": len(by_source[name]),
                        f"source.{name}.loss_before": before_sources[name],
                        f"source.{name}.loss_after": after_sources[name]})
    write_json(out_dir / "format_eval.json", {"outputs": samples_out[:4], "rate": after})
    write_lineage(out_dir, "sft", {"sft": params, "model": model_params}, seed=params.seed,
                  inputs={"shards": shards_dir, "base_model": Path(model_params.path)},  # the base is raw data too
                  counts={"train_samples": len(train), "steps": steps},
                  code_modules=["stages.sft", "stages.models"])
    kind = "LoRA" if params.lora_r > 0 else "full fine-tuning"
    write_model_card(out_dir, f"vrsflow SFT checkpoint ({kind} on Qwen2.5-VL)", default_params(),
                     metrics={"sft": metrics})
    log.info(summary_line("sft", metrics))  # one short line; all values in the metrics file
    return metrics


def _refuse_empty(folder: Path) -> None:
    """Raise EmptyInput unless some `shard-*.tar` of `folder` holds a member (reads one tar header, not the pool)."""
    for path in sorted(folder.glob("shard-*.tar")):
        with tarfile.open(path, "r:") as tar:
            if tar.next() is not None:
                return
    raise EmptyInput(f"sft: {folder} holds no training samples: the shard stage wrote none (it shards the traces "
                     "the filter accepted: see metrics/shard.json, metrics/filter.json and metrics/cot.json); "
                     "nothing to fine-tune on")


def _check(params: SftParams) -> None:
    if not 0.0 <= params.warmup_ratio < 1.0:
        raise ValueError(f"sft.warmup_ratio: expected a share in [0, 1), got {params.warmup_ratio}")
    for key in ("epochs", "grad_accum", "batch_size", "save_every_steps"):
        if getattr(params, key) < 1:
            raise ValueError(f"sft.{key}: expected at least 1, got {getattr(params, key)}")


def _collator(params: SftParams, model, processor) -> PackCollator | PadCollator:
    """Packed rows (`sft.packing`: the model's own M-RoPE positions per sample) or right-padded rows.

    Raises:
        ValueError: packing asked of a model without Qwen2-VL-style 3D positions (`get_rope_index`).
    """
    if not params.packing:
        return PadCollator(processor.tokenizer.pad_token_id)
    rope_index = getattr(getattr(model, "model", None), "get_rope_index", None)
    if rope_index is None:
        raise ValueError(f"sft.packing: {type(model).__name__} has no get_rope_index (packing needs a Qwen2-VL-family "
                         "model's 3D positions)")
    return PackCollator(rope_index)


def _trainable(model, params: SftParams):
    """LoRA on the language model (`lora_r` > 0) or full fine-tuning of it; the vision tower trains only with
    `train_vision`."""
    from peft import LoraConfig, get_peft_model

    if params.lora_r > 0:
        config = LoraConfig(r=params.lora_r, lora_alpha=params.lora_alpha, lora_dropout=params.lora_dropout,
                            target_modules=lora_targets(params.target_modules, params.train_vision),
                            modules_to_save=list(params.modules_to_save) or None, task_type="CAUSAL_LM")
        model = get_peft_model(model, config)
    elif not params.train_vision:
        freeze_vision(model)
    if not params.train_vision and trainable_vision_parameters(model):
        raise ValueError(f"sft: vision parameters would train: {trainable_vision_parameters(model)[:3]} "
                         "(sft.modules_to_save names a vision module?)")
    return model


def _merge(model_params: ModelParams, out_dir: Path) -> None:
    """Base + saved adapter → merged weights (the same path for DDP, FSDP and ZeRO: the adapter on disk is whole);
    the adapter published for PEFT's `AutoPeftModel` from any directory (`stages.models.adapter`)."""
    from peft import PeftModel

    from stages.models.adapter import publish_adapter

    base, _ = load_vlm(model_params.path, model_params.dtype)
    publish_adapter(out_dir / "adapter", model_params.path, type(base))
    merged = PeftModel.from_pretrained(base, out_dir / "adapter").merge_and_unload()
    merged.save_pretrained(out_dir / "merged")


def _fingerprint(params: SftParams, model_params: ModelParams, train: list, processes: int) -> str:
    """What a checkpoint must match to be resumed: params, model, the samples and the process count (it
    decides which samples each step sees)."""
    digest = hashlib.sha256(json.dumps([to_dict(params), to_dict(model_params), processes], sort_keys=True).encode())
    for sample in train:
        digest.update(meta_json(sample).encode())
    return digest.hexdigest()


def _prepare_checkpoints(folder: Path, fingerprint: str) -> None:
    """Keep checkpoints only when they come from the same run; otherwise start afresh."""
    stamp = folder / "fingerprint.txt"
    if folder.exists() and (not stamp.is_file() or stamp.read_text().strip() != fingerprint):
        log.info("sft: checkpoints in %s are from other params or data; starting afresh", folder)
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(stamp, fingerprint + "\n")


def _curve(log_history: list[dict]) -> list[dict]:
    """One row per optimizer step from the trainer's log history (the resumed part included): the final loss."""
    rows = {int(e["step"]): {"step": int(e["step"]), "loss": round(float(e["loss"]), 6),
                             "lr": float(e["learning_rate"])}
            for e in log_history if "loss" in e and "learning_rate" in e}
    return [rows[s] for s in sorted(rows)]


def _launch(params: SftParams, model_params: ModelParams, shards_dir: Path, out_dir: Path, checkpoint_dir: Path,
            metrics_dir: Path) -> StageReport:
    """Run this stage in `sft.processes` processes and return the main process's metrics."""
    from stages.models.launch import run_launched

    metrics = run_launched("sft", params.processes, params.accelerate_config, "stages.sft", {
        "sft": to_dict(params), "model": to_dict(model_params), "shards_dir": str(shards_dir),
        "out_dir": str(out_dir), "checkpoint_dir": str(checkpoint_dir), "metrics_dir": str(metrics_dir)})
    return StageReport("sft", metrics=metrics, markdown=_curves(Path(metrics_dir)))
