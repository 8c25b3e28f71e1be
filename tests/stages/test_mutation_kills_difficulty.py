"""Difficulty rules pinned for the mutation run (scripts/mutation.sh difficulty, docs/testing.md): the token
budget's clamp and rounding, and the heuristic ratings on hand-computed inputs."""

from __future__ import annotations

import base64
import io
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from stages.core.lineage import code_hash
from stages.core.runner import RunnerParams
from stages.difficulty import (
    _rate_with_mllm,
    _rating_request,
    heuristic_ratings,
    level_of,
    parse_ratings,
    score_difficulty,
    token_budget,
)
from stages.keyframes import select_keyframes
from stages.params.difficulty import DifficultyParams
from stages.params.keyframes import KeyframesParams
from stages.params.sample import SampleParams
from stages.params.teacher import TeacherParams
from stages.sample import sample_pools
from stages.tasks import timestamp_tag
from stages.teacher.prompts import render_difficulty_prompt
from tests.fake_openai import FakeOpenAI
from tests.revos_factory import VideoSpec, frame_file, simple_video, write_root
from tests.stages.test_sample import write_index

PARAMS = DifficultyParams(min_budget=128, max_budget=768)


@pytest.mark.parametrize(("d", "budget"), [
    (0.0, 128), (1.0, 128), (10.0, 768), (11.0, 768),  # clamped to [1, 10]
    (2.0, 192),  # 128 + 640/9 = 199.1 → 192 (nearest multiple of 16)
    (1.2, 144),  # 142.2 → 144
    (1.1, 128),  # 135.1 → 128
    (7.75, 608),  # 608 exactly
])
def test_token_budget_literals(d, budget):
    assert token_budget(d, PARAMS) == budget


@settings(max_examples=60, deadline=None)
@given(st.floats(-5, 15, allow_nan=False), st.integers(1, 40), st.integers(0, 60))
def test_token_budget_is_the_nearest_multiple_of_16_of_the_line(d, low16, span16):
    params = DifficultyParams(min_budget=16 * low16, max_budget=16 * (low16 + span16))
    raw = params.min_budget + (params.max_budget - params.min_budget) * (min(max(d, 1.0), 10.0) - 1.0) / 9
    budget = token_budget(d, params)
    assert budget % 16 == 0 and abs(budget - raw) <= 8
    assert params.min_budget <= budget <= params.max_budget


def test_levels_at_the_thresholds():
    params = DifficultyParams(easy_below=3.0, hard_from=3.0)
    assert [level_of(d, params) for d in (2.99, 3.0)] == ["easy", "hard"]


@pytest.mark.parametrize(("sample", "n_objects", "absent", "visible", "expected"), [
    # 3 objects: (3−1)/5 = .4 → 1 + 9·.4 = 4.6 → 5; areas 500, 1500 of 100²: mean .1, 1 − √(.1/.25) = .368 → 4.3
    # → 4; .6·.5 + .4·(1 − .25) = .6 → 6.4 → 6; motion .12/.6 = .2 → 2.8 → 3; 8 words: .5 + reasoning .3 +
    # two instances .1 = .9 → 9.1 → 9
    ({"train_size": 100, "union_areas": [0.0, 500.0, 1500.0], "text": "a b c d e f g h", "type": "reasoning",
      "n_instances": 2, "motion": 0.12}, 3, 0.5, 0.25,
     {"scene_complexity": 5, "segmentation_challenge": 4, "temporal_ambiguity": 6, "motion_complexity": 3,
      "linguistic_ambiguity": 9}),
    # no target anywhere: nothing to segment is hardest (10); 2 words .125 + no-target .2 = .325 → 3.9 → 4;
    # motion 0.9/.6 clipped to 1 → 10
    ({"train_size": 100, "union_areas": [0.0, 0.0], "text": "a b", "type": "no_target", "n_instances": 1,
      "motion": 0.9}, 1, 0.0, 1.0,
     {"scene_complexity": 1, "segmentation_challenge": 10, "temporal_ambiguity": 1, "motion_complexity": 10,
      "linguistic_ambiguity": 4}),
    # a target filling a quarter of the frame or more: 1; 4 words of a referring expression: .25 → 3.25 → 3;
    # 40 objects: clipped to 10; absent .2, visible .9: .12 + .04 = .16 → 2.44 → 2
    ({"train_size": 10, "union_areas": [30.0], "text": "the dog on left", "type": "referring", "n_instances": 1,
      "motion": 0.0}, 40, 0.2, 0.9,
     {"scene_complexity": 10, "segmentation_challenge": 1, "temporal_ambiguity": 2, "motion_complexity": 1,
      "linguistic_ambiguity": 3}),
])
def test_heuristic_ratings_hand_computed(sample, n_objects, absent, visible, expected):
    assert heuristic_ratings(sample, n_objects, absent, visible) == expected


