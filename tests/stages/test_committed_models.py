"""The pre-trained tiny models committed to git (the frozen `pretrain_sam2`, `finetune_sam2` and `pretrain` stages'
outputs, dvc.yaml `cache: false`) are what params.yaml uses, are stored as the issue asks (bf16, at most 16 MiB a
file), and still do what their committed figures say: the SAM2 params.yaml uses (finetune_sam2's), read from git's
copy by sam2's own builder, tracks the stage's held-out videos as well as its `seeds.json` records (which stands
well above the SAM2 it was trained from); the committed base boxes the pre-training's held-out samples as its record
says.

The tracking measure is written here from its definition (per frame: |pred ∩ truth| / |pred ∪ truth|, 1 where both
are empty; averaged over the frames, then the objects), not taken from the stage."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from stages.params import load_params
from stages.params.synth import SynthScale
from stages.pretrain_sam2 import CHECK_SEED
from stages.pretrain_sam2.clips import check_videos
from stages.sam2_wrapper import BoxGroup, load_video_predictor, propagate_groups

ROOT = Path(__file__).resolve().parents[2]
PRETRAINED_SAM2 = ROOT / "models" / "pretrain_sam2"
SAM2_DIR = ROOT / "models" / "pretrain_sam2_finetuned"  # the SAM2 params.yaml uses: pretrain_sam2's, fine-tuned
SAM2_STAGES = {"pretrain_sam2": PRETRAINED_SAM2, "finetune_sam2": SAM2_DIR}
MAX_FILE_BYTES = 16 * 2**20
CHECKED_VIDEOS = 8  # the stage's held-out check: its first `pretrain_sam2.check_videos` videos (8)
# the bar: the committed SAM2's held-out J as seeds.json records it, measured again here from git's copy, may fall
# this far below it (torch's float sums on another CPU); the record itself stands above the SAM2 it was trained from
# (its `_before` figure): the pre-trained one RANDOM_BELOW above the random SAM2, the fine-tuned one BASE_BELOW above
# the pre-trained weights tracking with one mask (measured: 0.316 → 0.374 with three masks → one; 0.336 → 0.374)
MARGIN, RANDOM_BELOW, BASE_BELOW = 0.01, 0.10, 0.02


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """One torch thread: with two, a core busy elsewhere (the other test worker) makes generation and SAM2's
    propagation 25× slower (OpenMP threads waiting on each other: the base's check took 114 s instead of 4.4 s)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_params_yaml_uses_the_committed_sam2_and_dvc_keeps_its_stages_frozen() -> None:
    params = load_params(ROOT / "params.yaml")
    assert Path(params.sam2.checkpoint) == Path(params.finetune_sam2.out_dir) / "model.pt" == SAM2_DIR.relative_to(
        ROOT) / "model.pt"
    assert Path(params.sam2.config) == Path(params.finetune_sam2.out_dir) / "config.yaml"
    assert Path(params.finetune_sam2.base) == Path(params.pretrain_sam2.out_dir)  # fine-tuned from the pre-trained
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name, folder in SAM2_STAGES.items():
        # weights over 5 MB are tracked by git only as frozen pre-trained models, under models/pretrain*/
        assert folder.parent == ROOT / "models" and folder.name.startswith("pretrain"), folder
        assert stages[name]["frozen"] is True
        assert {f"${{{name}.out_dir}}": {"cache": False}} in stages[name]["outs"]
        relative = folder.relative_to(ROOT).as_posix()
        tracked = subprocess.run(["git", "ls-files", relative], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.split()
        assert {f"{relative}/{file}" for file in ("model.pt", "config.yaml", "seeds.json", "lineage.json")
                } <= set(tracked)


# pretrain settings (and pretrain.curriculum settings) the committed base's lineage predates, at their value then
BASE_ADDED_LATER = {"select_every_steps": 0, "select_samples": 48, "screen": [], "screen_samples": 48}
PHASE_ADDED_LATER = {"scene": "rectangles", "think": "sentence"}


@pytest.mark.parametrize("stage", sorted(SAM2_STAGES))
def test_the_committed_sam2_is_bf16_and_small(stage: str) -> None:
    folder = SAM2_STAGES[stage]
    for path in folder.iterdir():
        assert path.stat().st_size <= MAX_FILE_BYTES, path
    state = torch.load(folder / "model.pt", map_location="cpu", weights_only=True)["model"]
    assert {v.dtype for v in state.values() if v.is_floating_point()} == {torch.bfloat16}
    seeds = json.loads((folder / "seeds.json").read_text())
    lineage = json.loads((folder / "lineage.json").read_text())
    assert lineage["stage"] == stage
    assert lineage["extra"]["device"] == seeds["device"] and lineage["extra"]["chosen_seed"] == seeds["chosen_seed"]
    assert lineage["extra"]["steps"] == getattr(load_params(ROOT / "params.yaml"), stage).steps


def test_the_fine_tuned_sam2_was_trained_from_the_committed_pre_trained_one() -> None:
    """Lineage reaches the pre-trained SAM2 as committed now: finetune_sam2's record of its base embeds
    pretrain_sam2's lineage, which is the committed file's; its config is the base's with one mask on tracked
    frames."""
    base = json.loads((SAM2_DIR / "lineage.json").read_text())["inputs"]["base_sam2"]
    assert base["upstream"]["lineage"] == json.loads((PRETRAINED_SAM2 / "lineage.json").read_text())
    config = yaml.safe_load((SAM2_DIR / "config.yaml").read_text())
    pretrained = yaml.safe_load((PRETRAINED_SAM2 / "config.yaml").read_text())
    assert config["overrides"] == [*pretrained["overrides"], "++model.multimask_output_for_tracking=false"]


def test_the_committed_models_history_stays_within_the_repository_budget() -> None:
    """Issue 47: committing the pre-trained models grows the repository by at most 40 MB in all. Every SAM2 or base
    ever committed stays in a clone's history, so replacing a model spends the budget again."""
    from bench.model_budget import MODEL_HISTORY_BYTES, committed_model_bytes

    history = committed_model_bytes(ROOT)
    current = subprocess.run(["git", "ls-files", "-s", "models"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert any(blob in history for blob in current)  # the measure sees the models committed now
    used = sum(size for _, size in history.values())
    assert used <= MODEL_HISTORY_BYTES, f"{used / 1e6:.1f} MB of models in git (bench/model_budget.py)"


# settings added after the committed SAM2 was trained, at the value that trains as it was trained without them
ADDED_LATER = {"point_prompt_share": 0.0, "box_noise": 0.0, "correction_clicks": 0, "clips_per_step": 1,
               "min_objects": 2, "max_objects": 4, "max_targets": 0, "iou_loss_weight": 1.0}


@pytest.mark.parametrize("stage", sorted(SAM2_STAGES))
def test_params_yaml_trains_what_the_committed_sam2_was_trained_with(stage: str) -> None:
    """Unfreezing a stage and reproducing it must retrain the committed model, not another one: every training
    setting in params.yaml equals the one its lineage records (pretrain_sam2's settings added later: their off
    value), and the seeds too."""
    from stages.core.typed_config import to_dict
    from stages.pretrain_sam2 import NOT_TRAINING

    lineage = json.loads((SAM2_STAGES[stage] / "lineage.json").read_text())
    recorded = lineage["params"][stage]
    current = to_dict(getattr(load_params(ROOT / "params.yaml"), stage))
    for key, value in current.items():
        if key not in NOT_TRAINING:
            assert recorded.get(key, ADDED_LATER.get(key) if stage == "pretrain_sam2" else None) == value, key
    assert lineage["extra"]["seeds"] == list(current["seeds"])


def _track_j(predictor, videos) -> float:
    """Each object prompted with its box where it is largest, tracked alone over its video: mean J over objects.

    Objects of one video whose keyframes differ go to one `propagate_groups` call, which encodes the frames once
    and tracks each keyframe's group from a reset state: each is still tracked alone (objects of one keyframe, which
    SAM2 would batch, go to separate calls): the same J as a call per object, in about 20 % less CPU."""
    per_object = []
    for frames, masks in videos:
        calls: list[dict[int, tuple[int, list[int]]]] = []  # per call: keyframe → (object, its box)
        for o in range(masks.shape[1]):
            areas = masks[:, o].reshape(len(masks), -1).sum(1)
            if not areas.any():
                continue
            key = int(np.argmax(areas))
            ys, xs = np.nonzero(masks[key, o])
            box = [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1]
            call = next((c for c in calls if key not in c), None)
            if call is None:
                calls.append(call := {})
            call[key] = (o, box)
        for call in calls:
            groups = [BoxGroup(key, [box]) for key, (_, box) in call.items()]
            for (o, _), tracked in zip(call.values(), propagate_groups(predictor, list(frames), groups), strict=True):
                predicted = tracked[0]
                inter = np.logical_and(predicted, masks[:, o]).reshape(len(masks), -1).sum(1)
                union = np.logical_or(predicted, masks[:, o]).reshape(len(masks), -1).sum(1)
                per_object.append(float(np.mean(np.where(union > 0, inter / np.maximum(union, 1), 1.0))))
    return float(np.mean(per_object))


@pytest.fixture(scope="module")
def videos():
    return check_videos(CHECK_SEED, CHECKED_VIDEOS, SynthScale())


def test_the_committed_sam2_still_tracks_as_its_figures_say(videos) -> None:
    """The SAM2 params.yaml uses (finetune_sam2's); its base's record learned to track from the random SAM2."""
    pretrained = json.loads((PRETRAINED_SAM2 / "seeds.json").read_text())
    first = pretrained["seeds"][str(pretrained["chosen_seed"])]
    assert first["track_iou_after"] >= first["track_iou_before"] + RANDOM_BELOW  # pre-training learned to track
    seeds = json.loads((SAM2_DIR / "seeds.json").read_text())
    recorded = seeds["seeds"][str(seeds["chosen_seed"])]
    assert recorded["check_videos"] == CHECKED_VIDEOS
    assert recorded["track_iou_after"] >= recorded["track_iou_before"] + BASE_BELOW  # fine-tuning tracks better
    assert recorded["track_iou_after"] >= first["track_iou_after"] + BASE_BELOW  # than the base as it was used
    predictor = load_video_predictor(str(SAM2_DIR / "model.pt"), str(SAM2_DIR / "config.yaml"), "cpu")
    measured = _track_j(predictor, videos)
    assert measured >= recorded["track_iou_after"] - MARGIN, (measured, recorded["track_iou_after"])


VLM_DIR = ROOT / "models" / "pretrain"
VLM_MARGIN = 0.02  # the committed base's held-out box IoU, measured here again, may fall this far below its record


def test_the_default_model_is_the_committed_base_or_else_the_random_tiny_one() -> None:
    """A committed pre-trained base is what params.yaml trains from, with its stage frozen; until one is committed
    (it is trained on a GPU: docs/architecture.md), the default keeps the random tiny model and an unfrozen stage."""
    params = load_params(ROOT / "params.yaml")
    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["pretrain"]
    if (VLM_DIR / "seeds.json").is_file():
        assert Path(params.model.path) == Path(params.pretrain.out_dir) and stage["frozen"] is True
        assert {"${pretrain.out_dir}": {"cache": False}} in stage["outs"]
    else:
        assert Path(params.model.path) == Path(params.tiny_models.out_dir) / "qwen25vl"
        assert not stage.get("frozen")


def test_the_committed_base_is_bf16_small_and_in_git() -> None:
    from safetensors import safe_open

    for path in VLM_DIR.iterdir():
        assert path.stat().st_size <= MAX_FILE_BYTES, path
    with safe_open(VLM_DIR / "model.safetensors", "pt") as weights:
        assert {weights.get_slice(name).get_dtype() for name in weights.keys()} == {"BF16"}
    tracked = subprocess.run(["git", "ls-files", "models/pretrain"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert {f"models/pretrain/{name}" for name in ("model.safetensors", "config.json", "tokenizer.json",
                                                   "seeds.json", "lineage.json")} <= set(tracked)
    seeds = json.loads((VLM_DIR / "seeds.json").read_text())
    lineage = json.loads((VLM_DIR / "lineage.json").read_text())
    assert lineage["extra"]["device"] == seeds["device"] and lineage["extra"]["chosen_seed"] == seeds["chosen_seed"]


def test_params_yaml_trains_what_the_committed_base_was_trained_with() -> None:
    """Unfreezing the stage and reproducing it must retrain the committed base, not another one: every training
    setting and the seeds in params.yaml equal those its lineage records (a phase's settings added later: their
    value that keeps the old behaviour)."""
    from stages.core.typed_config import to_dict
    from stages.pretrain import NOT_TRAINING

    recorded = json.loads((VLM_DIR / "lineage.json").read_text())
    settings = {**BASE_ADDED_LATER, **recorded["params"]["pretrain"]}
    settings["curriculum"] = [{**PHASE_ADDED_LATER, **phase} for phase in settings["curriculum"]]
    current = to_dict(load_params(ROOT / "params.yaml").pretrain)
    for key, value in current.items():
        if key not in NOT_TRAINING:
            assert settings.get(key) == value, key
    assert recorded["extra"]["seeds"] == list(current["seeds"])
    assert recorded["extra"]["steps"] == current["steps"]


def _answer_ious(vlm, processor, samples, max_new_tokens: int) -> list[float]:
    """Greedy answers; per sample, the mean over its targets of the best IoU of an answered box (0 unparsed)."""
    from schemas.answer import parse_answer
    from stages.pretrain.stream import chat

    processor.tokenizer.padding_side = "left"
    texts = [processor.apply_chat_template(chat(s, False), tokenize=False, add_generation_prompt=True)
             for s in samples]
    inputs = processor(text=texts, images=[s.images for s in samples], padding=True, return_tensors="pt")
    with torch.no_grad():
        generated = vlm.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    ious = []
    for sample, text in zip(samples, processor.batch_decode(generated[:, inputs["input_ids"].shape[1]:],
                                                            skip_special_tokens=True), strict=True):
        answer = parse_answer(text)
        boxes = [list(map(float, b)) for b in answer.boxes] if answer and answer.boxes else []
        ious.append(float(np.mean([max((_iou(b, t) for b in boxes), default=0.0) for t in sample.boxes])))
    return ious


def _iou(a: list[float], b: list[float]) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
    return w * h / union if union > 0 else 0.0


@pytest.fixture(scope="module")
def base_check() -> dict:
    """The committed base, read from git's copy as SFT loads it, answering the stage's fixed held-out check stream
    (synth samples drawn at synth.<size>): each sample's box IoU, the samples, and the recorded figures."""
    if not (VLM_DIR / "seeds.json").is_file():
        pytest.skip("no pre-trained base committed yet (issue 47: it is trained on a GPU)")
    from stages.models import load_vlm
    from stages.pretrain.stream import check_samples

    params = load_params(ROOT / "params.yaml")
    seeds = json.loads((VLM_DIR / "seeds.json").read_text())
    vlm, processor = load_vlm(VLM_DIR, "float32", "cpu")
    samples = check_samples(params.pretrain, params.keyframes.train_size, params.synth.scale)
    ious = [iou for i in range(0, len(samples), 16)
            for iou in _answer_ious(vlm, processor, samples[i:i + 16], params.pretrain.max_new_tokens)]
    synth = [(iou, s.boxes[0]) for iou, s in zip(ious, samples, strict=True) if s.video.endswith("/synth")]
    return {"ious": ious, "synth_ious": [iou for iou, _ in synth], "synth_boxes": [box for _, box in synth],
            "recorded": seeds["seeds"][str(seeds["chosen_seed"])], "size": params.keyframes.train_size}


def test_the_committed_base_still_localises(base_check: dict) -> None:
    """The committed base boxes the held-out samples about as well as its seeds.json records (all of them, and the
    default's own synth frames apart), and better than one constant box for every sample."""
    recorded, ious, synth = base_check["recorded"], base_check["ious"], base_check["synth_ious"]
    assert float(np.mean(ious)) >= recorded["box_iou"] - VLM_MARGIN, (np.mean(ious), recorded["box_iou"])
    assert float(np.mean(ious)) > recorded["mean_box_iou"], "no better than one constant box"
    assert float(np.mean(synth)) >= recorded["box_iou_synth"] - VLM_MARGIN, (np.mean(synth), recorded["box_iou_synth"])


@pytest.mark.xfail(strict=True, reason="issue 61: the committed base does not ground the default's frames yet "
                   "(synth box IoU 0.046 against 0.062 for the best fixed box); strict, so a base that does "
                   "makes this fail until the marker goes")
def test_the_committed_base_grounds_the_default_frames_better_than_any_fixed_box(base_check: dict) -> None:
    """On the check's synth frames (the default's look and scale) the base's boxes beat the best single box on a
    grid given to every sample: it has looked at the frame."""
    best = _best_constant_iou(base_check["synth_boxes"], base_check["size"])
    assert float(np.mean(base_check["synth_ious"])) > best, (np.mean(base_check["synth_ious"]), best)


def _best_constant_iou(boxes: list[list[int]], size: int, step: int = 8) -> float:
    """The highest mean IoU one fixed box [x1, y1, x2, y2] on a grid of `step` pixels reaches over `boxes`."""
    grid = np.arange(0, size + 1, step)
    targets = np.array(boxes, dtype=float)
    best = 0.0
    for x1 in grid:
        for x2 in grid[grid > x1]:
            for y1 in grid:
                for y2 in grid[grid > y1]:
                    w = np.clip(np.minimum(x2, targets[:, 2]) - np.maximum(x1, targets[:, 0]), 0, None)
                    h = np.clip(np.minimum(y2, targets[:, 3]) - np.maximum(y1, targets[:, 1]), 0, None)
                    inter = w * h
                    union = (x2 - x1) * (y2 - y1) + (targets[:, 2] - targets[:, 0]) * (targets[:, 3] - targets[:, 1])
                    best = max(best, float(np.mean(inter / (union - inter))))
    return best
