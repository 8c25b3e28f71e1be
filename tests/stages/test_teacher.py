"""The teacher client against a real local chat-completions server: concurrency, retries, Retry-After,
timeouts, garbage bodies, the persistent cache."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import pytest

from stages.params.teacher import TeacherParams
from stages.teacher.cache import ResponseCache, request_key
from stages.teacher.client import ChatRequest, TeacherClient, parse_retry_after
from tests.fake_openai import FakeOpenAI


def params(server: FakeOpenAI, **overrides: object) -> TeacherParams:
    base = TeacherParams(backend="openai", base_url=server.base_url, model="fake-vlm", api_key_required=False,
                         concurrency=8, timeout_s=2.0, max_retries=4, backoff_base_s=0.01, backoff_max_s=0.05)
    return replace(base, **overrides)


def requests(n: int) -> list[ChatRequest]:
    return [ChatRequest(key=request_key({"i": i}), messages=[{"role": "user", "content": f"question {i}"}])
            for i in range(n)]


def run(client: TeacherClient, reqs: list[ChatRequest]):
    return asyncio.run(client.run_all(reqs))


@pytest.mark.parametrize("concurrency", [8, 32])
def test_concurrency_is_reached_and_bounded(tmp_path: Path, concurrency: int) -> None:
    n = 4 * concurrency
    with FakeOpenAI(latency=0.25) as server:
        client = TeacherClient(params(server, concurrency=concurrency), ResponseCache(tmp_path))
        start = time.monotonic()
        results = run(client, requests(n))
        elapsed = time.monotonic() - start
    assert all(not r.error and r.text.startswith("Step 1") for r in results)
    assert server.max_in_flight == concurrency
    # four rounds of ~0.25 s, far from n × 0.25 s one at a time (loose: the test machine may be busy)
    assert elapsed < n * 0.25 / 3


@pytest.mark.parametrize("faults", [["429", "500", "garbage"], ["timeout"], ["empty"], ["truncated"]])
def test_retries_until_success(tmp_path: Path, faults: list[str]) -> None:
    with FakeOpenAI(faults=faults, hang=1.5) as server:
        client = TeacherClient(params(server, timeout_s=0.5), ResponseCache(tmp_path))
        results = run(client, requests(3))
        for r in results:
            if faults == ["empty"]:  # an empty answer arrived: recorded with its error, not retried
                assert r.error == "empty response" and r.attempts == 1
            elif faults == ["truncated"]:  # paid for: kept (and cached) with its error
                assert r.error.startswith("truncated") and r.finish_reason == "length" and r.attempts == 1
                assert r.text.startswith("Step 1")
            else:
                assert not r.error and r.attempts == len(faults) + 1
            assert len(server.attempts) == 3
    assert client.sent == sum(len(a) for a in server.attempts.values())


def test_retry_after_is_honoured(tmp_path: Path) -> None:
    with FakeOpenAI(faults=["429"], retry_after=0.8) as server:
        results = run(TeacherClient(params(server), ResponseCache(tmp_path)), requests(2))
    assert all(r.attempts == 2 for r in results)
    for attempts in server.attempts.values():
        assert attempts[1][0] - attempts[0][0] >= 0.8


def test_exhausted_retries_are_recorded_not_cached(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    with FakeOpenAI(faults=["500"] * 10) as server:
        results = run(TeacherClient(params(server, max_retries=2), cache), requests(2))
    assert all(r.error == "500 server error" and r.attempts == 3 for r in results)
    assert len(cache) == 0  # a rerun tries again


def test_rerun_sends_nothing(tmp_path: Path) -> None:
    with FakeOpenAI() as server:
        first = TeacherClient(params(server), ResponseCache(tmp_path))
        run(first, requests(10))
        second = TeacherClient(params(server), ResponseCache(tmp_path))
        results = run(second, requests(10))
    assert second.sent == 0 and all(r.from_cache for r in results)
    assert server.total_requests == 10


def test_rate_limit_spaces_requests(tmp_path: Path) -> None:
    with FakeOpenAI() as server:
        client = TeacherClient(params(server, rpm=600), ResponseCache(tmp_path))
        # one per 0.1 s; bounded, so a limiter that waits far too long fails instead of hanging
        asyncio.run(asyncio.wait_for(client.run_all(requests(6)), timeout=30.0))
    starts = sorted(t for attempts in server.attempts.values() for t, _ in attempts)
    assert starts[-1] - starts[0] >= 0.35  # 5 slots of 0.1 s; the first call pays for connecting


def test_missing_key_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    with FakeOpenAI() as server:
        client = TeacherClient(params(server, api_key_required=True, api_key_env="NO_SUCH_KEY_VAR"),
                               ResponseCache(tmp_path))
        with pytest.raises(RuntimeError, match="NO_SUCH_KEY_VAR"):
            run(client, requests(1))


@pytest.mark.parametrize(("headers", "seconds"), [
    ({"Retry-After": "2"}, 2.0),
    ({"retry-after": "0.5"}, 0.5),
    ({"retry-after-ms": "1500", "Retry-After": "9"}, 1.5),  # OpenAI's finer header wins
    ({"Retry-After": "Sun, 22 Nov 2026 13:00:10 GMT"}, 10.0),  # an HTTP date, 10 s after `now`
    ({"Retry-After": "Sun, 22 Nov 2026 12:59:00 GMT"}, 0.0),  # in the past: no wait
    ({"Retry-After": "soon"}, None),
    ({}, None),
])
def test_parse_retry_after(headers: dict[str, str], seconds: float | None) -> None:
    import datetime

    now = datetime.datetime(2026, 11, 22, 13, 0, 0, tzinfo=datetime.UTC).timestamp()
    assert parse_retry_after(headers, now=now) == (None if seconds is None else pytest.approx(seconds))