# --- the MLLM rater's request and its fallback warning (second round, 2026-11-26) ------------------------------

NAMES = ["00000", "00002", "00004"]
GOLDEN_KEY = "9c5abc2115bd5ed0b48dfafd3a9f38962992ed4e9720aa6221d4fb339cb5bb2b"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = write_root(tmp_path / "root", [simple_video("S/train/v", n_frames=3)])  # 32 × 24 RGB JPEG frames
    gray = frame_file(root, "S/train/v", NAMES[1])
    with Image.open(gray) as img:
        img.convert("L").save(gray, quality=90)  # a grayscale JPEG frame: sent as RGB all the same
    return root


def sample(**over) -> dict:
    return {"sample_id": "s1", "video": "S/train/v", "text": "the left box", "timestamps": [0, 1, 2],
            "frame_names": NAMES, **over}


def test_each_frame_is_sent_as_an_rgb_jpeg_of_quality_85_within_the_image_size(root: Path) -> None:
    request = _rating_request(sample(), TeacherParams(image_size=16), root, 0)
    images = [c["image_url"]["url"] for c in request.messages[0]["content"] if c["type"] == "image_url"]
    assert len(images) == 3
    for url in images:
        head, data = url.split(",", 1)
        assert head == "data:image/jpeg;base64"
        with Image.open(io.BytesIO(base64.b64decode(data))) as img:
            assert img.format == "JPEG" and img.mode == "RGB"
            assert img.size == (16, 12)  # 32 × 24 shrunk to fit 16, aspect kept
            # IJG quality scaling (libjpeg's jcparam.c): q ≥ 50 → scale 200 − 2q = 30 %; the standard luminance
            # table starts at 16 → (16 · 30 + 50) // 100 = 5 (quality 75, PIL's default, would give 8)
            assert img.quantization[0][0] == 5


def test_frames_and_timestamps_must_pair_up(root: Path) -> None:
    with pytest.raises(ValueError, match=r"zip\(\) argument 2 is longer than argument 1"):
        _rating_request(sample(timestamps=[0, 1]), TeacherParams(image_size=16), root, 0)


