"""The CoT stage's response-cache key (scripts/mutation.sh cot / teacher, docs/testing.md).

Rule (stages/cot `build_request` + stages/teacher/client `cache_key`): the key of a request changes with every
field that changes the reply — what is sent (model, temperature, max_tokens, the frames at image_size, the
provider fields: extra_body and the thinking switch) and what it asks (sample, template, trace) — and with no
other field (endpoint plumbing, retries, pacing, prices, the key's env-var name). Checked one field at a time
against the final key the client looks up.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
from collections import Counter
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

import stages.cot as cot_module
from stages.core.io import derive_seed
from stages.cot import FRAME_ENCODING, build_request, generate_cot, marked_frame, trace_tasks
from stages.params.cot import CotParams
from stages.params.teacher import TeacherParams
from stages.tasks import get_task
from stages.teacher.cache import ResponseCache, request_key
from stages.teacher.client import cache_key, provider_fields

SAMPLE = {
    "sample_id": "S/train/v0#0", "video": "S/train/v0", "text": "the dog on the left", "tasks": ["veason"],
    "timestamps": [0, 2, 4], "frame_names": ["00000", "00002", "00004"], "keyframe_timestamp": 2,
    "aks_frame_idx": 5, "aks_frame_name": "00005", "aks_option": "A", "train_size": 112, "keyframe_size": 112,
    "boxes": [[[1.0, 2.0, 30.0, 40.0]], [[3.0, 2.0, 33.0, 41.0]], [None]], "union_areas": [900.0, 1000.0, 0.0],
    "n_instances": 1, "ktg_points": [[15.0, 20.0]],
}
OPENAI = TeacherParams(backend="openai", model="m", extra_body={"top_k": 5})

# every TeacherParams field → a changed value, and whether the reply can differ with it
CHANGES = {
    "backend": (None, True),  # (handled below: template vs openai identities)
    "base_url": ("http://localhost:9/v1", False),
    "model": ("other-model", True),
    "api_key_env": ("OTHER_KEY_ENV", False),
    "api_key_required": (False, False),
    "temperature": (0.1, True),
    "max_tokens": (77, True),
    "concurrency": (3, False),
    "timeout_s": (9.0, False),
    "max_retries": (0, False),
    "backoff_base_s": (0.5, False),
    "backoff_max_s": (5.0, False),
    "rpm": (60, False),
    "breaker_after": (3, False),
    "price_in_per_m": (3.0, False),
    "price_out_per_m": (4.0, False),
    "image_size": (224, True),
    "extra_body": ({"top_k": 6}, True),
    "thinking": ("disabled", True),
    "thinking_switch": ("chat_template", False),  # with thinking "default" no switch is sent
    "template_style": ("compact", False),  # the template backend's writing (its key: the test below)
}


def final_key(teacher: TeacherParams, sample: dict = SAMPLE, template: str = "veason/v1/style_a",
              trace: int = 0) -> str:
    request = build_request(sample, template, trace, teacher, Path("/nonexistent"))
    return cache_key(request.key, teacher)


def test_every_teacher_field_is_classified():
    assert set(CHANGES) == {f.name for f in fields(TeacherParams)}


@pytest.mark.parametrize("name", [n for n in CHANGES if n != "backend"])
def test_key_changes_with_every_reply_field_and_no_other(name):
    value, changes = CHANGES[name]
    assert (final_key(replace(OPENAI, **{name: value})) != final_key(OPENAI)) is changes


def test_the_template_backends_key_changes_with_its_style_and_the_full_styles_key_with_nothing_new():
    template = TeacherParams()
    assert final_key(replace(template, template_style="compact")) != final_key(template)
    # the full style's key is the identity of a template request before the setting existed (its cache stays)
    request = build_request(SAMPLE, "veason/v1/style_a", 0, template, Path("/nonexistent"))
    assert "template_style" not in request.context


def test_thinking_switch_counts_once_thinking_is_sent():
    enabled = replace(OPENAI, thinking="enabled")
    assert final_key(replace(enabled, thinking_switch="chat_template")) != final_key(enabled)
    assert provider_fields(enabled) == {"top_k": 5, "thinking": {"type": "enabled"}}
    assert provider_fields(replace(enabled, thinking_switch="chat_template")) == {
        "top_k": 5, "chat_template_kwargs": {"enable_thinking": True}}
    assert provider_fields(replace(OPENAI, thinking="disabled", thinking_switch="chat_template")) == {
        "top_k": 5, "chat_template_kwargs": {"enable_thinking": False}}


@pytest.mark.parametrize(("key", "value"), [
    ("sample_id", "S/train/v0#1"), ("text", "the cat"),
    ("timestamps", [0, 2, 6]),  # the `<ts>` tags sent before each frame (in the openai identity since issue 23)
    ("frame_names", ["00000", "00002", "00006"]), ("keyframe_timestamp", 4), ("video", "S/train/v1"),
    ("boxes", [[[1.0, 2.0, 30.0, 41.0]], [[3.0, 2.0, 33.0, 41.0]], [None]]), ("train_size", 224),
])
def test_key_changes_with_what_the_request_shows_or_asks(key, value):
    assert final_key(OPENAI, {**SAMPLE, key: value}) != final_key(OPENAI)


def test_key_changes_with_template_and_trace_but_not_with_unsent_sample_fields():
    base = final_key(OPENAI)
    assert final_key(OPENAI, template="veason/v1/style_b") != base
    assert final_key(OPENAI, trace=1) != base
    assert final_key(OPENAI, {**SAMPLE, "union_areas": [1.0, 2.0, 3.0]}) == base  # not shown to an openai teacher
    assert final_key(OPENAI, {**SAMPLE, "aks_option": "B"}) == base


def test_template_backend_key_depends_on_its_context_only():
    template = TeacherParams()
    base = final_key(template)
    for name, (value, _) in CHANGES.items():
        if name not in ("backend", "template_style"):  # the template teacher sends nothing: no teacher field but
            # its own writing style changes its answer
            assert final_key(replace(template, **{name: value})) == base, name
    assert final_key(template, {**SAMPLE, "union_areas": [1.0, 2.0, 3.0]}) != base  # it writes from these
    assert final_key(template, {**SAMPLE, "aks_option": "B"}) != base
    assert final_key(template) != final_key(OPENAI)


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=20), st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3))
def test_cache_key_without_provider_fields_is_the_request_key(key, extra_body):
    plain = TeacherParams(backend="openai")
    assert cache_key(key, plain) == key
    assert cache_key(key, replace(plain, backend="template", extra_body=extra_body)) == key
    sent = replace(plain, extra_body=extra_body)
    expected = key if not extra_body else hashlib.sha256(json.dumps(
        {"request": key, "provider_fields": extra_body}, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert cache_key(key, sent) == expected


def test_request_key_literal_and_cache_paths(tmp_path):
    assert request_key({"b": 1, "a": [1, 2]}) == hashlib.sha256(b'{"a":[1,2],"b":1}').hexdigest()
    cache = ResponseCache(tmp_path / "c")
    key = request_key("x")
    assert cache.get(key) is None and len(cache) == 0
    cache.put(key, {"text": "hi", "n": 1})
    assert (tmp_path / "c" / key[:2] / f"{key}.json").read_text() == '{"n": 1, "text": "hi"}'
    assert cache.get(key) == {"text": "hi", "n": 1} and len(cache) == 1
    (tmp_path / "c" / key[:2] / f"{key}.json").write_text('{"n": ')  # cut short by a crash
    assert cache.get(key) is None


# ---- the cot stage itself (scripts/mutation.sh cot) -----------------------------------------------------------

RED_OK = 90  # JPEG q90 blurs edges: "red" = R high, G and B low; "grey" = the three channels close


def _is_red(pixel) -> bool:
    r, g, b = (int(v) for v in pixel)
    return r > 170 and g < RED_OK and b < RED_OK


def _is_grey(pixel) -> bool:
    r, g, b = (int(v) for v in pixel)
    return max(r, g, b) - min(r, g, b) < 30


def _decode(jpeg: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB"))


def _write_frame(path: Path, size: tuple[int, int] = (160, 120), value: int = 128) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((size[1], size[0], 3), value, np.uint8)).save(path)


def test_marked_frame_size_rectangle_and_line_width(tmp_path):
    _write_frame(tmp_path / "f.jpg", (200, 100))
    # longest side 200 → 100: scale 0.5 → 100 × 50; boxes at train size 100: x × 1.0, y × 0.5; line 2 px
    small = _decode(marked_frame(tmp_path / "f.jpg", [[20.0, 32.0, 60.0, 80.0], None], 100, 100))
    assert small.shape == (50, 100, 3)
    # rectangle [20, 16, 59, 39]: left edge x 20-21, top edge y 16-17, right edge x 58-59, bottom y 38-39
    for y, x in ((25, 20), (25, 21), (16, 40), (17, 40), (25, 59), (25, 58), (39, 40), (38, 40)):
        assert _is_red(small[y, x]), (y, x, small[y, x])
    for y, x in ((25, 40), (25, 17), (25, 24), (12, 40), (19, 40), (25, 62), (42, 40), (45, 80)):
        assert _is_grey(small[y, x]), (y, x, small[y, x])
    # 600 px wide: the line is 600 // 150 = 4 px
    big = _decode(marked_frame(tmp_path / "f.jpg", [[20.0, 32.0, 60.0, 80.0]], 100, 600))
    assert big.shape == (300, 600, 3)
    assert all(_is_red(big[150, x]) for x in range(120, 124)) and _is_grey(big[150, 127])
    assert _is_grey(big[150, 116])


def test_marked_frame_keeps_a_thin_frame_one_pixel_high_and_sends_jpeg_q90(tmp_path):
    _write_frame(tmp_path / "thin.jpg", (300, 1))
    jpeg = marked_frame(tmp_path / "thin.jpg", [], 100, 100)
    image = Image.open(io.BytesIO(jpeg))
    assert (image.format, image.size) == ("JPEG", (100, 1))
    # quality 90 (FRAME_ENCODING "jpeg-q90"): the IJG luminance table scaled by (200 - 2 × 90) %, clipped to 1..255
    ijg_luma_last = 99  # the standard table's last (zig-zag) entry
    assert image.quantization[0][63] == (ijg_luma_last * 20 + 50) // 100 == 20
    assert FRAME_ENCODING == "jpeg-q90-red-rect-v2"
    _write_frame(tmp_path / "tall.jpg", (1, 300))
    assert Image.open(io.BytesIO(marked_frame(tmp_path / "tall.jpg", [], 100, 100))).size == (1, 100)


def test_marked_frame_outline_is_pure_red(tmp_path):
    # a 2400 px frame: the line is 2400 // 150 = 16 px, so the left edge (x 32-47) fills whole 16-px JPEG blocks,
    # which decode exactly like a solid (255, 0, 0) image at quality 90
    _write_frame(tmp_path / "sq.jpg", (2400, 2400))
    marked = _decode(marked_frame(tmp_path / "sq.jpg", [[32.0, 32.0, 2000.0, 2000.0]], 2400, 2400))
    solid = io.BytesIO()
    Image.new("RGB", (64, 64), (255, 0, 0)).save(solid, format="JPEG", quality=90)
    assert tuple(marked[1000, 40]) == tuple(_decode(solid.getvalue())[32, 32])


def test_marked_frame_of_a_grey_frame_is_colour(tmp_path):
    Image.fromarray(np.full((40, 40), 128, np.uint8), mode="L").save(tmp_path / "grey.jpg")
    jpeg = marked_frame(tmp_path / "grey.jpg", [[10.0, 10.0, 30.0, 30.0]], 40, 40)
    image = Image.open(io.BytesIO(jpeg))
    assert image.mode == "RGB" and _is_red(np.asarray(image)[20, 10])  # the rectangle is red, not grey


def test_trace_tasks_needed_first_each_once():
    assert [t.name for t in trace_tasks(["rcot_aks", "rcot_ktg", "veason"])] == [
        "rcot_vdg", "rcot_aks", "rcot_ktg", "veason"]
    assert [t.name for t in trace_tasks(np.array(["veason", "veason"]))] == ["veason"]
    assert trace_tasks([]) == []


def test_lists_plain_python():
    nested = np.array([[1.5, 2.0]], dtype=np.float32)
    assert cot_module._lists(nested) == [[1.5, 2.0]] and type(cot_module._lists(nested)[0][0]) is float
    assert cot_module._lists((np.int64(3), None, [np.float64(0.25)])) == [3, None, [0.25]]
    assert cot_module._lists(None) is None and cot_module._lists("x") == "x"


def _sample_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    for name in ("00000", "00002", "00004", "00005"):
        _write_frame(root / "JPEGImages" / "S/train/v0" / f"{name}.jpg")
    return root


def test_template_request_carries_the_context_the_template_teacher_writes_from(tmp_path):
    sample = {**SAMPLE, "keyframe_size": 168, "ktg_points": [[15.0, 20.0], None]}
    request = build_request(sample, "rcot_ktg/v1/style_b", 3, TeacherParams(), tmp_path, get_task("rcot_ktg"))
    assert request.context == {
        "template_set": "rcot_ktg", "expression": "the dog on the left", "timestamps": [0, 2, 4],
        "keyframe_timestamp": 2, "train_size": 112,
        "boxes": [[[1.0, 2.0, 30.0, 40.0]], [[3.0, 2.0, 33.0, 41.0]], [None]],
        "union_areas": [900.0, 1000.0, 0.0], "n_instances": 1,
        "ktg_points": [[22.5, 30.0], None],  # the keyframe view is shown at keyframe_size 168 = 1.5 × 112
        "aks_option": "A", "aks_timestamp": 5}
    [message] = request.messages
    assert message["role"] == "user" and message["content"].startswith("You are shown")
    assert request.build is None and request.response_format is None
    sampled = build_request(sample, "veason/v1/style_a", 0, TeacherParams(), tmp_path, get_task("veason"))
    assert sampled.context["ktg_points"] == [[15.0, 20.0], None]  # the sampled view: train size
    assert "Expression: \"the dog on the left\"\nKeyframe: 2s" in sampled.messages[0]["content"]
    assert "You are shown 3 frames" in sampled.messages[0]["content"]
    no_points = build_request({**sample, "ktg_points": None}, "veason/v1/style_a", 0, TeacherParams(), tmp_path)
    assert no_points.context["ktg_points"] is None
    # the first listed task is the default task
    assert no_points.key == build_request({**sample, "ktg_points": None}, "veason/v1/style_a", 0, TeacherParams(),
                                          tmp_path, get_task("veason")).key


def test_openai_messages_frames_tags_candidate_and_instruction(tmp_path):
    root = _sample_root(tmp_path)
    teacher = TeacherParams(backend="openai", image_size=80)
    request = build_request(SAMPLE, "rcot_aks/v1/style_a", 0, teacher, root, get_task("rcot_aks"))
    assert request.messages == []
    [message] = request.build()
    content = message["content"]
    assert message["role"] == "user"
    assert [c["type"] for c in content] == ["text", "image_url"] * 4 + ["text"]
    assert [c["text"] for c in content[0:8:2]] == ["<0s>", "<2s>", "<4s>", "Candidate keyframe <5s>"]
    assert content[-1]["text"].startswith("You are shown 3 frames") and "Candidate keyframe: 5s" in content[-1]["text"]
    images = []
    for part in content[1:8:2]:
        head, data = part["image_url"]["url"].split(",", 1)
        assert head == "data:image/jpeg;base64" and set(part) == {"type", "image_url"}
        images.append(_decode(base64.b64decode(data)))
    assert [im.shape for im in images] == [(60, 80, 3)] * 4  # longest side 160 → image_size 80
    red = [any(_is_red(p) for p in im.reshape(-1, 3)) for im in images]
    assert red == [True, True, False, False]  # frame 3 has no box; the candidate is shown unmarked
    plain = build_request(SAMPLE, "veason/v1/style_a", 0, teacher, root, get_task("veason")).build()
    assert len(plain[0]["content"]) == 7  # no candidate frame for the sampled view


def _stage_data(base: Path) -> Path:
    from stages.core.runner import RunnerParams
    from stages.ingest import ingest
    from stages.keyframes import select_keyframes
    from stages.params.ingest import IngestParams
    from stages.params.keyframes import KeyframesParams
    from stages.params.sample import SampleParams
    from stages.sample import sample_pools
    from tests.revos_factory import simple_video, write_root

    write_root(base / "root", [simple_video(f"S/train/v{i}", n_frames=7) for i in range(4)]
               + [simple_video("S/valid/w", split="valid")])
    ingest(IngestParams(), base / "root", base / "index", RunnerParams(kind="serial"))
    sample_pools(SampleParams(sft_first_k=2, grpo_size=2, sft_tasks=("veason", "rcot_aks")), 0, base / "index",
                 base / "sample")
    select_keyframes(KeyframesParams(train_size=112), 0, base / "root", base / "index", base / "sample",
                     base / "keyframes")
    return base


@pytest.fixture(scope="module")
def stage_data(tmp_path_factory) -> Path:
    return _stage_data(tmp_path_factory.mktemp("cot_kills"))


TEMPLATE_SETS = {"veason": "veason", "rcot_vdg": "rcot_description", "rcot_aks": "rcot_aks"}


def test_stage_rows_draws_results_report_and_lineage(stage_data, tmp_path, caplog):
    import logging

    import pandas as pd

    from stages.core import progress
    from stages.core.lineage import code_hash

    cot = CotParams(cache_dir=str(tmp_path / "cache"), traces_per_sample=2)
    seen: list[tuple[str, int, int]] = []
    def listener(desc: str, done: int, total: int) -> None:
        seen.append((desc, done, total))

    progress.add_listener(listener)
    caplog.set_level(logging.INFO, logger="stages.cot")
    try:
        report = generate_cot(TeacherParams(), cot, 3, stage_data / "root", stage_data / "keyframes",
                              tmp_path / "out")
    finally:
        progress.remove_listener(listener)
    table = pd.read_parquet(tmp_path / "out" / "generations.parquet")
    samples = pd.read_parquet(stage_data / "keyframes" / "sft.parquet")
    expected = []
    for sample in samples.itertuples():
        # veason has no needed task; rcot_aks needs rcot_vdg first: three tasks, two traces each
        for k, task in enumerate(("veason", "rcot_vdg", "rcot_aks")):
            for j in range(2):
                trace = 2 * k + j
                rng = np.random.default_rng(derive_seed(3, "cot", sample.sample_id, trace))
                style = ("style_a", "style_b", "style_c")[int(rng.integers(3))]
                expected.append((sample.sample_id, "sft", trace, task, TEMPLATE_SETS[task],
                                 f"{TEMPLATE_SETS[task]}/v1/{style}", "template-teacher-v1", "template",
                                 int(sample.keyframe_timestamp)))
    columns = ["sample_id", "pool", "trace_index", "task", "template_set", "template_id", "teacher", "backend",
               "keyframe_timestamp"]
    assert list(table[columns].itertuples(index=False, name=None)) == expected
    assert len({row[5] for row in expected}) > 3  # the draws are not all the same style
    assert (table["finish_reason"] == "stop").all() and (table["error"] == "").all()
    assert (table["attempts"] == 1).all() and (table["latency_s"] == 0.0).all()
    assert (table["prompt_tokens"] == 0).all() and (table["reasoning_tokens"] == 0).all()
    assert (table["completion_tokens"] == table["text"].str.split().map(len)).all()
    stored = {p.stem for p in (tmp_path / "cache").rglob("*.json")}
    assert set(table["request_key"]) == stored and len(stored) == len(table)  # the row names its cache entry
    n, words = len(table), int(table["completion_tokens"].sum())
    assert report.metrics == {"requests": n, "errors": 0, "from_cache": 0, "sent": 0, "prompt_tokens": 0,
                              "completion_tokens": words, "reasoning_tokens": 0, "answer_tokens": words,
                              "reasoning_budget_exhausted": 0, "estimated_cost_usd": 0.0,
                              "estimated_reasoning_cost_usd": 0.0}
    counts = Counter(table["template_id"])
    assert report.tables["template choices"].to_dict("records") == [
        {"template_id": t, "requests": c} for t, c in sorted(counts.items())]
    assert report.tables["errors"].to_dict("records") == []
    lineage = json.loads((tmp_path / "out" / "lineage.json").read_text())
    assert (lineage["stage"], lineage["seed"], lineage["counts"]) == ("cot", 3, {"requests": n})
    assert lineage["extra"] == {"teacher": "template-teacher-v1", "template_counts": dict(counts)}
    assert lineage["code_version"]["sha256"] == code_hash(["stages.cot", "stages.teacher"])
    assert set(lineage["inputs"]) == {"keyframes"} and lineage["params"]["cot"]["traces_per_sample"] == 2
    assert set(lineage["params"]) == {"teacher", "cot"} and lineage["params"]["teacher"]["backend"] == "template"
    # progress: one step per finished request, named; the summary line names the stage and its first metrics
    assert seen[-1] == ("cot requests", n, n) and len(seen) == n  # n < 50: every request reported
    assert [r.getMessage() for r in caplog.records if r.name == "stages.cot"][-1].startswith(
        f"cot: requests={n}, errors=0, from_cache=0, sent=0")
    again = generate_cot(TeacherParams(), cot, 3, stage_data / "root", stage_data / "keyframes", tmp_path / "again")
    assert (again.metrics["from_cache"], again.metrics["sent"]) == (n, 0)


def test_stage_tokens_costs_and_outcomes_through_an_endpoint(stage_data, tmp_path):
    import pandas as pd

    from tests.fake_openai import FakeOpenAI

    cot = CotParams(cache_dir=str(tmp_path / "cache"))
    with FakeOpenAI(reply="Step 1: a b", reasoning="r1 r2 r3") as server:
        teacher = TeacherParams(backend="openai", base_url=server.base_url, model="fake-vlm", api_key_required=False,
                                image_size=48, max_retries=0, price_in_per_m=1.23456, price_out_per_m=7.65432)
        full = generate_cot(teacher, cot, 0, stage_data / "root", stage_data / "keyframes", tmp_path / "full")
        cut = generate_cot(replace(teacher, max_tokens=3), cot, 0, stage_data / "root", stage_data / "keyframes",
                           tmp_path / "cut")
    n = full.metrics["requests"]
    table = pd.read_parquet(tmp_path / "full" / "generations.parquet")
    # each trace is asked with its own task: AKS traces also show the candidate frame (6 sampled + 1)
    images = Counter(sum(part["type"] == "image_url" for part in body["messages"][0]["content"])
                     for body in server.bodies[:n])
    assert images == {6: 2 * n // 3, 7: n // 3}  # veason, rcot_vdg: 6 frames; rcot_aks: 7
    assert set(table["teacher"]) == {"fake-vlm"} and set(table["backend"]) == {"openai"}
    assert (table["text"] == "Step 1: a b").all() and (table["finish_reason"] == "stop").all()
    assert (table["prompt_tokens"] == 100).all() and (table["completion_tokens"] == 7).all()
    assert (table["reasoning_tokens"] == 3).all() and (table["latency_s"] > 0).all()
    # 100 prompt tokens at 1.23456 $/M, 7 completion tokens (3 of them reasoning) at 7.65432 $/M, per request
    cost, reasoning_cost = n * (100 * 1.23456 + 7 * 7.65432) / 1e6, n * 3 * 7.65432 / 1e6
    assert full.metrics == {"requests": n, "errors": 0, "from_cache": 0, "sent": n, "prompt_tokens": 100 * n,
                            "completion_tokens": 7 * n, "reasoning_tokens": 3 * n, "answer_tokens": 4 * n,
                            "reasoning_budget_exhausted": 0, "estimated_cost_usd": round(cost, 4),
                            "estimated_reasoning_cost_usd": round(reasoning_cost, 4)}
    assert round(cost, 4) != round(cost, 5) and round(reasoning_cost, 4) != round(reasoning_cost, 5)
    # max_tokens 3: the reasoning spends it all, no content: every request is its own named outcome
    assert cut.metrics["errors"] == cut.metrics["reasoning_budget_exhausted"] == n
    assert (cut.metrics["completion_tokens"], cut.metrics["reasoning_tokens"], cut.metrics["answer_tokens"]) == (
        3 * n, 3 * n, 0)
    assert cut.tables["errors"].to_dict("records") == [{"error": "reasoning exhausted the budget", "requests": n}]


def test_costs_are_per_million_tokens_exactly():
    import pandas as pd

    from stages.cot import _report

    # 100 M prompt and 200 M completion tokens (100 M of them reasoning) at 1 $/M: 300 $ and 100 $, to the cent
    # and beyond (a divisor off by one part in a million would show in the fourth decimal)
    table = pd.DataFrame({"prompt_tokens": [60_000_000, 40_000_000], "completion_tokens": [150_000_000, 50_000_000],
                          "reasoning_tokens": [70_000_000, 30_000_000], "error": ["", ""], "template_id": [0, 1]})
    report = _report(table, [], 2, TeacherParams(price_in_per_m=1.0, price_out_per_m=1.0))
    assert (report.metrics["estimated_cost_usd"], report.metrics["estimated_reasoning_cost_usd"]) == (300.0, 100.0)
    assert report.stage == "cot"


# The request keys of SAMPLE's first veason trace, for each backend. They name the files of a persisted cache:
# renaming or dropping a field of the identity re-asks every cached teacher reply, so it must be a deliberate
# change of these literals (and of FRAME_ENCODING's docs), never a side effect.
GOLDEN_KEYS = {"template": "50ca419e0c2076c2095b75b3ad817795663839e33b5666f50c531e8e1f620520",
               "openai": "6759621c8999afc6d8b49f95f0ca6b8cb4d47f82d7062a42d8d9f7292be52d3a"}


@pytest.mark.parametrize("backend", sorted(GOLDEN_KEYS))
def test_request_keys_are_stable(backend):
    teacher = OPENAI if backend == "openai" else TeacherParams()
    assert build_request(SAMPLE, "veason/v1/style_a", 0, teacher, Path("/nonexistent")).key == GOLDEN_KEYS[backend]


def test_an_aks_request_key_names_the_candidate_frame_it_shows():
    aks = get_task("rcot_aks")
    key = build_request(SAMPLE, "rcot_aks/v1/style_a", 0, OPENAI, Path("/nonexistent"), aks).key
    other = build_request({**SAMPLE, "aks_frame_name": "00007"}, "rcot_aks/v1/style_a", 0, OPENAI,
                          Path("/nonexistent"), aks).key
    assert key != other  # the same instruction and frames, another candidate image
