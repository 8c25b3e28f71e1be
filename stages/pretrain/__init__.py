"""`pretrain` stage: pre-train the tiny Qwen2.5-VL to localise, so that the default run starts from a base that sees.

A random tiny model learns the answer format in SFT but never where things are, so the default run's scores would
be noise. This stage trains a Qwen2.5-VL of `pretrain.base`'s architecture (all of it: vision tower, merger, language
model) with the pre-training rope (`rope_theta`, `mrope_section`: docs/architecture.md) on grounding samples in the
evaluation's question format (N frames, "the red rectangle", "the largest shape" → keyframe and boxes), streamed:
each optimizer step's batch is generated for that step (`stages.pretrain.stream`) under a curriculum from flat
rectangles on plain backgrounds, the colours asked for growing over the steps, to the synth frames.

Several seeds train at once (`pretrain.seeds`; a process each through `stages.models.seed_runs`, on a GPU up to
eight sharing it, on the CPU one per core, the rest in turn), each from its own initialisation
(`torch.manual_seed(seed)` on the base's config: the probe's seeds differed in initialisation and batches, and bound
a colour word in one of four). Each seed ends with its held-out grounding check on the fixed check stream, measured
on its bf16 weights read back in fp32 through `stages.models.load_vlm` (as SFT and evaluation load them): parse
rate, keyframe hits, box IoU of the answer against the targets at the shown frame it names (as the evaluation scores
it), and — the binding measure — of the answers whose first box lands on an object (IoU > 0.3), the share on the
asked one. With `select_every_steps` a seed ends with the weights of its best step of the last phase on a selection
stream of its own (`Selection`), not only its last. With `screen`, a seed whose held-out box IoU misses a bar at a
given step stops there (whether a fresh tiny model finds objects at all is a draw on its seed), and its core goes to
the next seed. Of the seeds that cleared every bar, the one with the best (box IoU, share on target) is written to
`out_dir` as a Qwen2.5-VL folder (bf16 safetensors, the pre-training rope in its config, the processor), with
`seeds.json` (every seed's figures), lineage (device, steps, seeds, dtype) and the model card.

A plain torch loop, not transformers' `Trainer`: the batch of a step must depend on the step alone (so a resume is
exact and no scene repeats), which a map over steps given to a `DataLoader` gives directly, with worker processes
rendering ahead; the training state (fp32 weights, AdamW, schedule, torch RNG, curve) is saved every
`save_every_steps` into `checkpoint_dir/seed-<k>/` with a fingerprint of the settings, and a rerun resumes there and
ends byte for byte where an uninterrupted run ends (tested). A finished seed's figures and bf16 model are kept there
until the stage publishes, so a rerun after a kill trains only the unfinished seeds. On a GPU the forward and
backward passes run under bf16 autocast over fp32 weights and AdamW state (bf16's range with an fp32 master copy:
no loss scaling, no drift of small updates); on the CPU everything is fp32 with `cpu_threads` threads per seed.

A real checkpoint needs none of this: when `model.path` is not `pretrain.out_dir` the stage records a skip.
"""

from __future__ import annotations

import copy
import json
import logging
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from schemas.answer import parse_answer
from stages.core.errors import OneLineError
from stages.core.io import atomic_write_text, write_json
from stages.core.lineage import write_lineage
from stages.core.model_card import write_model_card
from stages.core.progress import track
from stages.core.report import StageReport, curves_markdown, skipped_report, summary_line
from stages.core.typed_config import to_dict
from stages.models import load_vlm
from stages.models.batches import PadCollator
from stages.models.seed_runs import (
    best_seed,
    describe_device,
    drop_seed_folders,
    parallel_seeds,
    run_seeds,
    seed_folder,
)
from stages.models.train_state import fingerprint, load_state, warmup_cosine
from stages.models.train_state import save_state as _save_state  # a module name: tests stop a run after it
from stages.params import default_params
from stages.params.model import ModelParams
from stages.params.pretrain import PretrainParams
from stages.params.synth import SynthScale
from stages.pretrain.scenes import GroundingSample
from stages.pretrain.stream import StepBatches, chat, check_samples, encode, screen_samples, select_samples