def test_samples_left_with_heuristic_ratings_are_counted_in_a_warning(root: Path, tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    rows = [{"sample_id": "s1"}, {"sample_id": "s2"}]
    samples = pd.DataFrame([sample(), sample(sample_id="s2", text="the right box")])
    teacher = TeacherParams(backend="openai", model="fake", api_key_required=False, max_retries=0, image_size=16)
    with FakeOpenAI(reply="not json") as server, caplog.at_level(logging.WARNING, logger="stages.difficulty"):
        teacher = TeacherParams(**{**teacher.__dict__, "base_url": server.base_url})
        out, fallbacks = _rate_with_mllm(rows, samples, DifficultyParams(json_retries=0,
                                                                         cache_dir=str(tmp_path / "c")), teacher, root)
    assert fallbacks == 2
    assert [r.getMessage() for r in caplog.records if r.name == "stages.difficulty"] == [
        "difficulty: 2 samples kept heuristic ratings (MLLM JSON never validated)"]


def test_the_request_pairs_each_frame_with_its_timestamp_then_asks_the_rating_prompt(root: Path) -> None:
    request = _rating_request(sample(), TeacherParams(image_size=16), root, 0)
    assert len(request.messages) == 1 and request.messages[0]["role"] == "user"
    content = request.messages[0]["content"]
    assert [c["type"] for c in content] == ["text", "image_url"] * 3 + ["text"]
    assert [content[i]["text"] for i in (0, 2, 4)] == [timestamp_tag(t) for t in (0, 1, 2)]
    assert all(set(content[i]) == {"type", "image_url"} and set(content[i]["image_url"]) == {"url"}
               for i in (1, 3, 5))
    assert content[-1] == {"type": "text", "text": render_difficulty_prompt("the left box", 3)}
    assert request.response_format == {"type": "json_object"} and request.context == {"sample_id": "s1"}


def test_the_cache_key_is_stable_across_versions(root: Path) -> None:
    # the response cache is a persisted DVC output: a key that changes with the code silently asks every cached
    # request again. This literal is the key of this request; change it only with a change that must re-ask.
    request = _rating_request(sample(), TeacherParams(image_size=16, model="m"), root, 1)
    assert request.key == GOLDEN_KEY


VALID = ('{"scene_complexity": 3, "segmentation_challenge": 5, "temporal_ambiguity": 2, '
         '"motion_complexity": 4, "linguistic_ambiguity": 10}')


class TruncatedReplies(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint whose every reply is valid rating JSON cut by the token limit."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        body = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [
            {"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": VALID}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_a_truncated_reply_is_no_rating_even_when_its_text_parses(root: Path, tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), TruncatedReplies)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        teacher = TeacherParams(backend="openai", model="m", api_key_required=False, max_retries=0, image_size=16,
                                base_url=f"http://127.0.0.1:{server.server_address[1]}/v1")
        out, fallbacks = _rate_with_mllm([{"sample_id": "s1"}], pd.DataFrame([sample()]),
                                         DifficultyParams(json_retries=0, cache_dir=str(tmp_path / "c")), teacher, root)
    finally:
        server.shutdown()
    assert fallbacks == 1 and out == [{"sample_id": "s1"}]


@pytest.mark.parametrize(("text", "ok"), [
    ("note {x} " + VALID, False),  # the object runs from the FIRST "{" to the last "}"
    (VALID + " (each on a {1-10} scale)", False),
    (VALID + "x", True),  # text after the last "}" is not read
    ("p" * 2500 + VALID, True),  # prose before the object does not count towards its length
    (VALID.replace("10", "1"), True),  # 1 is a rating
])
def test_the_json_object_is_taken_from_the_first_to_the_last_brace(text: str, ok: bool) -> None:
    assert (parse_ratings(text) is not None) == ok


@pytest.mark.parametrize(("length", "ok"), [(2001, True), (2002, False)])
def test_an_object_longer_than_2001_characters_is_no_rating(length: int, ok: bool) -> None:
    padded = "{" + " " * (length - len(VALID)) + VALID[1:]
    assert len(padded) == length and (parse_ratings(padded) is not None) == ok


def test_heuristic_stage_on_hand_made_areas(tmp_path: Path) -> None:
    """Per-frame union areas → temporal ambiguity, by hand: round(1 + 9 · (0.6 · absent + 0.4 · (1 − min/max)))."""
    videos = [
        # #0: absent, 1 px, 4 px → absent 1/3, visible 1/4 → 0.2 + 0.3 = 0.5 → 5.5 → 6; the video has 2 objects:
        # scene complexity round(1 + 9 · 1/5) = 3
        VideoSpec("D/train/a", n_frames=3, objects={1: [None, (0, 0, 1, 1), (0, 0, 2, 2)], 2: [(10, 10, 12, 12)] * 3},
                  expressions=[{"exp": "the dot", "obj_id": [0], "anno_id": [1], "type_id": 0},
                               {"exp": "the square", "obj_id": [1], "anno_id": [2], "type_id": 0}]),
        # one frame, present: absent 0, visible 1 → 1
        VideoSpec("D/train/b", n_frames=1, objects={3: [(0, 0, 2, 2)]},
                  expressions=[{"exp": "the square", "obj_id": [0], "anno_id": [3], "type_id": 0}]),
        # two more one-frame videos: six samples, so that the mean difficulty has more than three decimals
        *[VideoSpec(f"D/train/{k}", n_frames=1, objects={4 + i: [(0, 0, 3 + i, 3)]},
                    expressions=[{"exp": "a wide grey box on the left", "obj_id": [0], "anno_id": [4 + i],
                                  "type_id": 1}]) for i, k in enumerate(("d", "e"))],
        # no target in any frame: absent 1, visible 0 → 10; no annotated object: scene complexity 1
        VideoSpec("D/valid/c", split="valid", n_frames=2, objects={},
                  expressions=[{"exp": "the purple cat", "obj_id": [], "anno_id": [], "type_id": 2}]),
    ]
    write_root(tmp_path / "root", videos)
    write_index(tmp_path / "index", videos)
    sample_pools(SampleParams(sft_first_k=1, grpo_size=0), 0, tmp_path / "index", tmp_path / "sample")
    select_keyframes(KeyframesParams(n_frames=2), 0, tmp_path / "root", tmp_path / "index", tmp_path / "sample",
                     tmp_path / "kf", RunnerParams(kind="serial"))
    cache = tmp_path / "nested" / "cache"
    for _ in range(2):  # the cache folder is made with its parents, and may exist
        report = score_difficulty(DifficultyParams(cache_dir=str(cache)), TeacherParams(), tmp_path / "root",
                                  tmp_path / "index", tmp_path / "kf", tmp_path / "out")
    assert cache.is_dir()
    scores = pd.read_parquet(tmp_path / "out" / "scores.parquet").set_index("expression_id")
    assert scores.loc[["D/train/a#0", "D/train/b#0", "D/valid/c#0"], "temporal_ambiguity"].tolist() == [6, 1, 10]
    assert scores.loc[["D/train/a#0", "D/valid/c#0"], "scene_complexity"].tolist() == [3, 1]
    # a#1 joins the GRPO pool (grpo_size 0: every remaining training expression)
    assert sorted(scores.index) == ["D/train/a#0", "D/train/a#1", "D/train/b#0", "D/train/d#0", "D/train/e#0",
                                    "D/valid/c#0"]
    dims = ["scene_complexity", "segmentation_challenge", "temporal_ambiguity", "motion_complexity",
            "linguistic_ambiguity"]
    by_hand = [round(sum(int(v) for v in row) / 5, 3) for row in scores[dims].itertuples(index=False)]
    assert scores["difficulty"].tolist() == by_hand and len(set(by_hand)) > 1  # each sample its own mean
    mean = sum(by_hand) / len(by_hand)
    assert round(mean, 3) != round(mean, 4)  # the data tells 3 decimals from 4
    levels = scores.groupby(["pool", "level"]).size()
    assert report.metrics == {"samples": 6, "mllm_fallbacks": 0, "mean_difficulty": round(mean, 3),
                              **{f"{pool}.{level}": int(n) for (pool, level), n in levels.items()}}
    assert report.stage == "difficulty"
    table = report.tables["levels per pool"]
    assert list(table.columns) == ["pool", "level", "samples"]
    assert {(r.pool, r.level): r.samples for r in table.itertuples()} == levels.to_dict()
    lineage = json.loads((tmp_path / "out" / "lineage.json").read_text())
    assert lineage["stage"] == "difficulty" and lineage["counts"] == {"samples": 6}
    assert lineage["params"]["cache_dir"] == str(cache)
    assert {k: v["path"] for k, v in lineage["inputs"].items()} == {
        "keyframes": (tmp_path / "kf").as_posix(), "index": (tmp_path / "index").as_posix()}
    assert lineage["code_version"]["sha256"] == code_hash(["stages.difficulty"])


@pytest.mark.parametrize(("text", "kind", "linguistic"), [
    ("the one that is hiding", "reasoning", 7),  # 5/16 + .3 = .6125 → 6.51 → 7 (5/17 would give 6)
    ("the small grey box that moves to the left side of the frame", "referring", 6),  # 12 words: capped at .5
])
def test_linguistic_ambiguity_by_hand(text: str, kind: str, linguistic: int) -> None:
    sample = {"train_size": 10, "union_areas": [0.5, 0.0], "text": text, "type": kind, "n_instances": 1,
              "motion": 0.0}
    ratings = heuristic_ratings(sample, 1, 0.0, 1.0)
    assert ratings["linguistic_ambiguity"] == linguistic
    # a target of half a pixel at train size still counts: fraction .005 → 1 − √(.02) = .859 → 8.73 → 9
    assert ratings["segmentation_challenge"] == 9
