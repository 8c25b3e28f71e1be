"""Response-cache keys of the difficulty rater and of HTFS through an OpenAI-compatible endpoint: a key changes with
every teacher field that changes the reply (what is sent: model, sampling, token limit, the frames at the size sent,
provider fields) and with no other (transport settings: retries, timeouts, concurrency, prices).

The expected split is written here from the request body the OpenAI client sends, not read from the code."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from stages.difficulty import _rating_request
from stages.params.teacher import TeacherParams
from stages.teacher.client import cache_key

BASE = TeacherParams(backend="openai", model="vlm-a", api_key_required=False)
# field → another valid value; REPLY: fields that change what the endpoint answers
CHANGES = {
    "model": "vlm-b", "temperature": 0.2, "max_tokens": 77, "image_size": 96,
    "extra_body": {"top_k": 5}, "thinking": "enabled",
    "timeout_s": 9.0, "max_retries": 1, "backoff_base_s": 0.5, "backoff_max_s": 30.0, "concurrency": 3, "rpm": 10,
    "price_in_per_m": 1.5, "price_out_per_m": 2.5, "api_key_env": "VRSFLOW_OTHER_KEY", "api_key_required": True,
}
REPLY = {"model", "temperature", "max_tokens", "image_size", "extra_body", "thinking"}


def _frames_root(tmp_path: Path) -> tuple[Path, dict]:
    root = tmp_path / "root"
    for name in ("00000", "00003"):
        path = root / "JPEGImages" / "v1" / f"{name}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((120, 160, 3), 90, np.uint8)).save(path)
    sample = {"sample_id": "s1", "video": "v1", "text": "the red star", "timestamps": [0, 3],
              "frame_names": ["00000", "00003"]}
    return root, sample


@pytest.mark.parametrize("field", sorted(CHANGES))
def test_difficulty_key_changes_with_exactly_the_fields_that_change_the_reply(tmp_path: Path, field: str) -> None:
    root, sample = _frames_root(tmp_path)
    other = dataclasses.replace(BASE, **{field: CHANGES[field]})
    keys = [cache_key(_rating_request(sample, teacher, root, 0).key, teacher) for teacher in (BASE, other)]
    assert (keys[0] != keys[1]) == (field in REPLY), field


def test_difficulty_key_names_the_attempt(tmp_path: Path) -> None:
    root, sample = _frames_root(tmp_path)
    assert _rating_request(sample, BASE, root, 0).key != _rating_request(sample, BASE, root, 1).key


@pytest.mark.parametrize("field", sorted(CHANGES))
def test_htfs_key_changes_with_exactly_the_fields_that_change_the_reply(tmp_path: Path, monkeypatch,
                                                                        field: str) -> None:
    from stages.tasks import inference
    from stages.teacher.client import ChatResult, TeacherClient

    sent: list[str] = []

    async def run_all(self, requests):  # records the keys the transport would look up, answers nothing
        sent.extend(cache_key(r.key, self.params) for r in requests)
        return [ChatResult(key=r.key, text="", error="offline") for r in requests]

    monkeypatch.setattr(TeacherClient, "run_all", run_all)
    frames = [Image.fromarray(np.full((32, 32, 3), v, np.uint8)) for v in (10, 200)]
    chat = [{"role": "user", "content": [{"type": "image"}, {"type": "image"}, {"type": "text", "text": "q"}]}]
    other = dataclasses.replace(BASE, **{field: CHANGES[field]})
    for teacher in (BASE, other):
        inference.openai_generate(teacher, tmp_path / "cache")([chat], [frames])  # frames at teacher.image_size
    assert (sent[0] != sent[1]) == (field in REPLY), field
