"""`pretrain` stage: pre-train the tiny Qwen2.5-VL to localise, so that the default run starts from a base that sees.

A random tiny model learns the answer format in SFT but never where things are, so the default run's scores would
be noise. This stage trains the `tiny_models` Qwen2.5-VL (all of it: vision tower, merger, language model) on
grounding scenes generated for it (`stages.pretrain.scenes`: the synth simulator with its own seed stream — shapes,
colours, textures, sizes, positions and motion; "the red star", "the largest shape", "the shape that stops" → the
keyframe and the boxes as text at the train size), with the same transformers `Trainer` the SFT stage uses, and
saves it in the same Qwen2.5-VL folder format as a real checkpoint (config, weights, processor): SFT, GRPO and
evaluation load it through the same `model.path`.

A real checkpoint needs none of this: when `model.path` is not `pretrain.out_dir` the stage records that it was
skipped and trains nothing. Before and after training, greedy answers on held-out scenes (another seed stream)
give the grounding check: parse rate, mean matched box IoU at the keyframe, keyframe hits.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from schemas.answer import parse_answer
from stages.core.io import atomic_write_text
from stages.core.lineage import write_lineage
from stages.core.model_card import write_model_card
from stages.core.params import ModelParams, PretrainParams, SynthScale
from stages.core.progress import trainer_progress
from stages.core.report import StageReport, curves_markdown, skipped_report, summary_line
from stages.core.typed_config import to_dict
from stages.models import load_vlm
from stages.pretrain.scenes import GroundingSample, scene_samples
from stages.sft.data import PadCollator, assistant_labels
from stages.tasks import user_content

log = logging.getLogger(__name__)



def skipped(params: PretrainParams, model: ModelParams) -> bool:
    """True when `model.path` is not this stage's output (a real checkpoint): nothing to pre-train."""
    return Path(model.path).resolve() != Path(params.out_dir).resolve()


def pretrain(params: PretrainParams, model: ModelParams, train_size: int, out_dir: Path,
             metrics_dir: Path) -> StageReport:
    """Pre-train `pretrain.base` on generated grounding scenes; write `out_dir` (a Qwen2.5-VL folder).

    Args:
        params: the `pretrain` block.
        model: the `model` block (the stage runs only when `model.path` is `pretrain.out_dir`; dtype).
        train_size: `keyframes.train_size`: the side of the frames shown, and of the answer's pixels.
        out_dir: `pretrain.out_dir`.
        metrics_dir: where `pretrain_curve.tsv` goes.

    Raises:
        FileNotFoundError: `pretrain.base` is not a model folder.
        ValueError: params that cannot work (named), or scenes without any sample.
    """
    out_dir = Path(out_dir)
    if skipped(params, model):
        _write_curve(Path(metrics_dir) / "pretrain_curve.tsv", [])  # a declared output: header only
        return skipped_report("pretrain", out_dir, f"model.path {model.path} is not pretrain.out_dir {params.out_dir}: "
                              "the model trained is another checkpoint (a real one, or the random tiny model)")
    rope = _rope(params)  # a section that cannot fit the base is refused here, before a process starts or a file goes
    if params.processes > 1 and "WORLD_SIZE" not in os.environ:
        return _launch(params, model, train_size, out_dir, metrics_dir)
    return _train(params, model, train_size, out_dir, Path(metrics_dir), rope)


def _scale(params: PretrainParams) -> SynthScale:
    """The synth default preset's clip geometry with the pre-training's own clip count."""
    return SynthScale(n_videos_train=params.videos, n_videos_valid=1)


