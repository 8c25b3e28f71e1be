"""The hostile-geometry profile through the whole pipeline (ingest → … → evaluate), with the openai teacher
against the fake server and with the template teacher; and the cot stage on the default data at three
teacher image sizes. Slow: a DVC repository each, every stage a process of its own.

Every case of stages/synth/hostile.py must come out of the pipeline somewhere: each expression in the
outputs of the stages its pool reaches, or in a quarantine table whose one-line reason names it.
"""

from __future__ import annotations

import base64
import io
import json
import math
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from PIL import Image

from tests.fake_openai import FakeOpenAI
from tests.pipeline_repo import make_repo, sh

pytestmark = pytest.mark.slow

OPENAI = {"teacher.backend": "openai", "teacher.api_key_required": False, "teacher.model": "fake-vlm",
          "teacher.max_retries": 1, "teacher.timeout_s": 60.0, "difficulty.backend": "mllm"}


def _repro(repo: Path, *targets: str) -> str:
    return sh([sys.executable, "-m", "flows.cli", "repro", *targets], repo, timeout=1800)


def _set_params(repo: Path, overrides: dict[str, object]) -> None:
    params = yaml.safe_load((repo / "params.yaml").read_text())
    for dotted, value in overrides.items():
        node = params
        *parents, last = dotted.split(".")
        for key in parents:
            node = node[key]
        node[last] = value
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


class TracingTeacher(FakeOpenAI):
    """The fake server answering as a teacher that follows the instruction: three steps naming the keyframe
    it was given (the fake's fixed reply names none, so the filter would reject every trace)."""

    def answer(self, messages) -> str:
        content = messages[0]["content"]
        text = content[-1]["text"] if isinstance(content, list) else content
        found = re.search(r"Keyframe: (\d+)s", text)
        if found is None:
            return super().answer(messages)
        t = found.group(1)
        return (f"Step 1: The frames show a plain grey scene and the objects in it.\nStep 2: The keyframe at {t}s "
                f"is chosen because the target is clearest there.\nStep 3: At {t}s the target is the one the "
                "expression describes.")


@pytest.fixture(scope="module")
def server():
    with TracingTeacher() as fake:
        yield fake


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory, project_root: Path, prefect_api: str,
            server: FakeOpenAI) -> Path:
    """The hostile-geometry profile reproduced up to evaluate with the openai teacher (the fake server)."""
    repo = make_repo(project_root, tmp_path_factory.mktemp("hostile") / "repo", profile="hostile-geometry",
                     params_overrides={**OPENAI, "teacher.base_url": server.base_url})
    _repro(repo, "tiny_models")  # the frozen pretrain stage names its output as a dependency
    _repro(repo, "evaluate")
    return repo


def _expressions(repo: Path) -> pd.DataFrame:
    """Every expression of the raw data (oracle: read from the meta files with json only)."""
    rows = []
    for split in ("train", "valid"):
        meta = json.loads((repo / f"data/raw/synth/meta_expressions_{split}_.json").read_text())["videos"]
        for video, entry in meta.items():
            for exp_id, e in entry["expressions"].items():
                rows.append({"split": split, "video": video, "expression_id": f"{video}#{exp_id}", "text": e["exp"],
                             "case": e["exp"].split(":")[0], "targets": len(e["anno_id"])})
    return pd.DataFrame(rows)


def _quarantined(repo: Path) -> dict[str, str]:
    """expression_id → reason, over every quarantine table (a reason names the expression or its video)."""
    out = {}
    for path in sorted((repo / "data").rglob("quarantine.parquet")):
        for reason in pd.read_parquet(path)["reason"]:
            assert "\n" not in reason and reason.strip(), (path, reason)  # one line, said
            out[reason.split(":")[0]] = reason
    return out


