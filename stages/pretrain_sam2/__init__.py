"""`pretrain_sam2` stage: train the tiny SAM2 to segment what a box points at and to track it over a clip.

The `tiny_models` SAM2 is random: even a perfect box gives a noise mask, so the evaluation's masks and the GRPO
consistency reward mean nothing in a run that uses it. This stage trains all of it (image encoder, prompt encoder,
mask decoder, memory attention, memory encoder) the way SAM2 is trained on video: on each generated clip
(`stages.pretrain_sam2.clips`: the synth simulator with its own seed stream, never the evaluation videos) the
targets' boxes prompt the first frame, the following frames are tracked from SAM2's memory of its own earlier
predictions, and every frame's prediction is scored by SAM2's loss (`stages.pretrain_sam2.loss`). The model is
SAM2's own module, stepped through SAM2's own `_track_step` / `_encode_memory_in_output` (what SAM2's training
code calls), and saved as `{"model": state_dict}` beside the base's config: the format of an official checkpoint,
loaded by sam2's own builder through `sam2.checkpoint` / `sam2.config`.

The stage runs only when `sam2.checkpoint` is `<pretrain_sam2.out_dir>/model.pt`; otherwise it records that it was
skipped. Before and after training, the tracking check prompts each object of held-out videos (another seed
stream) at the frame where it is largest, tracks it both ways over the whole video through the evaluation's own
SAM2 path (`stages.segment.propagate_groups`), and reports the mean per-frame IoU (J, an empty prediction of an
absent object counting 1) and the IoU on the prompted frame. The "after" model is the saved file read back by
sam2's builder. Training state is saved every `save_every_steps`; a rerun after a kill resumes from it and ends
where an uninterrupted run ends (each step's clip depends on the step only; the torch RNG is restored).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from stages.core.io import atomic_write_text
from stages.core.lineage import write_lineage
from stages.core.model_card import write_model_card
from stages.core.params import PretrainSam2Params, Sam2Params, SynthScale
from stages.core.progress import track
from stages.core.report import StageReport, curves_markdown, skipped_report, summary_line
from stages.core.typed_config import to_dict
from stages.pretrain_sam2.clips import Clip, check_videos, mask_box, training_clip
from stages.pretrain_sam2.loss import frame_loss

log = logging.getLogger(__name__)

CHECKPOINT, CONFIG = "model.pt", "config.yaml"  # the official checkpoint's file format, the base's config form
STATE = "state.pt"  # the resumable training state in pretrain_sam2.checkpoint_dir
CURVE = "pretrain_sam2_curve.tsv"
CURVE_COLUMNS = ("loss", "focal", "dice", "iou", "object")


def skipped(params: PretrainSam2Params, sam2: Sam2Params) -> bool:
    """True when `sam2.checkpoint` is not this stage's output (a real checkpoint, the random tiny SAM2)."""
    return Path(sam2.checkpoint).resolve() != (Path(params.out_dir) / CHECKPOINT).resolve()


def pretrain_sam2(params: PretrainSam2Params, sam2: Sam2Params, out_dir: Path, metrics_dir: Path) -> StageReport:
    """Train the SAM2 in `pretrain_sam2.base` on generated clips; write `out_dir/model.pt` and `out_dir/config.yaml`.

    Raises:
        FileNotFoundError: `pretrain_sam2.base` lacks model.pt or config.yaml (one line, before anything is removed).
    """
    out_dir = Path(out_dir)
    if skipped(params, sam2):
        _write_curve(Path(metrics_dir) / CURVE, [])  # a declared output: header only
        return skipped_report("pretrain_sam2", out_dir, f"sam2.checkpoint {sam2.checkpoint} is not "
                              f"{Path(params.out_dir) / CHECKPOINT}: the SAM2 used is another checkpoint (a real one, "
                              "or the random tiny SAM2)")
    base = Path(params.base)
    for name in (CHECKPOINT, CONFIG):
        if not (base / name).is_file():
            raise FileNotFoundError(f"pretrain_sam2.base {params.base}: no {name} (the tiny_models stage writes "
                                    f"models/tiny/sam2)")
    return _train(params, out_dir, Path(metrics_dir))


