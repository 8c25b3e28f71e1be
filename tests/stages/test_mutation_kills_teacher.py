"""The teacher transport's rules, pinned one value at a time (scripts/mutation.sh teacher, docs/testing.md).

Against real servers on localhost: tests/fake_openai.py for the protocol and its faults, and `Scripted` below, an
http.server that answers each POST with the next scripted (status, body) — for the replies a real endpoint can
send that the fake does not (4xx, 408, JSON of the wrong shape, odd usage blocks). Expected values are written
by hand from the protocol and the module docstring, never computed with the code under test.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shutil
import socket
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import MappingProxyType

import pytest

from stages.params.teacher import TeacherParams
from stages.teacher import client as client_module
from stages.teacher.cache import ResponseCache
from stages.teacher.client import (
    EMPTY_RESPONSE,
    REASONING_BUDGET_EXHAUSTED,
    TRUNCATED_RESPONSE,
    ChatRequest,
    ChatResult,
    RateLimiter,
    RetryableError,
    TeacherClient,
    outcome,
    parse_retry_after,
    provider_fields,
)
from tests.fake_openai import FakeOpenAI

QUESTION = [{"role": "user", "content": "question"}]


class Scripted:
    """A real HTTP server on localhost: each POST gets the next scripted (status, body[, headers]) reply, in order;
    it records the request paths and bodies."""

    def __init__(self, replies: list[tuple]) -> None:
        self.replies = list(replies)
        self.bodies: list[dict] = []
        self.paths: list[str] = []
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                scripted.bodies.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
                scripted.paths.append(self.path)
                status, body, *headers = scripted.replies.pop(0)
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                for name, value in (headers[0] if headers else {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.01,), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> Scripted:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def reply(content: object = "the answer", finish: object = "stop", usage: dict | None = None,
          **message: object) -> tuple[int, dict]:
    body: dict = {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": content, **message},
                               "finish_reason": finish}]}
    if usage is not None:
        body["usage"] = usage
    return 200, body


def teacher(base_url: str, **overrides: object) -> TeacherParams:
    base = TeacherParams(backend="openai", base_url=base_url, model="vlm", api_key_required=False, concurrency=4,
                         timeout_s=5.0, max_retries=0, backoff_base_s=0.01, backoff_max_s=0.03, temperature=0.25,
                         max_tokens=321)
    return replace(base, **overrides)


def run(client: TeacherClient, requests: list[ChatRequest], on_done=None) -> list[ChatResult]:
    return asyncio.run(client.run_all(requests, on_done))


def one(replies: list[tuple], tmp_path: Path, **overrides: object) -> tuple[ChatResult, Scripted]:
    with Scripted(replies) as server:
        [result] = run(TeacherClient(teacher(server.base_url, **overrides), ResponseCache(tmp_path)),
                       [ChatRequest(key="k1", messages=QUESTION)])
    return result, server


# ---- cache ----------------------------------------------------------------------------------------------------

def test_cache_creates_nested_folders_and_reopens(tmp_path: Path) -> None:
    folder = tmp_path / "a" / "b" / "c"
    cache = ResponseCache(folder)
    cache.put("ab12", {"x": 1})
    again = ResponseCache(folder)  # an existing folder is fine
    assert again.get("ab12") == {"x": 1} and len(again) == 1
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == ["ab/ab12.json"]
    (folder / "cd").mkdir()
    (folder / "cd" / "cd34.json").mkdir()  # not a file: no record
    assert again.get("cd34") is None
    shutil.rmtree(folder)  # the folder went away after the cache was opened: a put makes it again
    again.put("ef56", {"y": 2})
    assert again.get("ef56") == {"y": 2}


# ---- records, errors, outcomes --------------------------------------------------------------------------------

def test_record_is_every_field_but_from_cache() -> None:
    result = ChatResult(key="k", text="t", finish_reason="stop", prompt_tokens=1, completion_tokens=2,
                        reasoning="r", reasoning_tokens=3, latency_s=0.5, attempts=4, error="e", from_cache=True)
    assert result.record() == {"key": "k", "text": "t", "finish_reason": "stop", "prompt_tokens": 1,
                               "completion_tokens": 2, "reasoning": "r", "reasoning_tokens": 3, "latency_s": 0.5,
                               "attempts": 4, "error": "e"}


def test_retryable_error_keeps_message_and_wait() -> None:
    err = RetryableError("429 rate limited", 1.5)
    assert (str(err), err.retry_after) == ("429 rate limited", 1.5)
    assert RetryableError("x").retry_after is None


@pytest.mark.parametrize(("error", "name"), [
    ("reasoning exhausted the budget: finish_reason=length …", REASONING_BUDGET_EXHAUSTED),
    ("truncated response (finish_reason=length) after 3 reasoning tokens", TRUNCATED_RESPONSE),
    ("truncated response (finish_reason=length)", TRUNCATED_RESPONSE),
    ("empty response", EMPTY_RESPONSE),
    ("500 server error", "500 server error"),
    ("", ""),
])
def test_outcome_is_the_named_prefix(error: str, name: str) -> None:
    assert outcome(error) == name


def test_named_outcomes_are_the_filters_texts() -> None:
    assert (EMPTY_RESPONSE, TRUNCATED_RESPONSE, REASONING_BUDGET_EXHAUSTED) == (
        "empty response", "truncated response (finish_reason=length)", "reasoning exhausted the budget")


def test_short_error_text() -> None:
    short = client_module._short
    assert short(ValueError("first line\nsecond")) == "first line"
    assert short(ValueError("x" * 300)) == "x" * 200
    assert short(ValueError()) == "ValueError"


@pytest.mark.parametrize(("headers", "seconds"), [
    ({"retry-after-ms": "-5"}, 0.0), ({"Retry-After": "-2"}, 0.0), ({"RETRY-AFTER-MS": "250"}, 0.25),
    ({"retry-after-ms": "soon"}, None), ({"Retry-After": ""}, None),
])
def test_parse_retry_after_edges(headers: dict[str, str], seconds: float | None) -> None:
    assert parse_retry_after(headers, now=0.0) == seconds


def test_parse_retry_after_date_against_the_clock() -> None:
    wait = parse_retry_after({"Retry-After": "Fri, 01 Jan 2100 00:00:00 GMT"})
    assert wait == pytest.approx(4102444800.0 - time.time(), abs=5.0)


# ---- provider fields ------------------------------------------------------------------------------------------

def test_provider_fields_plain_json_and_auto() -> None:
    params = replace(TeacherParams(backend="openai"), extra_body=MappingProxyType(
        {"nested": MappingProxyType({"k": (1, [2, (3,)])}), 7: "seven"}), thinking="auto")
    assert provider_fields(params) == {"nested": {"k": [1, [2, [3]]]}, "7": "seven", "thinking": {"type": "auto"}}
    assert provider_fields(TeacherParams(backend="openai")) == {}


# ---- rate limiter ---------------------------------------------------------------------------------------------

def test_rate_limiter_interval() -> None:
    assert RateLimiter(120).interval == 0.5 and RateLimiter(1).interval == 60.0
    assert RateLimiter(0).interval == 0.0 and RateLimiter(-3).interval == 0.0


def test_rate_limiter_spaces_starts_evenly() -> None:
    async def starts(rpm: int, n: int) -> list[float]:
        limiter = RateLimiter(rpm)
        out: list[float] = []

        async def go() -> None:
            await limiter.wait()
            out.append(time.monotonic())

        begin = time.monotonic()
        # bounded: a wrong delay (e.g. the clock's own value, hours) fails here instead of hanging the run
        await asyncio.wait_for(asyncio.gather(*(go() for _ in range(n))), timeout=5.0)
        return [t - begin for t in sorted(out)]

    spaced = asyncio.run(starts(600, 4))  # one start per 0.1 s, the first at once
    assert spaced[0] < 0.05
    assert all(b - a >= 0.09 for a, b in zip(spaced, spaced[1:], strict=False)), spaced
    assert spaced[-1] < 1.0
    assert asyncio.run(starts(0, 20))[-1] < 0.05  # unlimited


# ---- retries: the backoff schedule, Retry-After, exhaustion ---------------------------------------------------

RETRY_LOG = re.compile(r"^request (\S+) attempt (\d+) failed \((.+)\); retrying in (\d+\.\d\d)s$")


def _retry_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, ...]]:
    lines = [r.getMessage() for r in caplog.records if r.name == "stages.teacher.client"]
    parsed = [RETRY_LOG.match(line) for line in lines]
    assert all(parsed), lines
    return [m.groups() for m in parsed if m]


@pytest.fixture
def upper_jitter(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, float]]:
    """random.uniform recorded and pinned to its upper bound: the full-jitter delay is then the backoff itself."""
    calls: list[tuple[float, float]] = []

    def uniform(a: float, b: float) -> float:
        calls.append((a, b))
        return b

    monkeypatch.setattr(client_module.random, "uniform", uniform)
    return calls


def test_backoff_doubles_up_to_its_cap_and_stops_after_the_last_attempt(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, upper_jitter: list) -> None:
    caplog.set_level(logging.DEBUG, logger="stages.teacher.client")
    request = ChatRequest(key="0123456789abcdef-long-key", messages=QUESTION)
    with FakeOpenAI(faults=["500"] * 10) as server:
        client = TeacherClient(teacher(server.base_url, max_retries=3), ResponseCache(tmp_path))
        start = time.monotonic()
        [result] = run(client, [request])
        elapsed = time.monotonic() - start
    # base 0.01, cap 0.03: 0.01, 0.02, 0.03 (0.04 capped); no wait after the fourth and last attempt
    assert upper_jitter == [(0, 0.01), (0, 0.02), (0, 0.03)]
    assert _retry_lines(caplog) == [("0123456789ab", str(n), "500 server error", f"{0.01 * n:.2f}") for n in (1, 2, 3)]
    assert [len(a) for a in server.attempts.values()] == [4] and client.sent == 4
    assert (result.key, result.text, result.finish_reason, result.attempts, result.error) == (
        request.key, "", "", 4, "500 server error")
    assert 0.06 <= result.latency_s <= elapsed and result.latency_s == round(result.latency_s, 4)
    assert len(ResponseCache(tmp_path)) == 0


def test_retry_after_lengthens_the_wait_never_shortens_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, upper_jitter: list) -> None:
    caplog.set_level(logging.DEBUG, logger="stages.teacher.client")
    with FakeOpenAI(faults=["429", "429"], retry_after=0.08) as server:
        client = TeacherClient(teacher(server.base_url, max_retries=2, backoff_base_s=0.12, backoff_max_s=0.12),
                               ResponseCache(tmp_path / "a"))
        [longer] = run(client, [ChatRequest(key="k-longer", messages=QUESTION)])
    assert [line[3] for line in _retry_lines(caplog)] == ["0.12", "0.12"]  # backoff 0.12 > Retry-After 0.08
    caplog.clear()
    with FakeOpenAI(faults=["429"], retry_after=0.15) as server:
        client = TeacherClient(teacher(server.base_url, max_retries=1), ResponseCache(tmp_path / "b"))
        [waited] = run(client, [ChatRequest(key="k-waited", messages=QUESTION)])
    assert _retry_lines(caplog) == [("k-waited", "1", "429 rate limited", "0.15")]  # backoff 0.01 < Retry-After 0.15
    assert (longer.attempts, longer.error, waited.attempts, waited.error) == (3, "", 2, "")
    assert waited.latency_s >= 0.15


def test_the_sdk_does_not_retry_on_its_own(tmp_path: Path) -> None:
    with FakeOpenAI(faults=["500"]) as server:
        [result] = run(TeacherClient(teacher(server.base_url, max_retries=0), ResponseCache(tmp_path)),
                       [ChatRequest(key="k", messages=QUESTION)])
    assert server.total_requests == 1 and (result.attempts, result.error) == (1, "500 server error")


# ---- what is sent ---------------------------------------------------------------------------------------------

def test_request_body_is_exactly_what_params_and_request_say(tmp_path: Path) -> None:
    fmt = {"type": "json_object"}
    with Scripted([reply(), reply()]) as server:
        params = teacher(server.base_url, extra_body={"top_k": 5}, thinking="disabled")
        client = TeacherClient(params, ResponseCache(tmp_path))
        run(client, [ChatRequest(key="a", messages=QUESTION), ChatRequest(key="b", messages=QUESTION,
                                                                          response_format=fmt)])
    by_format = sorted(server.bodies, key=lambda b: "response_format" in b)
    assert by_format[0] == {"model": "vlm", "messages": QUESTION, "temperature": 0.25, "max_tokens": 321,
                            "top_k": 5, "thinking": {"type": "disabled"}}
    assert by_format[1] == {**by_format[0], "response_format": fmt}


def test_messages_are_built_only_when_sent(tmp_path: Path) -> None:
    built: list[str] = []
    lazy = [{"role": "user", "content": "built lazily"}]

    def build() -> list[dict]:
        built.append("built")
        return lazy

    with Scripted([reply(), reply()]) as server:
        run(TeacherClient(teacher(server.base_url), ResponseCache(tmp_path / "a")),
            [ChatRequest(key="lazy", build=build), ChatRequest(key="given", messages=QUESTION, build=build)])
    assert built == ["built"]  # given messages win over the builder
    assert sorted(str(b["messages"]) for b in server.bodies) == sorted([str(QUESTION), str(lazy)])
    built.clear()
    writer_saw: list[list] = []

    def writer(request: ChatRequest) -> str:
        writer_saw.append(request.messages)
        return "offline words"

    run(TeacherClient(TeacherParams(), ResponseCache(tmp_path / "b"), writer), [ChatRequest(key="t", build=build)])
    assert built == [] and writer_saw == [[]]  # the template backend never builds images


def test_api_key_from_the_env_var_or_a_placeholder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VRSFLOW_KILLS_KEY", "sk-local-1")
    monkeypatch.delenv("VRSFLOW_KILLS_ABSENT", raising=False)
    with FakeOpenAI() as server:
        for env in ("VRSFLOW_KILLS_KEY", "VRSFLOW_KILLS_ABSENT"):
            run(TeacherClient(teacher(server.base_url, api_key_env=env), ResponseCache(tmp_path / env)),
                [ChatRequest(key="k", messages=QUESTION)])
    assert server.auth_headers == {"Bearer sk-local-1", "Bearer EMPTY"}
    with FakeOpenAI() as server:
        client = TeacherClient(teacher(server.base_url, api_key_env="VRSFLOW_KILLS_ABSENT", api_key_required=True),
                               ResponseCache(tmp_path / "c"))
        with pytest.raises(RuntimeError) as caught:
            run(client, [ChatRequest(key="k", messages=QUESTION)])
    assert str(caught.value) == "environment variable VRSFLOW_KILLS_ABSENT (the API key) is not set"
    assert server.total_requests == 0


# ---- template backend -----------------------------------------------------------------------------------------

def test_template_backend_result_and_cache(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    seen: list[ChatResult] = []
    client = TeacherClient(TeacherParams(), cache, lambda request: f"Step 1: {request.context['x']} two  three")
    [result] = run(client, [ChatRequest(key="tk", context={"x": "one"})], seen.append)
    assert result.record() == {"key": "tk", "text": "Step 1: one two  three", "finish_reason": "stop",
                               "prompt_tokens": 0, "completion_tokens": 5, "reasoning": "", "reasoning_tokens": 0,
                               "latency_s": 0.0, "attempts": 1, "error": ""}
    assert seen == [result] and client.sent == 0 and cache.get("tk") == result.record()
    with pytest.raises(RuntimeError, match="^template backend needs a template writer$"):
        run(TeacherClient(TeacherParams(), ResponseCache(tmp_path / "b")), [ChatRequest(key="x")])


# ---- run_all --------------------------------------------------------------------------------------------------

def test_order_callbacks_cache_hits_and_client_reuse(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    for key in ("r1", "r3"):
        cache.put(key, ChatResult(key=key, text=f"cached {key}", finish_reason="stop", attempts=1).record())
    requests = [ChatRequest(key=f"r{i}", messages=[{"role": "user", "content": f"q{i}"}]) for i in range(5)]
    done: list[ChatResult] = []
    with FakeOpenAI(reply="fresh", latency=0.02) as server:
        client = TeacherClient(teacher(server.base_url, concurrency=1), cache)
        results = run(client, requests, done.append)
        again = run(client, [ChatRequest(key="r5", messages=[{"role": "user", "content": "q5"}])])  # same client
    assert [(r.key, r.text, r.from_cache) for r in results] == [
        ("r0", "fresh", False), ("r1", "cached r1", True), ("r2", "fresh", False), ("r3", "cached r3", True),
        ("r4", "fresh", False)]
    assert sorted(map(id, done)) == sorted(map(id, results))
    assert server.max_in_flight == 1 and client.sent == 4 and server.total_requests == 4
    assert (again[0].text, again[0].error) == ("fresh", "") and client._openai is None


# ---- replies: status codes, shapes, outcomes ------------------------------------------------------------------

def test_client_errors_are_final_408_and_5xx_retried(tmp_path: Path) -> None:
    result, server = one([(400, {"error": {"message": "bad image"}})], tmp_path / "a", max_retries=2)
    assert (result.key, result.error, result.attempts, len(server.bodies)) == (
        "k1", "400: Error code: 400 - bad image", 1, 1)
    assert server.paths == ["/v1/chat/completions"]
    assert len(ResponseCache(tmp_path / "a")) == 0
    result, server = one([(408, {"error": {"message": "slow"}}), (503, {"error": {"message": "busy"}}), reply()],
                         tmp_path / "b", max_retries=2)
    assert (result.text, result.error, result.attempts, len(server.bodies)) == ("the answer", "", 3, 3)
    result, _ = one([(408, {"error": {"message": "slow"}})], tmp_path / "c")
    assert result.error == "408 server error"
    result, _ = one([(503, {"error": {"message": "busy"}})], tmp_path / "d")
    assert result.error == "503 server error"


@pytest.mark.parametrize("status", [408, 503])
def test_server_errors_honour_retry_after(tmp_path: Path, caplog: pytest.LogCaptureFixture, upper_jitter: list,
                                          status: int) -> None:
    caplog.set_level(logging.DEBUG, logger="stages.teacher.client")
    result, _ = one([(status, {"error": {"message": "busy"}}, {"Retry-After": "0.12"}), reply()], tmp_path,
                    max_retries=1)
    assert _retry_lines(caplog) == [("k1", "1", f"{status} server error", "0.12")]  # not the 0.01 backoff
    assert (result.text, result.attempts) == ("the answer", 2)


def test_connection_refused_and_timeout_are_named(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # past the pre-flight (a server that went down after it), each request names its failure
    [refused] = run(TeacherClient(teacher(f"http://127.0.0.1:{port}/v1", max_retries=1), ResponseCache(tmp_path),
                                  preflight=False), [ChatRequest(key="k", messages=QUESTION)])
    assert (refused.error, refused.attempts) == ("connection error: Connection error.", 2)
    with FakeOpenAI(faults=["timeout"], hang=1.0) as server:
        [slow] = run(TeacherClient(teacher(server.base_url, timeout_s=0.2), ResponseCache(tmp_path)),
                     [ChatRequest(key="k", messages=QUESTION)])
    assert (slow.error, slow.attempts) == ("timeout", 1)


@pytest.mark.parametrize("body", [
    b"<html>not json", b"null", b"[1, 2]", {"choices": []}, {"choices": 5}, {"choices": [5]},
    {"choices": [{"index": 0, "message": {"role": "assistant", "content": 5}, "finish_reason": "stop"}]},
    {"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}],
     "usage": {"prompt_tokens": "many"}},
])
def test_malformed_bodies_are_retried_then_recorded_never_raised(tmp_path: Path, body: object) -> None:
    result, server = one([(200, body), reply("fine now")], tmp_path / "retried", max_retries=1)
    assert (result.text, result.error, result.attempts, len(server.bodies)) == ("fine now", "", 2, 2)
    result, _ = one([(200, body)], tmp_path / "failed")
    assert result.error.startswith("malformed response body: ") and result.attempts == 1
    assert len(result.error) <= len("malformed response body: ") + 200
    assert len(ResponseCache(tmp_path / "failed")) == 0


@pytest.mark.parametrize(("body", "error"), [
    (b"<html>not json", "Expecting value: line 1 column 1 (char 0)"),
    ({"choices": 5}, "'int' object is not subscriptable"),
])
def test_malformed_body_names_the_parse_error(tmp_path: Path, body: object, error: str) -> None:
    result, _ = one([(200, body)], tmp_path)
    assert result.error == f"malformed response body: {error}"


@pytest.mark.parametrize("body", [{"choices": []}, {"id": "c", "object": "chat.completion"}, b"null"])
def test_no_choices_is_named(tmp_path: Path, body: object) -> None:
    result, _ = one([(200, body)], tmp_path)
    assert result.error == "malformed response body: no choices"


def test_latency_is_the_measured_wall_time_in_tenths_of_a_millisecond(tmp_path: Path) -> None:
    requests = [ChatRequest(key=f"t{i}", messages=[{"role": "user", "content": f"q{i}"}]) for i in range(8)]
    with FakeOpenAI(latency=0.01) as server:
        start = time.monotonic()
        results = run(TeacherClient(teacher(server.base_url), ResponseCache(tmp_path)), requests)
        elapsed = time.monotonic() - start
    assert all(0.01 <= r.latency_s <= elapsed for r in results), ([r.latency_s for r in results], elapsed)
    assert all(r.latency_s == round(r.latency_s, 4) for r in results)  # 4 decimals
    assert any(r.latency_s != round(r.latency_s, 3) for r in results)  # and not fewer


@pytest.mark.parametrize(("message", "finish", "usage", "expected"), [
    # usage counted as reported, reasoning_tokens from completion_tokens_details
    ({"content": "ok", "reasoning_content": "why"}, "stop",
     {"prompt_tokens": 7, "completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 4}},
     {"text": "ok", "finish_reason": "stop", "prompt_tokens": 7, "completion_tokens": 9, "reasoning": "why",
      "reasoning_tokens": 4, "error": ""}),
    # no usage block, no finish_reason: zeros and "" (and, with no finish_reason, nothing cached)
    ({"content": "ok"}, None, None,
     {"text": "ok", "finish_reason": "", "prompt_tokens": 0, "completion_tokens": 0, "reasoning": "",
      "reasoning_tokens": 0, "error": ""}),
    # a non-text reasoning_content is skipped for `reasoning`; an empty one too
    ({"content": "ok", "reasoning_content": 5, "reasoning": "r1"}, "stop", {"completion_tokens_details": None},
     {"reasoning": "r1", "reasoning_tokens": 0, "error": ""}),
    ({"content": "ok", "reasoning_content": "", "reasoning": "r2"}, "stop", None, {"reasoning": "r2"}),
    ({"content": "ok", "reasoning_content": "first", "reasoning": "second"}, "stop", None, {"reasoning": "first"}),
    # blank content: empty response, the blank text kept
    ({"content": "  \n"}, "stop", None, {"text": "  \n", "error": EMPTY_RESPONSE}),
    ({"content": None}, "length", None, {"text": "", "error": EMPTY_RESPONSE}),  # cut before any reasoning
    # cut with content: truncated, naming the reasoning tokens when it thought
    ({"content": "half"}, "length", None, {"error": TRUNCATED_RESPONSE}),
    ({"content": "half"}, "length", {"completion_tokens_details": {"reasoning_tokens": 3}},
     {"error": TRUNCATED_RESPONSE + " after 3 reasoning tokens", "reasoning_tokens": 3}),
    ({"content": "half", "reasoning": "abc"}, "length", None,
     {"error": TRUNCATED_RESPONSE + " after 0 reasoning tokens"}),
    # blank content after reasoning, cut: the budget went to the reasoning
    ({"content": " ", "reasoning": "think think"}, "length", {"completion_tokens_details": {"reasoning_tokens": 2}},
     {"error": REASONING_BUDGET_EXHAUSTED + ": finish_reason=length with empty content after 2 reasoning tokens "
               "(11 characters)"}),
    ({"content": None}, "length", {"completion_tokens_details": {"reasoning_tokens": 6}},
     {"error": REASONING_BUDGET_EXHAUSTED + ": finish_reason=length with empty content after 6 reasoning tokens "
               "(0 characters)"}),
    ({"content": None, "reasoning": "long"}, "stop", None, {"error": EMPTY_RESPONSE}),  # not cut: plain empty
])
def test_reply_fields_and_named_outcomes(tmp_path: Path, message: dict, finish: object, usage: dict | None,
                                         expected: dict) -> None:
    fields = {k: v for k, v in message.items() if k != "content"}
    result, _ = one([reply(message["content"], finish, usage, **fields)], tmp_path)
    assert {k: getattr(result, k) for k in expected} == expected
    assert (result.attempts, result.key) == (1, "k1")
    assert len(ResponseCache(tmp_path)) == (1 if finish else 0)


def test_the_first_choice_is_the_answer(tmp_path: Path) -> None:
    status, body = reply("first")
    body["choices"].append({"index": 1, "message": {"role": "assistant", "content": "second"},
                            "finish_reason": "stop"})
    result, _ = one([(status, body)], tmp_path)
    assert result.text == "first"


def test_message_null_is_an_empty_response(tmp_path: Path) -> None:
    result, _ = one([(200, {"choices": [{"index": 0, "message": None, "finish_reason": "stop"}]})], tmp_path)
    assert (result.text, result.reasoning, result.error) == ("", "", EMPTY_RESPONSE)