def _train(params: PretrainParams, model: ModelParams, train_size: int, out_dir: Path,
           metrics_dir: Path, rope: dict) -> StageReport:
    from transformers import Trainer, TrainingArguments, set_seed

    cuda = torch.cuda.is_available()
    if not cuda and params.cpu_threads > 0:
        torch.set_num_threads(params.cpu_threads)
    started = time.perf_counter()
    scale = _scale(params)
    train = scene_samples(params.seed, "train", params.videos, params.n_frames, train_size, scale)
    check = scene_samples(params.seed, "check", params.check_videos, params.n_frames, train_size, scale)
    if not train:
        raise ValueError(f"pretrain.videos = {params.videos}: the generated scenes hold no sample with a target")
    scenes_s = time.perf_counter() - started
    args = TrainingArguments(
        output_dir=str(out_dir.parent / f".{out_dir.name}-trainer"), use_cpu=not cuda, bf16=False,
        per_device_train_batch_size=params.batch_size, num_train_epochs=params.epochs,
        learning_rate=params.learning_rate, lr_scheduler_type="cosine", warmup_steps=params.warmup_ratio,
        weight_decay=params.weight_decay, max_grad_norm=1.0, logging_steps=1, save_strategy="no", report_to="none",
        seed=params.seed, data_seed=params.seed, remove_unused_columns=False, dataloader_num_workers=0,
        disable_tqdm=True, ddp_find_unused_parameters=False,
    )
    state = args.distributed_state
    main = state.is_main_process
    set_seed(params.seed)
    vlm, processor = load_vlm(params.base, "float32", str(args.device), rope_parameters=rope)
    before = grounding_check(vlm, processor, check, params.max_new_tokens) if main else {}
    state.wait_for_everyone()
    dataset = GroundingDataset(train, processor)
    trainer = Trainer(model=vlm, args=args, train_dataset=dataset,
                      data_collator=PadCollator(processor.tokenizer.pad_token_id))
    trainer_progress(trainer, "pretrain steps", every=20)  # the project's one Trainer progress bar + short lines
    output = trainer.train()
    result: dict = {}
    if main:
        shutil.rmtree(out_dir, ignore_errors=True)
        unwrapped = trainer.model
        unwrapped.save_pretrained(out_dir)
        processor.save_pretrained(out_dir)
        shutil.rmtree(args.output_dir, ignore_errors=True)
        after = grounding_check(unwrapped, processor, check, params.max_new_tokens)
        curve = [{"step": int(e["step"]), "loss": round(float(e["loss"]), 6), "lr": float(e["learning_rate"])}
                 for e in trainer.state.log_history if "loss" in e and "learning_rate" in e]
        _write_curve(metrics_dir / "pretrain_curve.tsv", curve)
        result = {"train_samples": len(train), "train_videos": params.videos, "check_samples": len(check),
                  "steps": int(trainer.state.global_step), "processes": state.num_processes,
                  "final_loss": curve[-1]["loss"] if curve else float("nan"),
                  "train_s": round(float(output.metrics.get("train_runtime", 0.0)), 1), "scenes_s": round(scenes_s, 1),
                  **{f"{k}_before": v for k, v in before.items()}, **{f"{k}_after": v for k, v in after.items()}}
        write_lineage(out_dir, "pretrain", {"pretrain": params, "model": model}, seed=params.seed,
                      inputs={"base_model": Path(params.base)},
                      counts={"train_samples": len(train), "steps": result["steps"]},
                      code_modules=["stages.pretrain", "stages.synth", "stages.models"],
                      extra={"train_size": train_size, "scenes": _scenes_digest(train)})
        write_model_card(out_dir, "vrsflow tiny Qwen2.5-VL pre-trained on synthetic grounding",
                         metrics={"pretrain": result})
        log.info(summary_line("pretrain", result))
    state.wait_for_everyone()
    return StageReport("pretrain", metrics=result, markdown=_curves(metrics_dir) if main else "")


def _rope(params: PretrainParams) -> dict:
    """The language model's rope parameters for the pre-trained model; the sections must cover head_dim / 2."""
    config = Path(params.base) / "config.json"
    if not config.is_file():
        raise FileNotFoundError(f"pretrain.base {params.base} is not a model folder (the tiny_models stage writes it)")
    text = json.loads(config.read_text()).get("text_config", {})
    # head_dim as transformers' rope takes it: the config's own, else hidden size / heads
    pairs = (text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]) // 2
    if sum(params.mrope_section) != pairs:
        raise ValueError(f"pretrain.mrope_section {list(params.mrope_section)} must sum to {pairs} (head_dim / 2 of "
                         f"pretrain.base {params.base})")
    return {"rope_theta": params.rope_theta, "mrope_section": list(params.mrope_section)}


