"""`sft` stage: LoRA SFT (peft) of Qwen2.5-VL on the accepted reasoning traces.

Reads top to bottom like a torchtune recipe: params → seed → data → model + LoRA → format rate before →
train (gradient accumulation, cosine schedule, checkpoints) → save adapter + merged weights → format
rate after → metrics. Loss is on assistant tokens only. bf16 on GPU, fp32 on CPU. A run killed
mid-way resumes from its last checkpoint (same params and data, checked by a fingerprint).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
from transformers import get_cosine_schedule_with_warmup

from schemas.answer import parse_answer
from stages.core.io import atomic_write_text, write_json
from stages.core.lineage import write_lineage
from stages.core.model_card import write_model_card
from stages.core.params import ModelParams, SftParams
from stages.core.progress import ProgressReporter
from stages.core.report import StageReport
from stages.core.typed_config import to_dict
from stages.models import load_vlm
from stages.sft.data import encode_example, encode_prompts, meta_json, read_shards

log = logging.getLogger(__name__)


def seed_everything(seed: int) -> None:
    """Python, numpy and torch generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@torch.no_grad()
def format_rate(model, processor, samples: list[dict], max_new_tokens: int, batch_size: int = 8
                ) -> tuple[float, list[str]]:
    """Share of greedy outputs that parse as the answer format (exact tags + answer JSON), and the outputs."""
    model.eval()
    outputs: list[str] = []
    for start in range(0, len(samples), batch_size):
        batch = encode_prompts(processor, samples[start:start + batch_size])
        inputs = {k: v.to(model.device) for k, v in batch.items()}
        generated = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        outputs += processor.batch_decode(generated[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    ok = [(a := parse_answer(o)) is not None and a.well_formed for o in outputs]
    return (sum(ok) / len(ok) if ok else 0.0), outputs


def train_sft(params: SftParams, model_params: ModelParams, shards_dir: Path, out_dir: Path,
              checkpoint_dir: Path, metrics_dir: Path) -> StageReport:
    """Fine-tune `model.path` with LoRA on `shards_dir/sft`; write adapter/, merged/, a model card, curves.

    Args:
        params: the `sft` block.
        model_params: the `model` block (base checkpoint folder, dtype).
        shards_dir: the shard stage's folder (sft/ for training, eval/ for the held-out format rate).
        out_dir: `models/sft`.
        checkpoint_dir: persistent folder for resumable checkpoints.
        metrics_dir: where `sft_curve.tsv` (per step) goes.
    """
    seed_everything(params.seed)
    train = read_shards(Path(shards_dir) / "sft")
    held_out = read_shards(Path(shards_dir) / "eval")[: params.format_eval_samples]
    if not train:
        raise ValueError(f"{shards_dir}/sft holds no samples: nothing to fine-tune on (did the filter reject all?)")
    model, processor = load_vlm(model_params.path, model_params.dtype)
    device = model.device
    if device.type == "cpu" and params.cpu_threads > 0:
        # measured here: the tiny model runs ~50× faster on 1 thread than on 2 when another process holds a core
        torch.set_num_threads(params.cpu_threads)
    torch.manual_seed(params.seed)
    before, _ = format_rate(model, processor, held_out, params.max_new_tokens)

    lora = LoraConfig(r=params.lora_r, lora_alpha=params.lora_alpha, lora_dropout=params.lora_dropout,
                      target_modules=list(params.target_modules), modules_to_save=list(params.modules_to_save) or None,
                      task_type="CAUSAL_LM")
    model = get_peft_model(model, lora)
    if params.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=params.learning_rate, weight_decay=params.weight_decay)
    micro_per_epoch = len(train)
    total_steps = max(1, math.ceil(micro_per_epoch * params.epochs / params.grad_accum))
    scheduler = get_cosine_schedule_with_warmup(optimizer, int(params.warmup_ratio * total_steps), total_steps)

    fingerprint = _fingerprint(params, model_params, train)
    state = _resume(Path(checkpoint_dir), fingerprint, model, optimizer, scheduler)
    step, curve = state["step"], state["curve"]
    start_micro = step * params.grad_accum
    order = _order(len(train), params.epochs, params.seed)
    progress = ProgressReporter(total_steps, desc="sft steps")
    progress.advance(step)
    model.train()
    started = time.perf_counter()
    tokens = running = 0.0
    micro_done = 0
    for micro in range(start_micro, len(order)):
        batch = {k: v.to(device) for k, v in encode_example(processor, train[order[micro]]).items()}
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = model(**batch).loss / params.grad_accum
        loss.backward()
        running += float(loss.detach())
        tokens += int(batch["attention_mask"].sum())
        micro_done += 1
        last = micro == len(order) - 1
        if (micro + 1) % params.grad_accum == 0 or last:
            torch.nn.utils.clip_grad_norm_(trainable, params.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            curve.append({"step": step, "loss": round(running, 6), "lr": scheduler.get_last_lr()[0]})
            running = 0.0
            progress.advance()
            if step % params.save_every_steps == 0 and not last:
                _save_checkpoint(Path(checkpoint_dir), fingerprint, step, curve, model, optimizer, scheduler)
    progress.close()
    elapsed = time.perf_counter() - started

    out_dir = Path(out_dir)
    shutil.rmtree(out_dir, ignore_errors=True)
    model.save_pretrained(out_dir / "adapter")
    processor.save_pretrained(out_dir / "adapter")
    merged = model.merge_and_unload()
    merged.save_pretrained(out_dir / "merged")
    processor.save_pretrained(out_dir / "merged")
    after, samples_out = format_rate(merged, processor, held_out, params.max_new_tokens)

    _write_curve(Path(metrics_dir) / "sft_curve.tsv", curve)
    metrics = {"format_rate_before": round(before, 4), "format_rate_after": round(after, 4), "steps": step,
               "final_loss": curve[-1]["loss"] if curve else float("nan"), "train_samples": len(train),
               "held_out_samples": len(held_out),
               "samples_per_s": round(micro_done / elapsed, 3) if elapsed > 0 else 0.0,
               "tokens_per_s": round(tokens / elapsed, 1) if elapsed > 0 else 0.0}
    write_json(out_dir / "format_eval.json", {"outputs": samples_out[:4], "rate": after})
    write_lineage(out_dir, "sft", {"sft": params, "model": model_params}, seed=params.seed,
                  inputs={"shards": Path(shards_dir)}, counts={"train_samples": len(train), "steps": step},
                  code_modules=["stages.sft", "stages.models"])
    write_model_card(out_dir, "vrsflow SFT checkpoint (LoRA on Qwen2.5-VL)", metrics={"sft": metrics})
    shutil.rmtree(checkpoint_dir, ignore_errors=True)  # finished: nothing to resume
    log.info("sft: %s", metrics)
    return StageReport("sft", metrics=metrics)


def _order(n: int, epochs: int, seed: int) -> list[int]:
    """Sample order over all epochs: a seeded permutation per epoch (fixed, so a resumed run continues it)."""
    return [int(i) for epoch in range(epochs) for i in np.random.default_rng([seed, epoch]).permutation(n)]


def _fingerprint(params: SftParams, model_params: ModelParams, train: list[dict]) -> str:
    digest = hashlib.sha256(json.dumps([to_dict(params), to_dict(model_params)], sort_keys=True).encode())
    for sample in train:
        digest.update(meta_json(sample).encode())
    return digest.hexdigest()


def _save_checkpoint(folder: Path, fingerprint: str, step: int, curve: list, model, optimizer, scheduler) -> None:
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save({"adapter": get_peft_model_state_dict(model), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "torch_rng": torch.get_rng_state()}, tmp / "state.pt")
    atomic_write_text(tmp / "trainer_state.json", json.dumps({"fingerprint": fingerprint, "step": step,
                                                               "curve": curve}))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)  # a kill leaves either the old or the new checkpoint, never half of one


def _resume(folder: Path, fingerprint: str, model, optimizer, scheduler) -> dict:
    meta = folder / "trainer_state.json"
    if not meta.is_file():
        return {"step": 0, "curve": []}
    state = json.loads(meta.read_text())
    if state.get("fingerprint") != fingerprint:
        log.info("sft: checkpoint in %s is from other params or data; starting afresh", folder)
        shutil.rmtree(folder, ignore_errors=True)
        return {"step": 0, "curve": []}
    saved = torch.load(folder / "state.pt", weights_only=False)
    set_peft_model_state_dict(model, saved["adapter"])
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    torch.set_rng_state(saved["torch_rng"])
    log.info("sft: resuming from step %d", state["step"])
    return state


def _write_curve(path: Path, curve: list[dict]) -> None:
    lines = ["step\tloss\tlr"] + [f"{c['step']}\t{c['loss']:.6f}\t{c['lr']:.8g}" for c in curve]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "\n".join(lines) + "\n")