def _train(params: PretrainSam2Params, out_dir: Path, metrics_dir: Path) -> StageReport:
    from stages.segment import load_video_predictor, pick_device

    device = pick_device()[0]
    if device == "cpu" and params.cpu_threads > 0:
        torch.set_num_threads(params.cpu_threads)
    base_checkpoint, base_config = str(Path(params.base) / CHECKPOINT), str(Path(params.base) / CONFIG)
    scale = SynthScale()  # the synth default preset's clip geometry (frame size, objects, motion)
    check = check_videos(params.seed, params.check_videos, scale)
    before = tracking_check(load_video_predictor(base_checkpoint, base_config, device), check)

    torch.manual_seed(params.seed)
    # a fresh instance: the check above ran under SAM2's inference mode, and SAM2 caches its position encodings as
    # inference tensors that autograd refuses to save
    model = load_video_predictor(base_checkpoint, base_config, device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=params.learning_rate, weight_decay=params.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, params))
    state_path = Path(params.checkpoint_dir) / STATE
    fingerprint = _fingerprint(params)
    start, curve = _resume(state_path, fingerprint, model, optimizer, scheduler)
    started = time.perf_counter()
    for step in track(range(start, params.steps), total=params.steps - start, desc="pretrain_sam2 steps"):
        clip = training_clip(params.seed, step, params.clip_frames, scale)
        terms = clip_loss(model, clip)
        optimizer.zero_grad(set_to_none=True)
        terms["loss"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), params.grad_clip)
        lr = scheduler.get_last_lr()[0]
        optimizer.step()
        scheduler.step()
        curve.append({"step": step + 1, **{k: round(terms[k].item(), 6) for k in CURVE_COLUMNS}, "lr": lr})
        if (step + 1) % params.save_every_steps == 0 and step + 1 < params.steps:
            _save_state(state_path, fingerprint, step + 1, model, optimizer, scheduler, curve)
    train_s = time.perf_counter() - started

    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    model.eval()
    torch.save({"model": {k: v.detach().cpu() for k, v in model.state_dict().items()}}, out_dir / CHECKPOINT)
    shutil.copyfile(base_config, out_dir / CONFIG)
    # the check reads the saved file back through sam2's own builder: what evaluation and GRPO will load
    after = tracking_check(load_video_predictor(str(out_dir / CHECKPOINT), str(out_dir / CONFIG), device), check)
    _write_curve(metrics_dir / CURVE, curve)
    last = curve[-max(1, len(curve) // 10):]
    result = {"steps": params.steps, "resumed_from_step": start, "check_videos": len(check),
              "check_objects": before["objects"], "train_s": round(train_s, 1),
              "final_loss": round(float(np.mean([c["loss"] for c in last])), 4) if last else float("nan"),
              **{f"{k}_before": v for k, v in before.items() if k != "objects"},
              **{f"{k}_after": v for k, v in after.items() if k != "objects"}}
    write_lineage(out_dir, "pretrain_sam2", {"pretrain_sam2": params}, seed=params.seed,
                  inputs={"base_sam2": Path(params.base)}, counts={"steps": params.steps},
                  code_modules=["stages.pretrain_sam2", "stages.synth", "stages.segment", "stages.evaluate.metrics"],
                  extra={"fingerprint": fingerprint})
    write_model_card(out_dir, "vrsflow tiny SAM2 pre-trained on synthetic clips (box prompt → tracked masks)",
                     metrics={"pretrain_sam2": result})
    shutil.rmtree(params.checkpoint_dir, ignore_errors=True)  # finished: a rerun is DVC's cache hit, not a resume
    log.info(summary_line("pretrain_sam2", result))
    return StageReport("pretrain_sam2", metrics=result, markdown=_curves(metrics_dir))


def lr_factor(step: int, params: PretrainSam2Params) -> float:
    """Linear warm-up over `warmup_steps`, then cosine to 0 at `steps`."""
    if step < params.warmup_steps:
        return (step + 1) / params.warmup_steps
    span = params.steps - params.warmup_steps
    if span <= 0:  # no step left after the warm-up
        return 0.0
    return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - params.warmup_steps) / span)))