def chat(sample: GroundingSample, with_answer: bool) -> list[dict]:
    """The evaluation's question about the sample's frames (veason task), with the answer when training."""
    from stages.tasks import get_task

    question = get_task("veason").question(sample.expression, sample.timestamps)
    messages = [{"role": "user", "content": user_content(sample.timestamps, question)}]
    if with_answer:
        messages.append({"role": "assistant", "content": [{"type": "text", "text": sample.response}]})
    return messages


class GroundingDataset(torch.utils.data.Dataset):
    """Samples encoded by the processor once (kept in memory: the scenes are small), loss on the answer only."""

    def __init__(self, samples: list[GroundingSample], processor) -> None:
        self.samples, self.processor = samples, processor
        self.cache: dict[int, dict[str, torch.Tensor]] = {}

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if index not in self.cache:
            sample = self.samples[index]
            text = self.processor.apply_chat_template(chat(sample, True), tokenize=False)
            encoded = dict(self.processor(text=[text], images=[sample.images], return_tensors="pt"))
            encoded["labels"] = assistant_labels(encoded["input_ids"], self.processor.tokenizer)
            self.cache[index] = encoded
        return self.cache[index]


def box_iou(a: list[float], b: list[float]) -> float:
    """IoU of two [x1, y1, x2, y2] boxes (exclusive ends)."""
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
    return w * h / union if union > 0 else 0.0


@torch.no_grad()
def grounding_check(vlm, processor, samples: list[GroundingSample], max_new_tokens: int,
                    batch_size: int = 16) -> dict[str, float]:
    """Greedy answers on held-out scenes: parse rate, keyframe hits, mean best-match IoU of the first target."""
    vlm.eval()
    processor.tokenizer.padding_side = "left"
    parsed = hits = 0
    ious = []
    for i in range(0, len(samples), batch_size):
        batch = samples[i:i + batch_size]
        texts = [processor.apply_chat_template(chat(s, False), tokenize=False, add_generation_prompt=True)
                 for s in batch]
        inputs = processor(text=texts, images=[s.images for s in batch], padding=True, return_tensors="pt")
        inputs = {k: v.to(vlm.device) for k, v in inputs.items()}
        generated = vlm.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        outputs = processor.batch_decode(generated[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        for sample, text in zip(batch, outputs, strict=True):
            answer = parse_answer(text)
            if answer is None or not answer.boxes:
                ious.append(0.0)
                continue
            parsed += 1
            hits += int(answer.keyframe_timestamp == sample.keyframe)
            ious.append(max(box_iou(list(map(float, box)), list(map(float, sample.boxes[0]))) for box in answer.boxes))
    vlm.train()
    n = max(len(samples), 1)
    return {"parse_rate": round(parsed / n, 4), "keyframe_hit_rate": round(hits / n, 4),
            "box_iou": round(float(np.mean(ious)) if ious else 0.0, 4)}


def _scenes_digest(samples: list[GroundingSample]) -> str:
    digest = hashlib.sha256()
    for s in samples:
        digest.update(repr((s.video, s.expression, s.keyframe, s.boxes)).encode())
    return digest.hexdigest()


def _curves(metrics_dir: Path) -> str:
    return curves_markdown(metrics_dir / "pretrain_curve.tsv", "step", [
        (["loss"], "Pre-training loss (grounding answers)", "cross-entropy loss")])


def _write_curve(path: Path, curve: list[dict]) -> None:
    lines = ["step\tloss\tlr"] + [f"{c['step']}\t{c['loss']:.6f}\t{c['lr']:.8g}" for c in curve]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "\n".join(lines) + "\n")


def _launch(params: PretrainParams, model: ModelParams, train_size: int, out_dir: Path,
            metrics_dir: Path) -> StageReport:
    from stages.models.launch import run_launched

    metrics = run_launched("pretrain", params.processes, "", "stages.pretrain", {
        "pretrain": to_dict(params), "model": to_dict(model), "train_size": train_size, "out_dir": str(out_dir),
        "metrics_dir": str(metrics_dir)})
    return StageReport("pretrain", metrics=metrics, markdown=_curves(Path(metrics_dir)))