def test_every_hostile_case_is_in_the_outputs_or_quarantined_with_its_reason(hostile: Path) -> None:
    expressions = _expressions(hostile)
    assert {"sliver-left", "sliver-right", "sliver-top", "sliver-bottom", "one-pixel", "one-pixel-corner",
            "leave-reenter", "absent-everywhere", "absent-in-sampled-frames", "touching-both", "overlapping-both",
            "tiny-frame"} <= set(expressions["case"])
    quarantined = _quarantined(hostile)
    keyframes = pd.concat([pd.read_parquet(hostile / f"data/keyframes/{p}.parquet") for p in ("sft", "grpo", "eval")])
    generations = pd.read_parquet(hostile / "data/cot/generations.parquet")
    traced = set(keyframes.loc[keyframes["sample_id"].isin(generations["sample_id"]), "expression_id"])
    grpo = set(pd.read_parquet(hostile / "data/keyframes/grpo.parquet")["expression_id"])
    answers = pd.read_parquet(hostile / "data/evaluate/answers.parquet")
    evaluated = {f"{v}#{e}" for v, e in zip(answers["video"], answers["exp_id"], strict=True)}
    for row in expressions.itertuples():
        if row.split == "train" and row.targets == 0:
            continue  # sample.include_no_target_train: false (the papers' rule), not a failure
        reached = traced | grpo if row.split == "train" else evaluated
        assert (row.expression_id in reached) != (row.expression_id in quarantined), row
    # the one case no stage can use: its target is in no frame at all
    assert {expressions.set_index("expression_id").loc[e, "case"] for e in quarantined} == {"absent-everywhere"}
    assert all("empty in every frame" in reason for reason in quarantined.values())


def test_the_openai_teacher_saw_every_case_drawn_and_every_stage_succeeded(hostile: Path, server: FakeOpenAI) -> None:
    metrics = {p.stem: json.loads(p.read_text()) for p in (hostile / "metrics").glob("*.json")}
    sft = pd.read_parquet(hostile / "data/keyframes/sft.parquet")
    assert metrics["cot"]["requests"] == len(sft) and metrics["cot"]["errors"] == 0
    assert metrics["cot"]["sent"] == len(sft)
    # the slivers' requests carried their frames at teacher.image_size (448 on the longest side), red marks in
    cot_bodies = [b for b in server.bodies if "Keyframe: " in b["messages"][0]["content"][-1]["text"]]
    sliver_bodies = [b for b in cot_bodies if "sliver-" in b["messages"][0]["content"][-1]["text"]]
    assert len(cot_bodies) == len(sft) and len(sliver_bodies) == 2  # sft_first_k: sliver-left and sliver-right
    for body in sliver_bodies:
        images = [part["image_url"]["url"] for part in body["messages"][0]["content"] if part["type"] == "image_url"]
        for url in images:
            image = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
            assert max(image.size) == 448 and image.size == (448, 33)  # 641 × 47 frames
    accepted = pd.read_parquet(hostile / "data/filter/accepted.parquet")
    rejected = pd.read_parquet(hostile / "data/filter/rejected.parquet")
    assert len(accepted) + len(rejected) == len(sft) and len(accepted) > 0
    assert metrics["sft"]["train_samples"] == len(accepted)
    assert metrics["grpo"]["steps"] == 4 and all(math.isfinite(v) for v in metrics["grpo"].values())
    assert metrics["eval"]["n_expressions"] == len(pd.read_parquet(hostile / "data/keyframes/eval.parquet"))
    assert (hostile / "reports/eval.md").is_file()


def test_the_reward_scores_the_hostile_boxes(hostile: Path) -> None:
    """GRPO's reward (with the committed SAM2 for consistency) on every GRPO sample: the ground-truth answer
    (sub-pixel slivers), its integer-pixel form (slivers of zero width) and the degenerate boxes."""
    from stages.grpo.data import read_grpo_shards
    from stages.grpo.trl_engine import GroupReward
    from stages.params import load_params
    from stages.sam2_wrapper import load_video_predictor
    from stages.tasks import answer_text

    params = load_params(hostile / "params.yaml")
    predictor = load_video_predictor(str(hostile / params.sam2.checkpoint), str(hostile / params.sam2.config))
    reward = GroupReward(params.reward, predictor)
    for sample in read_grpo_shards(hostile / "data/shards/grpo"):
        gt = sample["meta"]["ground_truth"]
        key = gt["keyframe_timestamp"]
        boxes = [b for b in gt["boxes"][gt["timestamps"].index(key)] if b is not None]
        answers = [boxes, [[round(v) for v in b] for b in boxes], [[50, 50, 50, 50]], [[0, 0, 0.1, 0.1]],
                   [[55.9, 0, 56, 56]], [[60, 60, 90, 90]], [[30, 30, 10, 10]]]
        texts = [answer_text("the target", {"keyframe_timestamp": key, "bbox_2d_list": a}) for a in answers]
        images = [Image.open(io.BytesIO(f["bytes"])).convert("RGB") for f in sample["frames"]]
        scores = reward([None] * len(texts), texts, [json.dumps(gt)] * len(texts), [sample["sample_id"]] * len(texts),
                        images=[images] * len(texts))
        assert all(math.isfinite(s) and 0 <= s <= 4 for s in scores), (sample["sample_id"], scores)
        assert scores[0] >= 2, (sample["sample_id"], scores)  # format and keyframe in full, whatever SAM2 made


