"""Thinking teachers against a local chat-completions server that answers like one (tests/fake_openai.py):
reasoning first, in `reasoning_content` (Ark, vLLM's reasoning parsers) or `reasoning` (newer vLLM), usage with
reasoning tokens, and the budget spent the provider's way. Parsed, cached, counted; a reply whose reasoning
spent the whole budget is its own outcome; provider fields reach the server and key the cache."""

from __future__ import annotations

import ast
import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest

from stages.core.typed_config import build
from stages.params import ParamsError
from stages.params.teacher import TeacherParams
from stages.teacher.cache import ResponseCache, request_key
from stages.teacher.client import (
    EMPTY_RESPONSE,
    REASONING_BUDGET_EXHAUSTED,
    TRUNCATED_RESPONSE,
    ChatRequest,
    TeacherClient,
    cache_key,
    provider_fields,
)
from tests.fake_openai import FakeOpenAI

THOUGHT = " ".join(f"hmm{i}" for i in range(40))  # 40 reasoning tokens (one per word on the test server)
ANSWER = "Step 1: six words answer here."  # 6 answer tokens


def params(server: FakeOpenAI, **overrides: object) -> TeacherParams:
    base = TeacherParams(backend="openai", base_url=server.base_url, model="fake-vlm", api_key_required=False,
                         concurrency=4, timeout_s=5.0, max_retries=3, backoff_base_s=0.01, backoff_max_s=0.02)
    return replace(base, **overrides)


def requests(n: int) -> list[ChatRequest]:
    return [ChatRequest(key=request_key({"q": i}), messages=[{"role": "user", "content": f"question {i}"}])
            for i in range(n)]


def run(client: TeacherClient, reqs: list[ChatRequest]):
    return asyncio.run(client.run_all(reqs))


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_is_parsed_cached_and_kept_out_of_the_text(tmp_path: Path, field: str) -> None:
    cache = ResponseCache(tmp_path)
    with FakeOpenAI(reply=ANSWER, reasoning=THOUGHT, reasoning_field=field) as server:
        first = run(TeacherClient(params(server, max_tokens=100), cache), requests(3))
        again_client = TeacherClient(params(server, max_tokens=100), ResponseCache(tmp_path))
        again = run(again_client, requests(3))
    for result in first:
        assert result.text == ANSWER and result.finish_reason == "stop" and not result.error
        assert result.reasoning == THOUGHT and THOUGHT not in result.text
        assert (result.reasoning_tokens, result.completion_tokens) == (40, 46)
    stored = json.loads(next(tmp_path.rglob("*.json")).read_text())
    assert stored["reasoning"] == THOUGHT and stored["text"] == ANSWER and stored["reasoning_tokens"] == 40
    assert again_client.sent == 0 and server.total_requests == 3  # the rerun read everything from the cache
    assert [(r.text, r.reasoning, r.reasoning_tokens, r.from_cache) for r in again] == \
        [(ANSWER, THOUGHT, 40, True)] * 3