log = logging.getLogger(__name__)

MODEL = "model"  # a seed's bf16 Qwen2.5-VL folder in its checkpoint folder
BEST = "best"  # its best step's bf16 folder so far (`select_every_steps`)
STATE = "state.pt"  # a seed's resumable training state
RESULT = "result.json"  # a finished seed's figures, kept until the stage publishes
SCREENS = "screens.json"  # the screens a seed has been through (`pretrain.screen`)
SEEDS = "seeds.json"  # every seed's figures and the one kept, in out_dir
CURVE = "pretrain_curve.tsv"
CURVE_KEYS = ("step", "loss", "lr")  # a curve row, as the saved state keeps it
LANDED_IOU = 0.3  # a box "lands on" an object above this IoU with it (the probe's measure)
# settings that change neither the weights a seed ends with nor its check
NOT_TRAINING = ("seeds", "out_dir", "checkpoint_dir", "save_every_steps", "parallel", "loader_workers")


def skipped(params: PretrainParams, model: ModelParams) -> bool:
    """True when `model.path` is not this stage's output (a real checkpoint): nothing to pre-train."""
    return Path(model.path).resolve() != Path(params.out_dir).resolve()


def pretrain(params: PretrainParams, model: ModelParams, train_size: int, scale: SynthScale, out_dir: Path,
             metrics_dir: Path) -> StageReport:
    """Pre-train one model per seed on streamed grounding scenes; write the best seed's Qwen2.5-VL folder to
    `out_dir` (bf16) with every seed's figures in `out_dir/seeds.json`.

    Args:
        params: the `pretrain` block.
        model: the `model` block (the stage runs only when `model.path` is `pretrain.out_dir`).
        train_size: `keyframes.train_size`: the side of the frames shown, and of the answer's pixels.
        scale: the synth stage's scale (`synth.<synth.size>`): the synth frames are drawn as the pipeline's are.
        out_dir: `pretrain.out_dir`.
        metrics_dir: where `pretrain_curve.tsv` goes (the kept seed's).

    Raises:
        FileNotFoundError: `pretrain.base` is not a model folder (one line, before anything is removed).
        ValueError: `pretrain.mrope_section` does not fit the base's head size.
        SeedFailed: a seed's process failed (it has printed why); finished seeds are kept for a rerun.
        NoSeedPassed: every seed stopped at a `pretrain.screen` bar (before anything is removed).
    """
    out_dir = Path(out_dir)
    if skipped(params, model):
        _write_curve(Path(metrics_dir) / CURVE, [])  # a declared output: header only
        return skipped_report("pretrain", out_dir, f"model.path {model.path} is not pretrain.out_dir {params.out_dir}: "
                              "the model trained is another checkpoint (a real one, or the random tiny model)")
    rope_parameters(params)  # a section that cannot fit the base is refused here, before a process starts
    started = time.perf_counter()
    parallel = parallel_seeds(params.parallel, len(params.seeds), torch.cuda.is_available())
    if parallel > 1:  # a process per seed (`python -m stages.pretrain --job JOB`), `parallel` at once
        results = run_seeds("pretrain", "stages.pretrain", {
            seed: {"pretrain": to_dict(params), "seed": seed, "train_size": train_size, "synth": to_dict(scale)}
            for seed in params.seeds},
            parallel)
    else:  # one after another in this process
        results = {seed: train_seed(params, seed, train_size, scale) for seed in params.seeds}
    return _publish(params, model, train_size, scale, results, out_dir, Path(metrics_dir), parallel,
                    time.perf_counter() - started)


class NoSeedPassed(OneLineError, RuntimeError):
    """Every seed missed a screen (`pretrain.screen`); their outcomes are kept for a rerun with more seeds."""


