"""`pretrain_sam2` stage: train the tiny SAM2 to segment what a box points at and to track it over a clip.

The `tiny_models` SAM2 is random: even a perfect box gives a noise mask, so the evaluation's masks and the GRPO
consistency reward mean nothing in a run that uses it. This stage trains all of it (image encoder, prompt encoder,
mask decoder, memory attention, memory encoder) the way SAM2 is trained on video: on each generated clip
(`stages.pretrain_sam2.clips`: the synth simulator with its own seed stream, never the evaluation videos) the
targets are prompted on the first frame — by their boxes, or, as SAM2's training mixes them, by a click each, with
correction clicks where the mask is wrong (`pretrain_sam2.point_prompt_share`, `box_noise`, `correction_clicks`) —
the following frames are tracked from SAM2's memory of its own earlier predictions, and every prediction is scored
by SAM2's loss (`stages.pretrain_sam2.loss`). The model is
SAM2's own module, stepped through SAM2's own `_track_step` / `_encode_memory_in_output` (what SAM2's training
code calls), and saved as `{"model": state_dict}` beside the base's config: the format of an official checkpoint,
loaded by sam2's own builder through `sam2.checkpoint` / `sam2.config`.

The stage runs only when `sam2.checkpoint` is `<pretrain_sam2.out_dir>/model.pt`; otherwise it records that it was
skipped. Before and after training, the tracking check prompts each object of held-out videos (another seed
stream) at the frame where it is largest, tracks it both ways over the whole video through the evaluation's own
SAM2 path (`stages.sam2_wrapper.propagate_groups`), and reports the mean per-frame IoU (J, an empty prediction of an
absent object counting 1) and the IoU on the prompted frame. The "after" model is the saved file read back by
sam2's builder. Training state is saved every `save_every_steps`; a rerun after a kill resumes from it and ends
where an uninterrupted run ends (each step's clip depends on the step only; the torch RNG is restored).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from stages.core.io import atomic_write_text, derive_seed, write_json
from stages.core.lineage import write_lineage
from stages.core.model_card import write_model_card
from stages.core.progress import track
from stages.core.report import StageReport, curves_markdown, skipped_report, summary_line
from stages.core.typed_config import to_dict
from stages.models.seed_runs import (
    best_seed,
    describe_device,
    drop_seed_folders,
    parallel_seeds,
    run_seeds,
    seed_folder,
)
from stages.models.train_state import fingerprint, load_state, warmup_cosine
from stages.models.train_state import save_state as _save_state
from stages.params import default_params
from stages.params.pretrain_sam2 import PretrainSam2Params
from stages.params.sam2 import Sam2Params
from stages.params.synth import SynthScale
from stages.pretrain_sam2.clips import Clip, check_videos, mask_box, training_clip
from stages.pretrain_sam2.loss import IOU, frame_loss

log = logging.getLogger(__name__)

CHECKPOINT, CONFIG = "model.pt", "config.yaml"  # the official checkpoint's file format, the base's config form
STATE = "state.pt"  # a seed's resumable training state in pretrain_sam2.checkpoint_dir/seed-<k>
RESULT = "result.json"  # a finished seed's figures (beside its bf16 model.pt), kept until the stage publishes
SEEDS = "seeds.json"  # every seed's figures and the one kept, in out_dir
CHECK_SEED = 0  # the held-out videos' stream: the same for every training seed, so that seeds compare on one check
# settings that do not change what a seed trains (where and how often it saves, what is checked, which seeds run)
NOT_TRAINING = ("save_every_steps", "check_videos", "seeds", "parallel", "checkpoint_dir", "out_dir")
BOX_NOISE_BOUND = 20.0  # the most a jittered box corner moves, in input pixels (SAM2's sample_box_points)


def curve_file(stage: str) -> str:
    """The loss curve a SAM2 training stage writes to metrics/ (and each seed to its folder)."""
    return f"{stage}_curve.tsv"


CURVE = curve_file("pretrain_sam2")
CURVE_COLUMNS = ("loss", "focal", "dice", "iou", "object")
CURVE_KEYS = ("step", *CURVE_COLUMNS, "lr")  # a curve row, as the saved state keeps it


def uses(out_dir: str | Path, sam2: Sam2Params) -> bool:
    """True when `sam2.checkpoint` is the checkpoint in `out_dir`."""
    return Path(sam2.checkpoint).resolve() == (Path(out_dir) / CHECKPOINT).resolve()


def skipped(params: PretrainSam2Params, sam2: Sam2Params, finetune: PretrainSam2Params | None = None) -> bool:
    """True when the SAM2 used is not this stage's output, directly (`sam2.checkpoint` in `out_dir`) or through
    the `finetune_sam2` stage started from it (`sam2.checkpoint` in its out_dir, its base this out_dir): a real
    checkpoint, the random tiny SAM2."""
    if uses(params.out_dir, sam2):
        return False
    return not (finetune is not None and uses(finetune.out_dir, sam2)
                and Path(finetune.base).resolve() == Path(params.out_dir).resolve())


def check_base(stage: str, base: str | Path, made_by: str) -> None:
    """Raise FileNotFoundError (one line) when the SAM2 folder `base` lacks model.pt or config.yaml."""
    for name in (CHECKPOINT, CONFIG):
        if not (Path(base) / name).is_file():
            raise FileNotFoundError(f"{stage}.base {base}: no {name} ({made_by})")


def pretrain_sam2(params: PretrainSam2Params, sam2: Sam2Params, out_dir: Path, metrics_dir: Path,
                  finetune: PretrainSam2Params | None = None) -> StageReport:
    """Train the SAM2 in `pretrain_sam2.base` once per seed on generated clips; write the best seed's
    `out_dir/model.pt` (bf16) and `out_dir/config.yaml`, with every seed's figures in `out_dir/seeds.json`.
    `finetune` (the finetune_sam2 block) only decides whether the stage runs (`skipped`).

    Raises:
        FileNotFoundError: `pretrain_sam2.base` lacks model.pt or config.yaml (one line, before anything is removed).
        SeedFailed: a seed's process failed (it has printed why); the finished seeds' results are kept for a rerun.
    """
    out_dir = Path(out_dir)
    if skipped(params, sam2, finetune):
        write_curve(Path(metrics_dir) / CURVE, [])  # a declared output: header only
        return skipped_report("pretrain_sam2", out_dir, f"sam2.checkpoint {sam2.checkpoint} is not "
                              f"{Path(params.out_dir) / CHECKPOINT} nor fine-tuned from it: the SAM2 used is another "
                              "checkpoint (a real one, or the random tiny SAM2)")
    check_base("pretrain_sam2", params.base, "the tiny_models stage writes models/tiny/sam2")
    return train_and_publish("pretrain_sam2", params, out_dir, Path(metrics_dir),
                             title="vrsflow tiny SAM2 pre-trained on synthetic clips (box prompt → tracked masks)",
                             code_modules=["stages.pretrain_sam2"])


def train_and_publish(stage: str, params: PretrainSam2Params, out_dir: Path, metrics_dir: Path, *, title: str,
                      code_modules: list[str], architecture: tuple[str, ...] = ()) -> StageReport:
    """Train every seed of `params` (a process each when `parallel` > 1: `python -m stages.<stage> --job JOB`),
    then publish the kept one (`_publish`). `architecture`: Hydra overrides added to the base's config for the
    model trained and published (its seed processes derive them from their params block the same way)."""
    started = time.perf_counter()
    parallel = parallel_seeds(params.parallel, len(params.seeds), torch.cuda.is_available())
    if parallel > 1:
        results = run_seeds(stage, f"stages.{stage}",
                            {seed: {stage: to_dict(params), "seed": seed} for seed in params.seeds}, parallel)
    else:  # one after another in this process
        results = {seed: train_seed(params, seed, stage, architecture) for seed in params.seeds}
    return _publish(stage, params, results, out_dir, metrics_dir, parallel, time.perf_counter() - started,
                    title=title, code_modules=code_modules, architecture=architecture)


def choose(results: dict[int, dict]) -> int:
    """The seed kept: the best held-out tracking J, then the best prompted-frame IoU (lowest seed of a tie)."""
    return best_seed(results, lambda figures: (figures["track_iou_after"], figures["prompt_iou_after"]))


def _publish(stage: str, params: PretrainSam2Params, results: dict[int, dict], out_dir: Path, metrics_dir: Path,
             parallel: int, wall_s: float, *, title: str, code_modules: list[str],
             architecture: tuple[str, ...] = ()) -> StageReport:
    """Write the chosen seed's checkpoint and config (the base's, with the stage's overrides), seeds.json, lineage
    and card; then drop the listed seeds' states."""
    chosen = choose(results)
    seed_dir = seed_folder(params.checkpoint_dir, chosen)
    curve = curve_file(stage)
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    shutil.copyfile(seed_dir / CHECKPOINT, out_dir / CHECKPOINT)
    shutil.copyfile(seed_dir / CONFIG, out_dir / CONFIG)
    metrics_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(seed_dir / curve, metrics_dir / curve)  # the kept seed's curve (seeds.json: every seed's ends)
    figures = results[chosen]
    device = figures["device"]
    seeds = {"chosen_seed": chosen, "chosen_by": "held-out tracking J (track_iou_after), then prompt_iou_after",
             "device": device, "seeds": {str(seed): results[seed] for seed in sorted(results)}}
    write_json(out_dir / SEEDS, seeds)
    result = {**{k: v for k, v in figures.items() if k != "device"}, "chosen_seed": chosen,
              "seeds": len(results), "parallel": parallel, "wall_s": round(wall_s, 1),
              **{f"track_iou_after_seed{seed}": results[seed]["track_iou_after"] for seed in sorted(results)}}
    write_lineage(out_dir, stage, {stage: params}, seed=chosen,
                  inputs={"base_sam2": Path(params.base)}, counts={"steps": params.steps, "seeds": len(results)},
                  code_modules=[*code_modules, "stages.synth", "stages.sam2_wrapper", "stages.evaluate.metrics"],
                  extra={"device": device, "steps": params.steps, "seeds": list(params.seeds), "chosen_seed": chosen,
                         "dtype": "bfloat16", "fingerprint": _fingerprint(params, chosen, architecture)})
    write_model_card(out_dir, title, default_params(), metrics={stage: result})
    drop_seed_folders(params.checkpoint_dir, params.seeds)  # finished: a rerun is DVC's cache hit, not a resume
    log.info(summary_line(stage, result))
    return StageReport(stage, metrics=result, markdown=_curves(metrics_dir / curve, stage))


