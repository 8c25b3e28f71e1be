"""The oracle property, for every task and both engines' entry points (TRL `score_group`, verl `compute_score`):
the ground truth rendered as a completion parses under the task's own answer schema and earns the maximum
of every enabled component; each single corruption earns strictly less.

Ground truths are built here from literal rectangles (not by the shard code); the perfect segmenter
returns the union of the ground-truth objects whose boxes the request matches. The keyframe of these
ground truths is the largest-area frame (RCoT-Seg's rule; for Veason-R1's top-k draw the ground-truth
answer earns the drawn frame's area share instead of 1, by the paper's design).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pycocotools import mask as mask_utils

from schemas.answer import GroundTruth
from stages.params.reward import RewardParams
from stages.rewards import REGISTRY, max_score, score_group, task_components
from stages.tasks import TASKS, get_task

S = 84  # image side; thresholds stated at 840 px scale by 0.1 (box L1 1 px, point 3 px, τ_neg 4 px)
TIMESTAMPS = [0, 2, 4, 6]
PARAMS = RewardParams(components=tuple(REGISTRY))


def encode(mask: np.ndarray) -> dict:
    out = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": [int(v) for v in out["size"]], "counts": out["counts"].decode("ascii")}


@dataclass
class Case:
    """A ground truth (JSON dict) and the per-object masks of its shown frames (for the perfect segmenter)."""

    gt: dict
    objects: list[list[np.ndarray]]  # per frame, per object
    segmenter_calls: list = field(default_factory=list)  # the point prompts each segmenter call received


def rectangles(draw_boxes: list[tuple[int, int, int, int]], scale: float) -> list[np.ndarray]:
    out = []
    for x, y, w, h in draw_boxes:
        m = np.zeros((S, S), dtype=bool)
        side_w, side_h = max(2, round(w * scale)), max(2, round(h * scale))
        m[y:y + side_h, x:x + side_w] = True
        out.append(m)
    return out


def build_case(task: str, spec: list[tuple[int, int, int, int]], option: str = "A") -> Case:
    """`spec`: per object (x, y, w, h) at the keyframe (object k lives in column k, rows away from the
    bottom-right corner). Sampled views show 4 frames: sizes ×0.6, ×1, ×0.8 and absent (the keyframe is
    frame 1, the largest); single-frame views show the keyframe alone (AKS option B: an empty frame)."""
    view = get_task(task).view
    if view == "sampled":
        scales, timestamps, key = [0.6, 1.0, 0.8, 0.0], TIMESTAMPS, 2
    else:
        absent = view == "candidate" and option == "B"
        scales, timestamps, key = [0.0 if absent else 1.0], [5], 5
    frames = []
    for scale in scales:
        frames.append([np.zeros((S, S), dtype=bool)] * len(spec) if scale == 0 else rectangles(spec, scale))
    boxes, areas, unions = [], [], []
    for objs in frames:
        row_boxes, row_areas = [], []
        for m in objs:
            ys, xs = np.nonzero(m)
            row_boxes.append([float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)]
                             if len(xs) else None)
            row_areas.append(float(m.sum()))
        union = np.logical_or.reduce(objs)
        boxes.append(row_boxes)
        areas.append(row_areas)
        unions.append(union)
    key_pos = timestamps.index(key)
    points = [None if b is None else [(b[0] + b[2]) / 2, (b[1] + b[3]) / 2] for b in boxes[key_pos]]
    gt = {"timestamps": timestamps, "image_size": [S, S], "boxes": boxes, "areas": areas,
          "union_areas": [float(u.sum()) for u in unions], "masks": [encode(u) for u in unions],
          "keyframe_timestamp": key, "points": points, "aks_option": option, "difficulty": 5.0,
          "token_budget": 400, "task": task,
          "description": "Step 1: Two objects move. Step 2: The first grows. Step 3: It is on the left."}
    return Case(gt, frames)


def perfect_masks(case: Case) -> Callable:
    """SAM2 as it should be: the union of the ground-truth objects whose box at `position` a requested box
    overlaps with IoU > 0.5, at every shown frame."""
    def iou(a, b):
        w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
        h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        inter = w * h
        union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
        return inter / union if union > 0 else 0.0

    def masks_for(position, boxes, prompts=()):
        calls.append(prompts)
        chosen = {k for k, gt_box in enumerate(case.gt["boxes"][position])
                  if gt_box is not None and any(iou(gt_box, b) > 0.5 for b in boxes)}
        out = np.zeros((len(case.objects), S, S), dtype=bool)
        for t, objs in enumerate(case.objects):
            for k in chosen:
                out[t] |= objs[k]
        return out

    calls = case.segmenter_calls
    return masks_for


def payload(text: str) -> dict:
    return json.loads(text[text.index("<answer>") + 8:text.index("</answer>")])


def completion(data: dict, think: str = "The answer follows from the frames.") -> str:
    return f"<think>{think}</think><answer>{json.dumps(data)}</answer>"


# -- single corruptions: name → (applies to task?, corrupt(payload, gt) → text) --

def _set(key, value):
    return lambda d, gt: completion({**d, key: value})


def _drop(key):
    return lambda d, gt: completion({k: v for k, v in d.items() if k != key})


def _shift_box(d, gt):
    boxes = [list(b) for b in d["bbox_2d_list"]]
    boxes[0] = [S - 8, S - 8, S - 2, S - 2]  # the bottom-right corner holds no target
    return completion({**d, "bbox_2d_list": boxes})


def _smaller_frame(d, gt):
    return completion({**d, "keyframe_timestamp": 0})  # shown, target at 0.6 × the keyframe size


def _point_outside(d, gt):
    points = [list(p) for p in d["point_2d_list"]]
    box = d["bbox_2d_list"][0]
    points[0] = [box[2] + 3, box[3] + 3]
    return completion({**d, "point_2d_list": points})


def _negative(where):
    def corrupt(d, gt):
        negatives = [list(p) for p in d["negative_point_2d_list"]]
        box = d["bbox_2d_list"][0]
        negatives[0] = [(box[0] + box[2]) / 2, (box[1] + box[3]) / 2] if where == "inside" else [S - 3, S - 3]
        return completion({**d, "negative_point_2d_list": negatives})
    return corrupt


def _flip_option(d, gt):
    return completion({**d, "option": "B" if d["option"] == "A" else "A"})


def _broken_tags(d, gt):
    return completion(d).replace("</think>", "", 1)


def _extra_box(d, gt):
    extra = {"bbox_2d_list": d["bbox_2d_list"] + [[S - 8, S - 8, S - 2, S - 2]]}
    if "point_2d_list" in d:
        extra["point_2d_list"] = d["point_2d_list"] + [[S - 5, S - 5]]
    return completion({**d, **extra})


def _repeats(d, gt):
    return completion(d, think="It is there. It is there. It is there. It is there.")


CORRUPTIONS: dict[str, tuple[Callable[[set, set], bool], Callable]] = {
    "timestamp_not_shown": (lambda keys, comps: "keyframe_timestamp" in keys, _set("keyframe_timestamp", 3)),
    "timestamp_float": (lambda keys, comps: "keyframe_timestamp" in keys, _set("keyframe_timestamp", 2.0)),
    "timestamp_string": (lambda keys, comps: "keyframe_timestamp" in keys, _set("keyframe_timestamp", "2")),
    "timestamp_missing": (lambda keys, comps: "keyframe_timestamp" in keys, _drop("keyframe_timestamp")),
    "smaller_frame": (lambda keys, comps: "keyframe_timestamp" in keys, _smaller_frame),
    "box_off_target": (lambda keys, comps: "bbox_2d_list" in keys, _shift_box),
    "extra_box": (lambda keys, comps: "bbox_2d_list" in keys, _extra_box),
    "boxes_missing": (lambda keys, comps: "bbox_2d_list" in keys, _drop("bbox_2d_list")),
    "point_outside_box": (lambda keys, comps: "point_2d_list" in keys, _point_outside),
    "points_missing": (lambda keys, comps: "point_2d_list" in keys, _drop("point_2d_list")),
    "negative_far": (lambda keys, comps: "negative_point_2d_list" in keys, _negative("far")),
    "negative_inside": (lambda keys, comps: "negative_point_2d_list" in keys, _negative("inside")),
    "negatives_missing": (lambda keys, comps: "negative_point_2d_list" in keys, _drop("negative_point_2d_list")),
    "wrong_option": (lambda keys, comps: "option" in keys, _flip_option),
    "option_missing": (lambda keys, comps: "option" in keys, _drop("option")),
    "description_empty": (lambda keys, comps: "description" in keys, _set("description", " ")),
    "description_missing": (lambda keys, comps: "description" in keys, _drop("description")),
    "broken_tags": (lambda keys, comps: True, _broken_tags),
    "extra_key": (lambda keys, comps: True, _set("note", 1)),
    "repeated_sentences": (lambda keys, comps: "non_repeat" in comps, _repeats),
}


def entry_scores(texts: list[str], case: Case, params: RewardParams, entry: str, tmp_path, monkeypatch) -> list[dict]:
    """Scores through one engine's entry point with the perfect segmenter plugged where that engine gets SAM2."""
    gt_json = json.dumps(case.gt)
    if entry == "trl":
        from stages.rewards import score as score_module

        monkeypatch.setattr(score_module, "precompute_masks", lambda *a, **k: perfect_masks(case))
        return score_group(texts, gt_json, params, frames=[np.zeros((S, S, 3), np.uint8)], predictor=object())
    import yaml

    from stages.core.typed_config import to_dict
    from stages.rewards import sam2_service, verl_entry
    from stages.rewards.score import _params_from

    path = tmp_path / "params.yaml"
    if not path.exists():
        path.write_text(yaml.safe_dump({"reward": to_dict(params)}))
        _params_from.cache_clear()
    monkeypatch.setattr(sam2_service, "ray_masks_for", lambda name, sid: perfect_masks(case))
    return [verl_entry.compute_score("vrsflow/revos", t, gt_json, {"sample_id": "s0"}, params_path=str(path),
                                     sam2_service="vrsflow-sam2", log_dir="") for t in texts]