def test_the_report_pictures_draw_every_hostile_case(hostile: Path) -> None:
    """evaluate's pictures of every evaluated expression (the tiny model's answers do not parse, so the report
    itself pictures one): its keyframe carries predicted boxes that are slivers, zero-area, off-frame, inverted."""
    from stages.evaluate.report import boxes_picture, masks_strip
    from stages.evaluate.scorer import load_ground_truth

    answers = pd.read_parquet(hostile / "data/evaluate/answers.parquet")
    root = hostile / "data/raw/synth"
    gt = load_ground_truth(root, "valid")
    for answer in answers.to_dict("records"):
        entry = gt.videos[answer["video"]]["expressions"][answer["exp_id"]]
        annos = [str(a) for a in entry.get("anno_id", [])]
        size = int(answer["frame_size"])
        answer = {**answer, "frame_indices": list(answer["frame_indices"]), "keyframe_idx": answer["frame_indices"][1],
                  "boxes": [[0, 0, 0.05, size], [size - 0.01, 3, size, 4], [20, 20, 20, 20], [size + 5, 0, size + 9, 4],
                            [30, 30, 10, 10]]}
        picture = boxes_picture(root, gt, answer, annos)
        assert picture.width > 0 and np.asarray(picture).any()
        strip = masks_strip(root, gt, hostile / "data/evaluate/predictions", answer["video"], answer["exp_id"], annos)
        assert strip.width > 0


def test_the_template_teacher_on_the_same_data(hostile: Path) -> None:
    _set_params(hostile, {"teacher.backend": "template", "difficulty.backend": "heuristic"})
    _repro(hostile, "shard")
    metrics = json.loads((hostile / "metrics/cot.json").read_text())
    sft = pd.read_parquet(hostile / "data/keyframes/sft.parquet")
    assert metrics["requests"] == len(sft) and metrics["errors"] == 0
    manifest = json.loads((hostile / "data/shards/manifest.json").read_text())
    assert manifest["sft"]["count"] == len(pd.read_parquet(hostile / "data/filter/accepted.parquet")) > 0


@pytest.fixture(scope="module")
def default_keyframes(tmp_path_factory: pytest.TempPathFactory, project_root: Path, prefect_api: str) -> Path:
    """The default data (params.yaml as committed) up to the keyframes tables."""
    repo = make_repo(project_root, tmp_path_factory.mktemp("default") / "repo")
    _repro(repo, "keyframes")
    return repo


@pytest.mark.parametrize("image_size", [112, 448, 1024])
def test_cot_on_the_default_data_completes_at_every_teacher_image_size(default_keyframes: Path, image_size: int,
                                                                       tmp_path: Path) -> None:
    """The sub-pixel boxes of the default SFT pool (objects entering at the edge) reach `marked_frame` at
    every size: before stages/core/pixel_box, 112 stopped the stage with 'x1 must be greater than or equal
    to x0'."""
    from stages.cot import generate_cot
    from stages.params import load_params

    params = load_params(default_keyframes / "params.yaml")
    sft = pd.read_parquet(default_keyframes / "data/keyframes/sft.parquet")
    sides = [min(b[2] - b[0], b[3] - b[1]) for frames in sft["boxes"] for objs in frames for b in objs
             if b is not None]
    assert min(sides) < 1  # boxes under one pixel at the train size (112 here: one pixel at image_size 112)
    with FakeOpenAI() as server:
        teacher = replace(params.teacher, backend="openai", model="fake-vlm", base_url=server.base_url,
                          api_key_required=False, image_size=image_size, max_retries=1)
        cot = replace(params.cot, cache_dir=str(tmp_path / "cache"))
        report = generate_cot(teacher, cot, params.seed, default_keyframes / params.data.root,
                              default_keyframes / "data/keyframes", tmp_path / "cot")
        sizes = {Image.open(io.BytesIO(base64.b64decode(part["image_url"]["url"].split(",", 1)[1]))).size
                 for body in server.bodies[:20] for part in body["messages"][0]["content"]
                 if part["type"] == "image_url"}
    assert report.metrics["errors"] == 0 and report.metrics["sent"] == report.metrics["requests"] > 0
    assert {max(s) for s in sizes} == {image_size}
    assert np.isfinite(report.metrics["estimated_cost_usd"])