def train_seed(params: PretrainSam2Params, seed: int, stage: str = "pretrain_sam2",
               architecture: tuple[str, ...] = ()) -> dict:
    """Train one seed to `params.steps` (resuming its saved state); return its figures, from its bf16 checkpoint
    read back through sam2's builder. A seed that finished earlier under the same settings is not trained again.
    The model is the base's weights built from the base's config with the Hydra overrides `architecture` added
    (`training_config`: the seed folder's config.yaml, published with the weights)."""
    from stages.sam2_wrapper import load_video_predictor, pick_device

    seed_dir = seed_folder(params.checkpoint_dir, seed)
    state_key = _fingerprint(params, seed, architecture)
    training_config(Path(params.base) / CONFIG, architecture, seed_dir / CONFIG)
    done = seed_dir / RESULT
    if done.is_file() and (record := json.loads(done.read_text())).get("fingerprint") == state_key:
        log.info("%s: seed %d finished earlier (%s)", stage, seed, done)
        return record["figures"]
    device = pick_device()[0]
    if device == "cpu" and params.cpu_threads > 0:
        torch.set_num_threads(params.cpu_threads)
    base_checkpoint, base_config = str(Path(params.base) / CHECKPOINT), str(seed_dir / CONFIG)
    scale = SynthScale()  # the synth default preset's clip geometry (frame size, objects, motion)
    check = check_videos(CHECK_SEED, params.check_videos, scale)
    before = tracking_check(load_video_predictor(base_checkpoint, base_config, device), check)

    torch.manual_seed(seed)
    # a fresh instance: the check above ran under SAM2's inference mode, and SAM2 caches its position encodings as
    # inference tensors that autograd refuses to save
    model = load_video_predictor(base_checkpoint, base_config, device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=params.learning_rate, weight_decay=params.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_cosine(step, params.warmup_steps, params.steps))
    state_path = seed_dir / STATE
    start, curve, earlier_s = load_state(state_path, state_key, model, optimizer, scheduler, CURVE_KEYS)
    started = time.perf_counter()
    for step in track(range(start, params.steps), total=params.steps - start, desc=f"{stage} seed {seed}"):
        clips = step_clips(params, seed, step, scale)
        terms = clip_loss(model, clips, prompt_kind(seed, step, params.point_prompt_share), params.box_noise,
                          params.correction_clicks, params.iou_loss_weight)
        optimizer.zero_grad(set_to_none=True)
        terms["loss"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), params.grad_clip)
        lr = scheduler.get_last_lr()[0]
        optimizer.step()
        scheduler.step()
        curve.append({"step": step + 1, **{k: round(terms[k].item(), 6) for k in CURVE_COLUMNS}, "lr": lr})
        if (step + 1) % params.save_every_steps == 0 and step + 1 < params.steps:
            _save_state(state_path, state_key, step + 1, model, optimizer, scheduler, curve, CURVE_KEYS,
                        earlier_s + time.perf_counter() - started)
    sitting_s = time.perf_counter() - started  # this sitting's; train_s adds the sittings before a resume

    model.eval()
    _save_bf16(model, seed_dir / CHECKPOINT)
    # the check reads the saved file back through sam2's own builder: what evaluation and GRPO will load
    after = tracking_check(load_video_predictor(str(seed_dir / CHECKPOINT), base_config, device), check)
    write_curve(seed_dir / curve_file(stage), curve)
    last = curve[-max(1, len(curve) // 10):]
    first = curve[:max(1, len(curve) // 10)]
    figures = {"seed": seed, "steps": params.steps, "resumed_from_step": start, "check_videos": len(check),
               "check_objects": before["objects"], "train_s": round(earlier_s + sitting_s, 1),
               "steps_per_s": round((params.steps - start) / sitting_s, 3) if sitting_s > 0 else 0.0,
               "device": describe_device(device),
               "loss_first_tenth": round(float(np.mean([c["loss"] for c in first])), 4) if first else float("nan"),
               "final_loss": round(float(np.mean([c["loss"] for c in last])), 4) if last else float("nan"),
               **{f"{k}_before": v for k, v in before.items() if k != "objects"},
               **{f"{k}_after": v for k, v in after.items() if k != "objects"}}
    write_json(done, {"fingerprint": state_key, "figures": figures})
    state_path.unlink(missing_ok=True)
    return figures


def training_config(base_config: Path, architecture: tuple[str, ...], path: Path) -> None:
    """Write the config of the model trained to `path`: the base's file as it is, or, with Hydra overrides
    `architecture`, the base's overrides followed by these (as tiny_models puts its own after the package config's).
    An override may change how the model runs (`++model.multimask_output_for_tracking=false`), not a weight's shape:
    the base's checkpoint must still load."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not architecture:
        shutil.copyfile(base_config, path)
        return
    config = yaml.safe_load(Path(base_config).read_text())
    config["overrides"] = [*config.get("overrides", []), *architecture]
    atomic_write_text(path, yaml.safe_dump(config, sort_keys=False))


def step_clips(params: PretrainSam2Params, seed: int, step: int, scale: SynthScale) -> list[Clip]:
    """The clips of optimizer step `step`: training clips step·k … step·k + k − 1 (k = clips_per_step), so every
    clip of the stream is shown once and one clip per step is the stream it always was. Their scenes have the
    geometry of `scale` and `pretrain_sam2.min_objects`–`max_objects` objects, `max_targets` of them targets."""
    k = params.clips_per_step
    scene = dataclasses.replace(scale, min_objects=params.min_objects, max_objects=params.max_objects)
    return [training_clip(seed, step * k + i, params.clip_frames, scene, k > 1, params.max_targets) for i in range(k)]


def _save_bf16(model, path: Path) -> None:
    """`{"model": state_dict}` with floating tensors in bf16 (half the bytes; sam2's builder loads it into any
    dtype), written whole or not at all."""
    state = {k: (v.detach().to("cpu", torch.bfloat16) if v.is_floating_point() else v.detach().cpu())
             for k, v in model.state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    torch.save({"model": state}, partial)
    partial.replace(path)


def prompt_kind(seed: int, step: int, point_prompt_share: float) -> str:
    """How step `step`'s clip is prompted, "click" or "box": drawn from a stream of its own,
    derive_seed(seed, "pretrain_sam2", "prompt", step), so the clips themselves do not change with the share."""
    rng = np.random.default_rng(derive_seed(seed, "pretrain_sam2", "prompt", step))
    return "click" if rng.random() < point_prompt_share else "box"


def clip_prompt(first_masks: torch.Tensor, boxes: torch.Tensor, kind: str, box_noise: float) -> dict[str, torch.Tensor]:
    """SAM2's point inputs for the targets on the prompted frame, at the model's input size: one click drawn
    uniformly inside each mask ((N, H, W); SAM2's own sampler, label 1), or each box ((N, 4) x1, y1, x2, y2 with
    exclusive ends, as the evaluation prompts) as two corner points (labels 2 and 3), each corner coordinate moved
    by up to `box_noise` of the box's side and at most 20 px (SAM2's box jitter; 0 leaves the box as it is). Both
    draw from the torch RNG, which a resumed run restores."""
    from sam2.modeling.sam2_utils import get_next_point

    if kind == "click":
        clicks, labels = get_next_point(gt_masks=first_masks[:, None].bool(), pred_masks=None, method="uniform")
        return {"point_coords": clicks, "point_labels": labels.to(torch.int32)}
    if kind != "box":
        raise ValueError(f"pretrain_sam2: unknown prompt kind {kind!r} (click or box)")
    corners = boxes.clone().float()
    if box_noise > 0:
        sides = (corners[:, 2:] - corners[:, :2]).repeat(1, 2)  # w, h, w, h
        reach = torch.clamp(sides * box_noise, max=BOX_NOISE_BOUND)
        corners = corners + (2 * torch.rand(corners.shape) - 1).to(corners.device) * reach
        size = torch.tensor(first_masks.shape[-1:-3:-1] * 2, dtype=corners.dtype, device=corners.device)
        corners = torch.minimum(corners.clamp(min=0), size)
    return {"point_coords": corners.view(-1, 2, 2),
            "point_labels": torch.tensor([[2, 3]] * len(corners), dtype=torch.int32, device=corners.device)}


def correction_click(model, points: dict[str, torch.Tensor], first_masks: torch.Tensor, previous: tuple,
                     pix_feat: torch.Tensor, high_res_features: list[torch.Tensor], passes: list) -> dict:
    """One of SAM2's training corrections on the prompted frame: a click drawn where the last pass is wrong
    (positive in a missed pixel, negative in a wrong one: SAM2's `get_next_point`), added to the prompt, and the
    mask heads run again on the same frame features with the last pass's mask logits as the mask input. The new
    pass is appended to `passes`; returns the grown prompt."""
    from sam2.modeling.sam2_utils import get_next_point
    from sam2.utils.misc import concat_points

    low_res, high_res = previous[3], previous[4]
    clicks, labels = get_next_point(gt_masks=first_masks[:, None].bool(), pred_masks=high_res > 0, method="uniform")
    points = concat_points(points, clicks, labels.to(torch.int32))
    passes.append(model._forward_sam_heads(backbone_features=pix_feat, point_inputs=points, mask_inputs=low_res,
                                           high_res_features=high_res_features,
                                           multimask_output=model._use_multimask(True, points)))
    return points


def clip_loss(model, clip: Clip | list[Clip], prompt_kind: str = "box", box_noise: float = 0.0,
              corrections: int = 0, iou_weight: float = IOU) -> dict[str, torch.Tensor]:
    """SAM2's loss over one clip, or over clips of one frame count whose targets form one batch (each object
    reads its own clip's frames, as SAM2's multi-object tracking reads one video's): the targets are prompted on
    frame 0 (`clip_prompt`: a click each, which SAM2 answers with three candidate masks, or a box each, answered
    with one) and corrected there with `corrections` clicks one after another (`correction_click`); every later
    frame is tracked from the memory bank.

    Frames go through SAM2's input transform at its image size; the targets' masks are resized to it (nearest).
    Returns each loss term summed over a frame's passes, averaged over the frames ("loss" = the total); the mask
    terms average over the present targets of all the clips, the object term over all their targets.
    """
    from stages.sam2_wrapper import frames_tensor

    clips = [clip] if isinstance(clip, Clip) else list(clip)
    n_frames = clips[0].frames.shape[0]
    if any(c.frames.shape[0] != n_frames for c in clips):
        raise ValueError(f"clip_loss: clips batched together need one frame count, got "
                         f"{[c.frames.shape[0] for c in clips]}")
    size = int(model.image_size)
    device = next(model.parameters()).device
    images = torch.cat([frames_tensor(list(c.frames), size) for c in clips]).to(device)  # clip-major: c·T + t
    targets = torch.cat([torch.nn.functional.interpolate(torch.from_numpy(c.masks).float(), size=(size, size),
                                                         mode="nearest") for c in clips], dim=1).to(device)
    n = sum(c.n_targets for c in clips)
    boxes = torch.cat([torch.from_numpy(c.boxes) * torch.tensor([size / c.frames.shape[2], size / c.frames.shape[1]]
                                                                 * 2) for c in clips])
    prompt = clip_prompt(targets[0], boxes.to(device), prompt_kind, box_noise)
    backbone = model.forward_image(images)
    # each target's clip, as an index into the clip-major frames (one clip: SAM2's own expand of its frame)
    owner = torch.tensor([i for i, c in enumerate(clips) for _ in range(c.n_targets)], device=device) * n_frames
    memory: dict = {"cond_frame_outputs": {}, "non_cond_frame_outputs": {}}
    sums: dict[str, torch.Tensor] = {}
    for t in range(n_frames):
        frame = {key: [level[t:t + 1].expand(n, -1, -1, -1) if len(clips) == 1 else level[owner + t]
                       for level in backbone[key]] for key in ("backbone_fpn", "vision_pos_enc")}
        _, feats, pos, sizes = model._prepare_backbone_features(frame)
        points = prompt if t == 0 else None
        out, sam_outputs, high_res_features, pix_feat = model._track_step(
            t, t == 0, feats, pos, sizes, points, None, memory, n_frames, False, None)
        passes = [sam_outputs]
        for _ in range(corrections if t == 0 else 0):
            points = correction_click(model, points, targets[0], passes[-1], pix_feat, high_res_features, passes)
        _, _, _, low_res, high_res, obj_ptr, object_logits = passes[-1]
        out.update(pred_masks=low_res, pred_masks_high_res=high_res, obj_ptr=obj_ptr)
        model._encode_memory_in_output(feats, sizes, points, True, high_res, object_logits, out)
        memory["cond_frame_outputs" if t == 0 else "non_cond_frame_outputs"][t] = out
        for _, multimasks, ious, *_, object_logits in passes:  # SAM2 sums the loss over a frame's passes
            for key, value in frame_loss(multimasks, ious, object_logits, targets[t], iou_weight).items():
                sums[key] = sums.get(key, 0.0) + value
    out_terms = {key: value / n_frames for key, value in sums.items()}
    out_terms["loss"] = out_terms.pop("total")
    return out_terms


@torch.no_grad()
def tracking_check(predictor, videos: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, float]:
    """Each object prompted with its box where it is largest, tracked over the whole video: mean J over frames
    ("track_iou") and the IoU on the prompted frame ("prompt_iou"), averaged over objects."""
    from stages.evaluate.metrics import j_measure
    from stages.sam2_wrapper import BoxGroup, propagate_groups

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


def _fingerprint(params: PretrainSam2Params, seed: int, architecture: tuple[str, ...] = ()) -> str:
    """What a seed's saved state must match to be resumed: its seed, every training setting, and the base — its
    weights, its config and the overrides added to it (the architecture: an override such as tracking with one mask
    changes the model trained without changing a weight)."""
    settings = {k: v for k, v in to_dict(params).items() if k not in NOT_TRAINING}
    if architecture:  # absent without overrides: the fingerprint the committed pretrain_sam2 lineage records
        settings["architecture"] = list(architecture)
    return fingerprint({"seed": seed, **settings}, [Path(params.base) / CHECKPOINT, Path(params.base) / CONFIG])


def _curves(curve: Path, stage: str) -> str:
    return curves_markdown(curve, "step", [
        (["loss"], f"SAM2 {stage} loss (20·focal + dice + IoU L1 + object BCE)", "loss"),
        (["focal", "dice"], "Mask terms", "loss")])


def write_curve(path: Path, curve: list[dict]) -> None:
    lines = ["step\t" + "\t".join(CURVE_COLUMNS) + "\tlr"]
    lines += [f"{c['step']}\t" + "\t".join(f"{c[k]:.6f}" for k in CURVE_COLUMNS) + f"\t{c['lr']:.8g}" for c in curve]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "\n".join(lines) + "\n")

