"""Difficulty: JSON validation of MLLM ratings, levels, budgets, the heuristic and the mllm backend."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from stages.core.runner import RunnerParams
from stages.difficulty import level_of, parse_ratings, score_difficulty, token_budget
from stages.ingest import ingest
from stages.keyframes import select_keyframes
from stages.params.difficulty import DifficultyParams
from stages.params.ingest import IngestParams
from stages.params.keyframes import KeyframesParams
from stages.params.sample import SampleParams
from stages.params.teacher import TeacherParams
from stages.sample import sample_pools
from tests.fake_openai import FakeOpenAI
from tests.keyframed import keyframed_project
from tests.revos_factory import simple_video, write_root

VALID = ('{"scene_complexity": 3, "segmentation_challenge": 5, "temporal_ambiguity": 2, '
         '"motion_complexity": 4, "linguistic_ambiguity": 10}')


@pytest.mark.parametrize(("text", "ok"), [
    (VALID, True),
    ("Here you go:\n" + VALID + "\nThanks", True),
    (VALID.replace("10", "11"), False),
    (VALID.replace("10", "0"), False),
    (VALID.replace("10", "7.5"), False),
    (VALID.replace("10", '"7"'), False),
    (VALID.replace("10", "true"), False),
    (VALID.replace('"linguistic_ambiguity": 10', '"language": 10'), False),
    (VALID.replace("}", ', "extra": 1}'), False),
    ("no json at all", False),
    ("{broken", False),
])
def test_rating_json_validation(text: str, ok: bool) -> None:
    assert (parse_ratings(text) is not None) == ok


def test_levels_and_budgets() -> None:
    params = DifficultyParams(easy_below=4.0, hard_from=6.5, min_budget=128, max_budget=768)
    assert [level_of(d, params) for d in (1.0, 3.99, 4.0, 6.49, 6.5, 10.0)] == \
        ["easy", "easy", "medium", "medium", "hard", "hard"]
    assert token_budget(1.0, params) == 128 and token_budget(10.0, params) == 768
    assert token_budget(5.5, params) == 448 and token_budget(5.5, params) % 16 == 0


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return keyframed_project(tmp_path_factory.mktemp("difficulty"), 3, 6, sft_first_k=1, grpo_size=2)


def test_heuristic_backend(data: Path, tmp_path: Path) -> None:
    params = DifficultyParams(cache_dir=str(tmp_path / "cache"))
    report = score_difficulty(params, TeacherParams(), data / "root", data / "index", data / "keyframes", tmp_path)
    scores = pd.read_parquet(tmp_path / "scores.parquet")
    assert len(scores) == report.metrics["samples"] > 0
    assert (tmp_path / "cache").is_dir()  # a DVC output (persist: true) even when no request is sent
    multi = scores[scores["expression_id"].str.endswith("#1")]
    single = scores[scores["expression_id"].str.endswith("#0")]
    # "both boxes" (reasoning, two targets, one absent in a frame) is rated harder than "the left box"
    assert multi["temporal_ambiguity"].mean() > single["temporal_ambiguity"].mean()
    assert multi["linguistic_ambiguity"].mean() > single["linguistic_ambiguity"].mean()


def test_mllm_backend_retries_invalid_json(data: Path, tmp_path: Path) -> None:
    teacher = TeacherParams(backend="openai", model="fake", api_key_required=False, max_retries=0)
    params = DifficultyParams(backend="mllm", json_retries=1, cache_dir=str(tmp_path / "cache"))
    with FakeOpenAI(reply="I think it is hard.") as bad:
        report = score_difficulty(params, replace(teacher, base_url=bad.base_url), data / "root", data / "index",
                                  data / "keyframes", tmp_path / "bad")
    assert report.metrics["mllm_fallbacks"] == report.metrics["samples"]
    assert bad.total_requests == 2 * report.metrics["samples"]  # first try + one retry each
    with FakeOpenAI(reply=VALID) as good:
        score_difficulty(replace(params, cache_dir=str(tmp_path / "cache2")), replace(teacher, base_url=good.base_url),
                         data / "root", data / "index", data / "keyframes", tmp_path / "good")
    scores = pd.read_parquet(tmp_path / "good" / "scores.parquet")
    assert (scores["backend"] == "mllm").all() and (scores["difficulty"] == 4.8).all()


def test_heuristic_uses_union_areas_of_overlapping_targets(tmp_path: Path) -> None:
    """Regression: two targets that overlap count once. Frame 0: the same 8×8 square twice (union 64);
    frames 1–3: side by side (union 128). With summed areas every frame would be 128 (ratio 1, temporal
    ambiguity 1); with the union the visible ratio is 64 / 128 = 0.5 → rating round(1 + 9 · 0.4 · 0.5) = 3."""
    from tests.revos_factory import VideoSpec

    objects = {1: [(2, 2, 10, 10)] * 4, 2: [(2, 2, 10, 10)] + [(16, 2, 24, 10)] * 3}
    video = VideoSpec("S/train/pair", n_frames=4, objects=objects,
                      expressions=[{"exp": "both squares", "obj_id": [0, 1], "anno_id": [1, 2], "type_id": 0}])
    write_root(tmp_path / "root", [video, simple_video("S/valid/w", split="valid")])
    ingest(IngestParams(), tmp_path / "root", tmp_path / "index", RunnerParams(kind="serial"))
    sample_pools(SampleParams(sft_first_k=1, grpo_size=0), 0, tmp_path / "index", tmp_path / "sample")
    select_keyframes(KeyframesParams(), 0, tmp_path / "root", tmp_path / "index", tmp_path / "sample",
                     tmp_path / "keyframes")
    kf = pd.read_parquet(tmp_path / "keyframes" / "sft.parquet")
    assert list(kf["video_union_areas"].iloc[0]) == [64.0, 128.0, 128.0, 128.0]
    score_difficulty(DifficultyParams(cache_dir=str(tmp_path / "cache")), TeacherParams(), tmp_path / "root",
                     tmp_path / "index", tmp_path / "keyframes", tmp_path / "out")
    scores = pd.read_parquet(tmp_path / "out" / "scores.parquet").set_index("expression_id")
    assert scores.loc["S/train/pair#0", "temporal_ambiguity"] == 3