def test_reasoning_that_spends_the_whole_budget_is_its_own_outcome(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    with FakeOpenAI(reply=ANSWER, reasoning=THOUGHT) as server:  # vLLM / OpenAI: max_tokens covers both
        exhausted = run(TeacherClient(params(server, max_tokens=30), cache), requests(2))
    for result in exhausted:
        assert result.error.startswith(REASONING_BUDGET_EXHAUSTED), result.error
        assert (result.text, result.finish_reason, result.reasoning_tokens) == ("", "length", 30)
        assert result.attempts == 1  # not retried: the same request would spend the same budget …
    assert server.total_requests == 2 and len(cache) == 2  # … and it was paid for: cached


def test_reasoning_tokens_without_usage_detail_still_name_the_outcome(tmp_path: Path) -> None:
    with FakeOpenAI(reply=ANSWER, reasoning=THOUGHT, reasoning_field="reasoning",
                    report_reasoning_tokens=False) as server:
        [result] = run(TeacherClient(params(server, max_tokens=30), ResponseCache(tmp_path)), requests(1))
    assert result.error.startswith(REASONING_BUDGET_EXHAUSTED) and result.reasoning_tokens == 0
    assert result.reasoning == " ".join(THOUGHT.split()[:30]) and result.completion_tokens == 30


def test_answer_cut_after_reasoning_and_answer_only_budgets(tmp_path: Path) -> None:
    with FakeOpenAI(reply=ANSWER, reasoning=THOUGHT) as server:  # 40 thought + 3 of the 6 answer tokens
        [cut] = run(TeacherClient(params(server, max_tokens=43), ResponseCache(tmp_path / "a")), requests(1))
    assert cut.error == TRUNCATED_RESPONSE + " after 40 reasoning tokens" and cut.text == "Step 1: six"
    # Ark: max_tokens bounds the answer only (the reasoning is not counted against it)
    with FakeOpenAI(reply=ANSWER, reasoning=THOUGHT, budget="answer") as server:
        [ark] = run(TeacherClient(params(server, max_tokens=10), ResponseCache(tmp_path / "b")), requests(1))
    assert (ark.text, ark.error, ark.reasoning_tokens, ark.completion_tokens) == (ANSWER, "", 40, 46)
    # a plain empty reply (no reasoning) keeps its own, older outcome
    with FakeOpenAI(faults=["empty"]) as server:
        [empty] = run(TeacherClient(params(server), ResponseCache(tmp_path / "c")), requests(1))
    assert empty.error == EMPTY_RESPONSE


@pytest.mark.parametrize(("overrides", "expected", "thinks"), [
    ({"thinking": "disabled"}, {"thinking": {"type": "disabled"}}, False),
    ({"thinking": "enabled"}, {"thinking": {"type": "enabled"}}, True),
    ({"thinking": "disabled", "thinking_switch": "chat_template"},
     {"chat_template_kwargs": {"enable_thinking": False}}, False),
    ({"extra_body": {"reasoning_effort": "low", "nested": {"a": [1, 2.5, None, True]}}},
     {"reasoning_effort": "low", "nested": {"a": [1, 2.5, None, True]}}, True),
])
def test_provider_fields_reach_the_server(tmp_path: Path, overrides: dict, expected: dict, thinks: bool) -> None:
    teacher = build(TeacherParams, {"backend": "openai", "model": "fake-vlm", "api_key_required": False,
                                    **overrides})
    with FakeOpenAI(reply=ANSWER, reasoning=THOUGHT) as server:
        [result] = run(TeacherClient(replace(teacher, base_url=server.base_url), ResponseCache(tmp_path)),
                       requests(1))
    [body] = server.bodies
    assert {k: body[k] for k in expected} == expected == provider_fields(teacher)
    assert body["max_tokens"] == teacher.max_tokens and body["model"] == "fake-vlm"
    assert bool(result.reasoning) is thinks and result.text == ANSWER


def test_cache_key_changes_with_what_changes_the_reply_and_nothing_else() -> None:
    key = request_key({"q": 0})
    base = TeacherParams(backend="openai")
    assert cache_key(key, base) == key  # no provider field: caches written before them stay valid
    off = replace(base, thinking="disabled")
    on = replace(base, thinking="enabled")
    assert len({cache_key(key, base), cache_key(key, off), cache_key(key, on)}) == 3
    # the same body, however it is written, is the same request
    assert cache_key(key, off) == cache_key(key, replace(base, extra_body={"thinking": {"type": "disabled"}}))
    assert cache_key(key, replace(base, extra_body={"top_k": 5})) != cache_key(key, base)
    assert cache_key(key, replace(off, thinking_switch="chat_template")) != cache_key(key, off)
    # transport settings never change the reply
    for change in ({"concurrency": 1}, {"rpm": 9}, {"timeout_s": 3.0}, {"max_retries": 0}, {"price_out_per_m": 5.0},
                   {"api_key_env": "VRSFLOW_OTHER_KEY"}, {"base_url": "http://localhost:8000/v1"}):
        assert cache_key(key, replace(off, **change)) == cache_key(key, off)
    # the offline template backend sends nothing: its keys never move
    assert cache_key(key, replace(TeacherParams(), thinking="disabled", extra_body={"x": 1})) == key


def test_a_new_thinking_switch_is_a_new_request(tmp_path: Path) -> None:
    with FakeOpenAI(reply=ANSWER, reasoning=THOUGHT) as server:
        run(TeacherClient(params(server), ResponseCache(tmp_path)), requests(2))
        run(TeacherClient(params(server, thinking="disabled"), ResponseCache(tmp_path)), requests(2))
        run(TeacherClient(params(server, thinking="disabled", concurrency=1), ResponseCache(tmp_path)), requests(2))
    assert server.total_requests == 4 and len(ResponseCache(tmp_path)) == 4


@pytest.mark.parametrize(("block", "message"), [
    ({"extra_body": {"max_tokens": 10}}, "teacher.extra_body: sets ['max_tokens'], which the client writes itself"),
    ({"extra_body": {"x": float("inf")}}, "teacher.extra_body: must be JSON"),
    ({"extra_body": {"when": __import__("datetime").date(2025, 1, 1)}}, "teacher.extra_body: must be JSON"),
    ({"extra_body": ["thinking"]}, "teacher.extra_body: expected a mapping"),
    ({"thinking": "enabled", "extra_body": {"thinking": {"type": "auto"}}}, "teacher.thinking: is 'enabled' but"),
    ({"thinking": "auto", "thinking_switch": "chat_template"}, "teacher.thinking: 'auto' has no chat_template"),
    ({"thinking": "off"}, "teacher.thinking: expected one of"),
])
def test_bad_provider_fields_are_one_clear_line(block: dict, message: str) -> None:
    with pytest.raises(ParamsError) as caught:
        build(TeacherParams, block, "teacher")
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_the_teacher_never_imports_tasks() -> None:
    """stages/teacher is a transport that stages/tasks use (tasks own their prompts), never the reverse."""
    root = Path(__file__).resolve().parents[2] / "stages" / "teacher"
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n == "stages.tasks" or n.startswith("stages.tasks.") for n in names), path