def choose(results: dict[int, dict]) -> int:
    """The seed kept, among those that cleared every screen: the best held-out box IoU, then the best share of
    landed boxes on the asked target.

    Raises:
        NoSeedPassed: every seed stopped at a screen.
    """
    finished = {seed: figures for seed, figures in results.items() if "screened_out_at" not in figures}
    if not finished:
        best = max((row for figures in results.values() for row in figures["screens"]), key=lambda r: r["box_iou"])
        raise NoSeedPassed(
            f"pretrain: every seed ({', '.join(map(str, sorted(results)))}) stopped at a pretrain.screen bar (best: "
            f"box IoU {best['box_iou']} at step {best['step']}, bar {best['min_box_iou']}); add seeds to "
            "pretrain.seeds: the stopped ones are not trained again")
    return best_seed(finished, lambda figures: (figures["box_iou"], figures["on_target"]))


def train_seed(params: PretrainParams, seed: int, train_size: int, scale: SynthScale) -> dict:
    """Train one seed to `params.steps` (resuming its saved state); return its figures, measured on its bf16 model
    read back in fp32. A seed that finished earlier under the same settings is not trained again."""
    seed_dir = seed_folder(params.checkpoint_dir, seed)
    state_key = _fingerprint(params, seed, train_size, scale)
    done = seed_dir / RESULT
    if done.is_file() and (record := json.loads(done.read_text())).get("fingerprint") == state_key:
        log.info("pretrain: seed %d finished earlier (%s)", seed, done)
        return record["figures"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and params.cpu_threads > 0:
        torch.set_num_threads(params.cpu_threads)
    torch.manual_seed(seed)
    model, processor = fresh_model(params)
    model = model.to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=params.learning_rate, weight_decay=params.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_cosine(step, params.warmup_steps, params.steps))
    state_path = seed_dir / STATE
    start, curve, earlier_s = load_state(state_path, state_key, model, optimizer, scheduler, CURVE_KEYS)
    loader = torch.utils.data.DataLoader(
        StepBatches(params, seed, train_size, scale, processor), sampler=range(start, params.steps), batch_size=None,
        num_workers=params.loader_workers, prefetch_factor=4 if params.loader_workers else None,
        pin_memory=device == "cuda")
    started = time.perf_counter()
    selection = Selection(seed_dir / BEST, start, select_samples(params, train_size, scale)
                          if params.select_every_steps else [], params.max_new_tokens)
    # its samples are the last phase's: the weights of earlier phases were never trained on their format
    select_from = params.steps - params.curriculum[-1].steps
    bars = {bar.step: bar for bar in params.screen}
    screens = _earlier_screens(seed_dir, start)
    steps = zip(range(start, params.steps), loader, strict=True)
    for step, micro in track(steps, total=params.steps - start, desc=f"pretrain seed {seed}"):
        loss = train_step(model, micro, device)
        torch.nn.utils.clip_grad_norm_(model.parameters(), params.grad_clip)
        lr = scheduler.get_last_lr()[0]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        curve.append({"step": step + 1, "loss": round(loss, 6), "lr": lr})
        if params.select_every_steps and step >= select_from and (
                (step + 1) % params.select_every_steps == 0 or step + 1 == params.steps):
            selection.offer(step + 1, model, processor)
        if step + 1 in bars:
            screens.append(_screen(params, bars[step + 1], model, processor, train_size, scale, seed))
            write_json(seed_dir / SCREENS, screens)  # read back on a resume from a later saved state
            if not screens[-1]["passed"]:
                return _screened_out(seed_dir, done, state_key, seed, params, screens, device,
                                     earlier_s + time.perf_counter() - started)
        if (step + 1) % params.save_every_steps == 0 and step + 1 < params.steps:
            _save_state(state_path, state_key, step + 1, model, optimizer, scheduler, curve, CURVE_KEYS,
                        earlier_s + time.perf_counter() - started)
    sitting_s = time.perf_counter() - started  # this sitting's; train_s adds the sittings before a resume

    _save_bf16(model, processor, seed_dir / MODEL)
    del model, optimizer
    kept_step = selection.keep(seed_dir / MODEL, params.steps)
    # the check reads the saved bf16 folder back in fp32, as SFT and evaluation load model.path
    saved, saved_processor = load_vlm(seed_dir / MODEL, "float32", device)
    check = check_samples(params, train_size, scale)
    figures = {"seed": seed, "steps": params.steps, "kept_step": kept_step, "resumed_from_step": start,
               "batch_size": params.batch_size,
               "train_s": round(earlier_s + sitting_s, 1), "device": describe_device(device),
               "samples_per_s": round((params.steps - start) * params.batch_size / sitting_s, 2) if sitting_s > 0
               else 0.0,
               "final_loss": round(float(np.mean([c["loss"] for c in curve[-max(1, len(curve) // 10):]])), 4),
               **grounding_check(saved, saved_processor, check, params.max_new_tokens), "screens": screens}
    _write_curve(seed_dir / CURVE, curve)
    write_json(done, {"fingerprint": state_key, "figures": figures})
    state_path.unlink(missing_ok=True)
    log.info(summary_line(f"pretrain seed {seed}", figures))
    return figures


def _earlier_screens(seed_dir: Path, resumed_at: int) -> list[dict]:
    """The screens a resumed seed passed up to its saved state (a later record is asked again as the rerun passes
    its step)."""
    record = seed_dir / SCREENS
    rows = json.loads(record.read_text()) if record.is_file() else []
    return [row for row in rows if row["step"] <= resumed_at]


def _screen(params: PretrainParams, bar, model, processor, train_size: int, scale: SynthScale, seed: int) -> dict:
    """The seed's answers to the screen's held-out samples after `bar.step` steps, against its bar."""
    figures = grounding_check(model, processor, screen_samples(params, bar.step, train_size, scale),
                              params.max_new_tokens)
    passed = figures["box_iou"] >= bar.min_box_iou
    log.info("pretrain seed %d: screen at step %d: held-out box IoU %.4f (bar %.2f): %s", seed, bar.step,
             figures["box_iou"], bar.min_box_iou, "goes on" if passed else "stopped")
    return {"step": bar.step, "min_box_iou": bar.min_box_iou, "passed": passed, "box_iou": figures["box_iou"],
            "landed": figures["landed"], "on_target": figures["on_target"], "mean_box_iou": figures["mean_box_iou"]}


def _screened_out(seed_dir: Path, done: Path, state_key: str, seed: int, params: PretrainParams, screens: list[dict],
                  device: str, train_s: float) -> dict:
    """Finish a seed that missed a screen: its figures say where (`screened_out_at`), with no model to check; its
    state goes, its outcome stays, so a rerun does not train it again."""
    figures = {"seed": seed, "steps": params.steps, "screened_out_at": screens[-1]["step"],
               "train_s": round(train_s, 1), "device": describe_device(device), "screens": screens}
    write_json(done, {"fingerprint": state_key, "figures": figures})
    (seed_dir / STATE).unlink(missing_ok=True)
    shutil.rmtree(seed_dir / BEST, ignore_errors=True)
    return figures


class Selection:
    """A seed's best step so far by its selection samples' (box IoU, share on target), its bf16 weights kept in
    `folder` with `selection.json` (the step and its figures). A later step of equal figures replaces an earlier
    one, so a seed that never improves keeps its last weights. Resumable: a record from beyond the resumed step
    (written after the last saved state) is dropped, since the rerun passes that step again and offers it anew."""

    def __init__(self, folder: Path, resumed_at: int, samples: list[GroundingSample], max_new_tokens: int) -> None:
        self.folder, self.samples, self.max_new_tokens = folder, samples, max_new_tokens
        record = folder / "selection.json"
        self.best = json.loads(record.read_text()) if record.is_file() else None
        if self.best is not None and (not samples or self.best["step"] > resumed_at):
            shutil.rmtree(folder, ignore_errors=True)
            self.best = None

    def offer(self, step: int, model, processor) -> None:
        figures = grounding_check(model, processor, self.samples, self.max_new_tokens)
        key = (figures["box_iou"], figures["on_target"])
        if self.best is None or key >= (self.best["box_iou"], self.best["on_target"]):
            _save_bf16(copy.deepcopy(model), processor, self.folder)
            write_json(self.folder / "selection.json", {"step": step, **figures})
            self.best = {"step": step, **figures}

    def keep(self, last: Path, steps: int) -> int:
        """The step whose weights `last` (the seed's final bf16 folder) ends with: the best one's, moved there."""
        if self.best is None or self.best["step"] == steps:
            shutil.rmtree(self.folder, ignore_errors=True)
            return steps
        (self.folder / "selection.json").unlink()
        shutil.rmtree(last)
        self.folder.rename(last)
        return int(self.best["step"])


def fresh_model(params: PretrainParams):
    """(an fp32 Qwen2.5-VL of the base's architecture with the pre-training rope, initialised from the torch RNG;
    the base's processor): what a seed trains, and what a saved state loads into."""
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor

    config = AutoConfig.from_pretrained(params.base, local_files_only=True)
    config.text_config.rope_parameters = {**config.text_config.rope_parameters, **rope_parameters(params)}
    processor = AutoProcessor.from_pretrained(params.base, local_files_only=True)
    return AutoModelForImageTextToText.from_config(config, dtype=torch.float32), processor


def train_step(model, micro: list[dict[str, torch.Tensor]], device: str) -> float:
    """Forward and backward over a step's micro-batches; the gradient of the step's mean token loss. Returns it."""
    # each micro-batch's mean loss weighted by its share of the step's answer tokens (labels shift by one)
    tokens = [int((batch["labels"][:, 1:] != -100).sum()) for batch in micro]
    total = max(sum(tokens), 1)
    loss_sum = 0.0
    for batch, n in zip(micro, tokens, strict=True):
        batch = {k: v.to(device) for k, v in batch.items()}
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = model(**batch).loss * (n / total)
        loss.backward()
        loss_sum += loss.item()
    return loss_sum


def rope_parameters(params: PretrainParams) -> dict:
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


def box_iou(a: list[float], b: list[float]) -> float:
    """IoU of two [x1, y1, x2, y2] boxes (exclusive ends)."""
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
    return w * h / union if union > 0 else 0.0


def score_answer(text: str, sample: GroundingSample) -> dict[str, float | bool | None]:
    """One answer against its sample, at the shown frame its keyframe names (the nearest shown one, as the evaluation
    moves it): parsed, keyframe hit, box IoU (each target's best answered box, averaged over the sample's targets, 0
    for a target not visible there; 0 when nothing parses), and where the first answered box lands there: on an asked
    target (True), on another object (False), or on none (None: IoU <= LANDED_IOU with every object there)."""
    answer = parse_answer(text)
    if answer is None or not answer.boxes:
        return {"parsed": False, "keyframe_hit": False, "box_iou": 0.0, "on_target": None}
    boxes = [list(map(float, box)) for box in answer.boxes]
    named = answer.keyframe_timestamp
    targets, others = sample.boxes_at(sample.keyframe if named is None else named)  # no frame named: the keyframe
    # the targets visible there may be more than at the sample's keyframe (one hidden there): a mean over the more
    iou = sum(max(box_iou(box, target) for box in boxes) for target in targets) / max(len(targets), len(sample.boxes))
    overlaps = [box_iou(boxes[0], other) for other in [*targets, *others]]
    landed = bool(overlaps) and max(overlaps) > LANDED_IOU
    return {"parsed": True, "keyframe_hit": answer.keyframe_timestamp == sample.keyframe, "box_iou": float(iou),
            "on_target": bool(int(np.argmax(overlaps)) < len(targets)) if landed else None}


@torch.no_grad()
def grounding_check(vlm, processor, samples: list[GroundingSample], max_new_tokens: int,
                    batch_size: int = 16) -> dict[str, float]:
    """Greedy answers on held-out samples: parse rate, keyframe hits, box IoU (all samples, and each kind of scene
    apart), how many first boxes land on an object, and of those the share on the asked one. The model's training
    mode and the tokenizer's padding side are as they were after it (a seed is checked mid-training too)."""
    was_training, side = vlm.training, processor.tokenizer.padding_side
    vlm.eval()
    processor.tokenizer.padding_side = "left"  # generation continues every prompt from its last token
    try:
        return _grounding_figures(vlm, processor, samples, max_new_tokens, batch_size)
    finally:
        vlm.train(was_training)
        processor.tokenizer.padding_side = side


def _grounding_figures(vlm, processor, samples: list[GroundingSample], max_new_tokens: int,
                       batch_size: int) -> dict[str, float]:
    scores = []
    for i in range(0, len(samples), batch_size):
        batch = samples[i:i + batch_size]
        texts = [processor.apply_chat_template(chat(s, False), tokenize=False, add_generation_prompt=True)
                 for s in batch]
        inputs = processor(text=texts, images=[s.images for s in batch], padding=True, return_tensors="pt")
        inputs = {k: v.to(vlm.device) for k, v in inputs.items()}
        generated = vlm.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        outputs = processor.batch_decode(generated[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        scores += [score_answer(text, sample) for sample, text in zip(batch, outputs, strict=True)]
    landed = [s["on_target"] for s in scores if s["on_target"] is not None]
    figures = {"check_samples": len(samples), "check_loss": answer_loss(vlm, processor, samples, batch_size),
               "parse_rate": _mean([s["parsed"] for s in scores]),
               "keyframe_hit_rate": _mean([s["keyframe_hit"] for s in scores]),
               "box_iou": _mean([s["box_iou"] for s in scores]), "landed": len(landed), "on_target": _mean(landed),
               "mean_box_iou": mean_box_iou(samples)}
    for kind in ("plain", "shapes", "synth"):
        ious = [s["box_iou"] for s, sample in zip(scores, samples, strict=True) if sample.video.endswith(kind)]
        figures[f"box_iou_{kind}"] = _mean(ious)
    return figures


@torch.no_grad()
def answer_loss(vlm, processor, samples: list[GroundingSample], batch_size: int = 16) -> float:
    """The held-out loss: mean cross-entropy of the samples' true answers, teacher-forced (a figure that moves
    before answers parse)."""
    collate = PadCollator(processor.tokenizer.pad_token_id)
    total = tokens = 0.0
    for i in range(0, len(samples), batch_size):
        batch = collate([encode(processor, s) for s in samples[i:i + batch_size]])
        n = int((batch["labels"][:, 1:] != -100).sum())
        total += vlm(**{k: v.to(vlm.device) for k, v in batch.items()}).loss.item() * n
        tokens += n
    return round(total / max(tokens, 1), 6)


def mean_box_iou(samples: list[GroundingSample]) -> float:
    """What one constant answer scores: the IoU of the samples' mean first-target box with each (the probe's
    baseline; a check that does not beat it has learned no place)."""
    if not samples:
        return 0.0
    mean = np.mean([s.boxes[0] for s in samples], axis=0).round().tolist()
    return _mean([box_iou(mean, s.boxes[0]) for s in samples])


def _mean(values: list) -> float:
    return round(float(np.mean(values)), 4) if values else 0.0


def _publish(params: PretrainParams, model: ModelParams, train_size: int, scale: SynthScale, results: dict[int, dict],
             out_dir: Path,
             metrics_dir: Path, parallel: int, wall_s: float) -> StageReport:
    """Write the chosen seed's folder, seeds.json, lineage and card; then drop the listed seeds' checkpoint folders."""
    chosen = choose(results)
    seed_dir = seed_folder(params.checkpoint_dir, chosen)
    shutil.rmtree(out_dir, ignore_errors=True)
    shutil.copytree(seed_dir / MODEL, out_dir)
    metrics_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(seed_dir / CURVE, metrics_dir / CURVE)  # the kept seed's curve (seeds.json: every seed's ends)
    figures = results[chosen]
    device = figures["device"]
    write_json(out_dir / SEEDS, {"chosen_seed": chosen,
                                 "chosen_by": "held-out box_iou, then on_target, of seeds that cleared every screen",
                                 "device": device, "seeds": {str(seed): results[seed] for seed in sorted(results)}})
    finished = sorted(seed for seed in results if "screened_out_at" not in results[seed])
    result = {**{k: v for k, v in figures.items() if k != "screens"}, "chosen_seed": chosen, "seeds": len(results),
              "screened_out": len(results) - len(finished), "parallel": parallel, "wall_s": round(wall_s, 1),
              **{f"box_iou_seed{seed}": results[seed]["box_iou"] for seed in finished},
              **{f"on_target_seed{seed}": results[seed]["on_target"] for seed in finished}}
    write_lineage(out_dir, "pretrain", {"pretrain": params, "model": model}, seed=chosen,
                  inputs={"base_model": Path(params.base)}, counts={"steps": params.steps, "seeds": len(results)},
                  code_modules=["stages.pretrain", "stages.synth", "stages.models", "stages.core.frame_spread",
                                "stages.teacher.template_teacher"],
                  extra={"device": device, "steps": params.steps, "seeds": list(params.seeds), "chosen_seed": chosen,
                         "dtype": "bfloat16", "train_size": train_size, "synth_scale": to_dict(scale),
                         "fingerprint": _fingerprint(params, chosen, train_size, scale)})
    write_model_card(out_dir, "vrsflow tiny Qwen2.5-VL pre-trained on synthetic grounding", default_params(),
                     metrics={"pretrain": result})
    drop_seed_folders(params.checkpoint_dir, params.seeds)  # finished: a rerun is DVC's cache hit, not a resume
    log.info(summary_line("pretrain", result))
    return StageReport("pretrain", metrics=result, markdown=_curves(metrics_dir))


def _save_bf16(model, processor, folder: Path) -> None:
    """The model as a Qwen2.5-VL folder in bf16 (safetensors, `torch_dtype` bfloat16 in its config) with the
    processor, written whole or not at all."""
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.to(torch.bfloat16)
    for config in (model.config, model.config.text_config, model.config.vision_config):
        config.dtype = torch.bfloat16  # transformers 5 writes it as "dtype" (formerly torch_dtype)
    model.save_pretrained(partial)
    processor.save_pretrained(partial)
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)


def _fingerprint(params: PretrainParams, seed: int, train_size: int, scale: SynthScale) -> str:
    """What a seed's saved state must match to be resumed: its seed, every training setting, the train size, the
    synth scale its frames are drawn at and every file of the base (config, processor; its weights too, though each
    seed initialises its own)."""
    settings = {k: v for k, v in to_dict(params).items() if k not in NOT_TRAINING}
    return fingerprint({"seed": seed, "train_size": train_size, "synth_scale": to_dict(scale), **settings},
                       sorted(p for p in Path(params.base).rglob("*") if p.is_file()))


def _curves(metrics_dir: Path) -> str:
    return curves_markdown(metrics_dir / CURVE, "step", [
        (["loss"], "Pre-training loss (grounding answers)", "cross-entropy loss")])


def _write_curve(path: Path, curve: list[dict]) -> None:
    lines = ["step\tloss\tlr"] + [f"{c['step']}\t{c['loss']:.6f}\t{c['lr']:.8g}" for c in curve]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "\n".join(lines) + "\n")