SPEC = st.lists(st.tuples(st.integers(2, 14), st.integers(2, 30), st.integers(8, 22), st.integers(8, 22)),
                min_size=1, max_size=2)


def place(spec: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
    """Object k in column k (x offset 40 px per object) so objects never overlap or reach the corner."""
    return [(x + 40 * k, y, w, h) for k, (x, y, w, h) in enumerate(spec)]


@pytest.mark.parametrize("entry", ["trl", "verl"])
@pytest.mark.parametrize("task_name", sorted(TASKS))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(spec=SPEC, option=st.sampled_from(["A", "B"]))
def test_oracle_property(task_name, entry, spec, option, tmp_path, monkeypatch):
    task = get_task(task_name)
    case = build_case(task_name, place(spec), option)
    oracle = task.oracle(GroundTruth.from_json(case.gt))
    assert task.parse(oracle) is not None, oracle
    keys, comps = set(task.schema.keys), set(task_components(task, PARAMS))
    corrupt = {name: fn(payload(oracle), case.gt) for name, (applies, fn) in CORRUPTIONS.items()
               if applies(keys, comps)}
    texts = [oracle, *corrupt.values()]
    results = entry_scores(texts, case, PARAMS, entry, tmp_path, monkeypatch)
    best = results[0]
    assert best["parsed"] == 1.0
    for name in comps:
        assert best[name] == 1.0, (task_name, name, best)
    assert best["score"] == pytest.approx(max_score(PARAMS, task))
    for (name, text), result in zip(corrupt.items(), results[1:], strict=True):
        assert result["score"] < best["score"], (task_name, name, text, result)
    if "consistency" in comps and "point_2d_list" in keys:
        # VideoSeg-R1: the oracle's positive and negative points reach SAM2 with its boxes
        first = case.segmenter_calls[0]
        assert len(first) == len(spec) and all(p[0][2] == 1 and any(q[2] == 0 for q in p) for p in first), first


def test_every_task_has_corruptions_and_enabled_components():
    for task in TASKS.values():
        comps = set(task_components(task, PARAMS))
        assert "format" in comps and len(comps) >= 1
        named = [n for n, (applies, _) in CORRUPTIONS.items() if applies(set(task.schema.keys), comps)]
        assert len(named) >= 4, (task.name, named)


def test_aks_weights_are_the_papers():
    # RCoT-Seg: λ_f = 1, λ_a = 2 — the perfect AKS answer is worth 3, a wrong option only its format 1
    case = build_case("rcot_aks", place([(5, 5, 12, 12)]), "B")
    texts = [completion({"option": "B"}), completion({"option": "A"})]
    params = replace(PARAMS, components=("format", "aks_option"))
    best, wrong = score_group(texts, json.dumps(case.gt), params)
    assert (best["score"], wrong["score"]) == (3.0, 1.0)