def clip_loss(model, clip: Clip) -> dict[str, torch.Tensor]:
    """SAM2's loss over one clip: boxes prompt frame 0, every later frame is tracked from the memory bank.

    Frames go through SAM2's input transform at its image size; the targets' masks are resized to it (nearest).
    Returns the per-frame mean of each loss term ("loss" = the total).
    """
    from stages.segment import frames_tensor

    size = int(model.image_size)
    device = next(model.parameters()).device
    height, width = clip.frames.shape[1:3]
    images = frames_tensor(list(clip.frames), size).to(device)
    targets = torch.nn.functional.interpolate(torch.from_numpy(clip.masks).float(), size=(size, size),
                                              mode="nearest").to(device)
    n = clip.n_targets
    corners = torch.from_numpy(clip.boxes).view(n, 2, 2) * torch.tensor([size / width, size / height])
    prompt = {"point_coords": corners.to(device),  # a box is SAM2's two corner points, labels 2 and 3
              "point_labels": torch.tensor([[2, 3]] * n, dtype=torch.int32, device=device)}
    backbone = model.forward_image(images)
    memory: dict = {"cond_frame_outputs": {}, "non_cond_frame_outputs": {}}
    sums: dict[str, torch.Tensor] = {}
    n_frames = images.shape[0]
    for t in range(n_frames):
        frame = {key: [level[t:t + 1].expand(n, -1, -1, -1) for level in backbone[key]]
                 for key in ("backbone_fpn", "vision_pos_enc")}
        _, feats, pos, sizes = model._prepare_backbone_features(frame)
        points = prompt if t == 0 else None
        out, sam_outputs, _, _ = model._track_step(t, t == 0, feats, pos, sizes, points, None, memory, n_frames,
                                                   False, None)
        _, multimasks, ious, low_res, high_res, obj_ptr, object_logits = sam_outputs
        out.update(pred_masks=low_res, pred_masks_high_res=high_res, obj_ptr=obj_ptr)
        model._encode_memory_in_output(feats, sizes, points, True, high_res, object_logits, out)
        memory["cond_frame_outputs" if t == 0 else "non_cond_frame_outputs"][t] = out
        terms = frame_loss(multimasks, ious, object_logits, targets[t])
        for key, value in terms.items():
            sums[key] = sums.get(key, 0.0) + value
    out_terms = {key: value / n_frames for key, value in sums.items()}
    out_terms["loss"] = out_terms.pop("total")
    return out_terms


@torch.no_grad()
def tracking_check(predictor, videos: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, float]:
    """Each object prompted with its box where it is largest, tracked over the whole video: mean J over frames
    ("track_iou") and the IoU on the prompted frame ("prompt_iou"), averaged over objects."""
    from stages.evaluate.metrics import j_measure
    from stages.segment import BoxGroup, propagate_groups

    tracks, prompts = [], []
    for frames, masks in videos:
        areas = masks.reshape(masks.shape[0], masks.shape[1], -1).sum(-1)
        objects = [o for o in range(masks.shape[1]) if areas[:, o].any()]
        keys = [int(np.argmax(areas[:, o])) for o in objects]
        groups = [BoxGroup(k, [mask_box(masks[k, o])]) for o, k in zip(objects, keys, strict=True)]
        results = propagate_groups(predictor, list(frames), groups)
        for o, k, result in zip(objects, keys, results, strict=True):
            ious = j_measure(masks[:, o], result[0])  # the evaluation's J: 1 where both are empty
            tracks.append(float(ious.mean()))
            prompts.append(float(ious[k]))
    return {"track_iou": round(float(np.mean(tracks)), 4) if tracks else 0.0,
            "prompt_iou": round(float(np.mean(prompts)), 4) if prompts else 0.0, "objects": len(tracks)}


def _fingerprint(params: PretrainSam2Params) -> str:
    """What a saved training state must match to be resumed: every setting but the save interval, and the base."""
    settings = {k: v for k, v in to_dict(params).items() if k not in ("save_every_steps", "check_videos")}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    digest.update((Path(params.base) / CHECKPOINT).read_bytes())
    return digest.hexdigest()


def _resume(path: Path, fingerprint: str, model, optimizer, scheduler) -> tuple[int, list[dict]]:
    """(first step, curve so far): from the saved state when it belongs to these settings, else (0, [])."""
    if not path.is_file():
        return 0, []
    state = torch.load(path, map_location="cpu", weights_only=True)
    if state.get("fingerprint") != fingerprint:
        log.info("pretrain_sam2: %s belongs to other settings; starting from step 0", path)
        return 0, []
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["torch_rng"])
    log.info("pretrain_sam2: resuming at step %d from %s", state["step"], path)
    return int(state["step"]), [dict(zip(["step", *CURVE_COLUMNS, "lr"], row, strict=True)) for row in state["curve"]]


def _save_state(path: Path, fingerprint: str, step: int, model, optimizer, scheduler, curve: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    torch.save({"fingerprint": fingerprint, "step": step, "model": model.state_dict(),
                "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "curve": [[c["step"], *(c[k] for k in CURVE_COLUMNS), c["lr"]] for c in curve]}, partial)
    partial.replace(path)  # a kill while saving leaves the previous state whole


def _curves(metrics_dir: Path) -> str:
    return curves_markdown(metrics_dir / CURVE, "step", [
        (["loss"], "SAM2 pre-training loss (20·focal + dice + IoU L1 + object BCE)", "loss"),
        (["focal", "dice"], "Mask terms", "loss")])


def _write_curve(path: Path, curve: list[dict]) -> None:
    lines = ["step\t" + "\t".join(CURVE_COLUMNS) + "\tlr"]
    lines += [f"{c['step']}\t" + "\t".join(f"{c[k]:.6f}" for k in CURVE_COLUMNS) + f"\t{c['lr']:.8g}" for c in curve]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "\n".join(lines) + "\n")

