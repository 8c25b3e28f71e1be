"""The CoT stage's response-cache key (scripts/mutation.sh cot / teacher, docs/testing.md).

Rule (stages/cot `build_request` + stages/teacher/client `cache_key`): the key of a request changes with every
field that changes the reply — what is sent (model, temperature, max_tokens, the frames at image_size, the
provider fields: extra_body and the thinking switch) and what it asks (sample, template, trace) — and with no
other field (endpoint plumbing, retries, pacing, prices, the key's env-var name). Checked one field at a time
against the final key the client looks up.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields, replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stages.core.params import TeacherParams
from stages.cot import build_request
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
    "price_in_per_m": (3.0, False),
    "price_out_per_m": (4.0, False),
    "image_size": (224, True),
    "extra_body": ({"top_k": 6}, True),
    "thinking": ("disabled", True),
    "thinking_switch": ("chat_template", False),  # with thinking "default" no switch is sent
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
        if name != "backend":  # the template teacher sends nothing: no teacher field changes its answer
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
