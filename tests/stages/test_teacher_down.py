"""A teacher that cannot answer stops the stage early, in one line, with nothing recorded as done (issue 67).

Against the project's fake server (tests/fake_openai.py): a closed port, a refused key and an unknown model stop
the pre-flight before anything is written; a server that dies half-way opens the circuit breaker, the answered
part stays in the cache and the rerun sends only the rest; `max_error_share` is the floor under which a run is no
success; the errors show on the progress bar and in a warning while they happen; `difficulty` (mllm) behaves as
`cot`; `sft` on an empty shard folder is one line naming the shard stage, before any process is launched.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from stages.core.errors import EmptyInput, OneLineError
from stages.core.progress import ProgressReporter
from stages.cot import generate_cot
from stages.difficulty import score_difficulty
from stages.params.cot import CotParams
from stages.params.difficulty import DifficultyParams
from stages.params.model import ModelParams
from stages.params.sft import SftParams
from stages.params.teacher import TeacherParams
from stages.teacher.cache import ResponseCache, request_key
from stages.teacher.client import ChatRequest, TeacherClient, TeacherUnavailable
from tests.fake_openai import FakeOpenAI
from tests.keyframed import keyframed_project

VALID = ('{"scene_complexity": 3, "segmentation_challenge": 5, "temporal_ambiguity": 2, '
         '"motion_complexity": 4, "linguistic_ambiguity": 10}')


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def teacher(base_url: str, **overrides: object) -> TeacherParams:
    base = TeacherParams(backend="openai", base_url=base_url, model="fake-vlm", api_key_required=False,
                         concurrency=4, timeout_s=5.0, max_retries=1, backoff_base_s=0.01, backoff_max_s=0.02,
                         image_size=32, breaker_after=5)
    return replace(base, **overrides)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return keyframed_project(tmp_path_factory.mktemp("teacher_down"), 4, 5, sft_first_k=2, grpo_size=2,
                             train_size=56)


def cot(data: Path, tmp_path: Path, params: TeacherParams, **cot_params: object):
    return generate_cot(params, CotParams(cache_dir=str(tmp_path / "cache"), **cot_params), 0, data / "root",
                        data / "keyframes", tmp_path / "out")


def difficulty(data: Path, tmp_path: Path, params: TeacherParams, **difficulty_params: object):
    settings = DifficultyParams(backend="mllm", json_retries=0, cache_dir=str(tmp_path / "cache"),
                                **difficulty_params)
    return score_difficulty(settings, params, data / "root", data / "index", data / "keyframes", tmp_path / "out")


def one_line(err: pytest.ExceptionInfo) -> str:
    line = str(err.value)
    assert isinstance(err.value, OneLineError) and "\n" not in line
    return line


# ---- the pre-flight: nothing written, within seconds ----------------------------------------------------------

@pytest.mark.parametrize("run", [cot, difficulty], ids=["cot", "difficulty"])
def test_a_closed_port_is_one_line_within_seconds_and_nothing_is_written(data: Path, tmp_path: Path, run) -> None:
    url = closed_port_url()
    start = time.monotonic()
    with pytest.raises(TeacherUnavailable) as err:
        run(data, tmp_path, teacher(url, max_retries=5, backoff_base_s=1.0))
    assert time.monotonic() - start < 10
    line = one_line(err)
    assert line.startswith(f"{run.__name__}: teacher.base_url {url} is unreachable (")
    assert not (tmp_path / "out").exists() and len(ResponseCache(tmp_path / "cache")) == 0


@pytest.mark.parametrize("run", [cot, difficulty], ids=["cot", "difficulty"])
def test_a_refused_key_is_one_line_naming_the_variable(data: Path, tmp_path: Path, run,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VRSFLOW_TEST_KEY", "sk-wrong")
    with FakeOpenAI(api_key="sk-right") as server, pytest.raises(TeacherUnavailable) as err:
        run(data, tmp_path, teacher(server.base_url, api_key_env="VRSFLOW_TEST_KEY", api_key_required=True))
    line = one_line(err)
    assert f"teacher.base_url {server.base_url} refused the API key (401: " in line
    assert "$VRSFLOW_TEST_KEY is set" in line and "sk-wrong" not in line
    assert server.total_requests == 0 and not (tmp_path / "out").exists()


@pytest.mark.parametrize("run", [cot, difficulty], ids=["cot", "difficulty"])
def test_an_unknown_model_is_one_line_naming_it_and_what_is_served(data: Path, tmp_path: Path, run) -> None:
    with FakeOpenAI(models=("qwen2.5-vl-72b", "fake-vlm-2")) as server, pytest.raises(TeacherUnavailable) as err:
        run(data, tmp_path, teacher(server.base_url, model="fake-vlm"))
    line = one_line(err)
    assert line.startswith(f"{run.__name__}: teacher.model 'fake-vlm' is unknown at teacher.base_url "
                           f"{server.base_url} (404: ")
    assert "it lists: qwen2.5-vl-72b, fake-vlm-2)" in line
    # the model list, then one request of one token to confirm (some providers list fewer models than they serve)
    assert server.model_lists == 1 and server.total_requests == 0  # the 404 is answered before a request counts
    assert not (tmp_path / "out").exists()


def test_a_listed_model_costs_no_request_and_a_cached_rerun_no_preflight(tmp_path: Path) -> None:
    reqs = [ChatRequest(key=request_key({"i": i}), messages=[{"role": "user", "content": f"q{i}"}]) for i in range(3)]
    with FakeOpenAI(models=("fake-vlm",)) as server:
        asyncio.run(TeacherClient(teacher(server.base_url), ResponseCache(tmp_path)).run_all(reqs))
        assert (server.model_lists, server.total_requests) == (1, 3)
    again = TeacherClient(teacher(closed_port_url()), ResponseCache(tmp_path))  # the endpoint is gone: no matter
    assert all(r.from_cache for r in asyncio.run(again.run_all(reqs))) and again.sent == 0


# ---- the circuit breaker: a server that dies half-way --------------------------------------------------------

@pytest.mark.parametrize("down", ["500", "drop"])
def test_a_server_down_after_100_answers_stops_after_the_breakers_n_and_the_rerun_sends_the_rest(
        data: Path, tmp_path: Path, down: str) -> None:
    samples = len(pd.read_parquet(data / "keyframes" / "sft.parquet"))
    traces = math.ceil(130 / samples)
    total = samples * traces
    params = teacher("", breaker_after=5, concurrency=4, max_retries=1)
    with FakeOpenAI(fail_after=100, down=down) as server, pytest.raises(TeacherUnavailable) as err:
        cot(data, tmp_path, replace(params, base_url=server.base_url), traces_per_sample=traces)
    line = one_line(err)
    assert line.startswith(f"cot: the teacher at {server.base_url} failed 5 requests in a row (")
    assert f"100 of {total} requests are answered and kept in the cache {tmp_path / 'cache'}" in line
    assert f"only the {total - 100} unanswered are sent" in line
    assert len(ResponseCache(tmp_path / "cache")) == 100 and not (tmp_path / "out").exists()
    # after the 100: the breaker's 5, and at most the 3 others in flight, each with its one retry
    failed_attempts = server.total_requests - 100
    assert 5 * 2 <= failed_attempts <= (5 + 3) * 2, failed_attempts
    with FakeOpenAI() as working:
        report = cot(data, tmp_path, replace(params, base_url=working.base_url), traces_per_sample=traces)
    assert working.total_requests == total - 100 and report.metrics["from_cache"] == 100
    table = pd.read_parquet(tmp_path / "out" / "generations.parquet")
    assert len(table) == total and (table["error"] == "").all()


def test_difficulty_mllm_stops_at_the_breaker_and_the_rerun_sends_the_rest(data: Path, tmp_path: Path) -> None:
    params = teacher("", breaker_after=2, concurrency=1, max_retries=0)
    with FakeOpenAI(reply=VALID, fail_after=2) as server, pytest.raises(TeacherUnavailable) as err:
        difficulty(data, tmp_path, replace(params, base_url=server.base_url))
    assert one_line(err).startswith(f"difficulty: the teacher at {server.base_url} failed 2 requests in a row (")
    assert len(ResponseCache(tmp_path / "cache")) == 2 and not (tmp_path / "out").exists()
    assert server.total_requests == 4  # no request after the breaker opened
    with FakeOpenAI(reply=VALID) as working:
        report = difficulty(data, tmp_path, replace(params, base_url=working.base_url))
    assert working.total_requests == report.metrics["samples"] - 2 and report.metrics["mllm_fallbacks"] == 0


def test_the_breaker_opens_on_one_endpoint_reason_in_a_row_never_on_request_content(tmp_path: Path) -> None:
    from stages.teacher.client import ChatResult, failure_kind

    client = TeacherClient(teacher("http://unused/v1", breaker_after=3), ResponseCache(tmp_path))
    for error in ["400: image too large"] * 5 + ["connection error: x", "timeout", "401: no"]:
        client._note(ChatResult(key="k", error=error))  # a 400 is about one request: the others are worth sending
    assert client.breaker == ""
    for error in ["500 server error", "503 server error", "502 server error"]:  # one kind: the server's
        client._note(ChatResult(key="k", error=error))
    assert client.breaker == "502 server error"
    assert failure_kind("404: The model `x` does not exist.") == "404" and failure_kind("timeout") == "timeout"


# ---- the floor: max_error_share -------------------------------------------------------------------------------

@pytest.mark.parametrize(("answered", "fails"), [(10, False), (9, True)])
def test_max_error_share_is_the_floor_of_success(data: Path, tmp_path: Path, answered: int, fails: bool) -> None:
    samples = len(pd.read_parquet(data / "keyframes" / "sft.parquet"))
    traces = math.ceil(12 / samples)
    total = samples * traces
    share = (total - 10) / total  # 10 answered: exactly at the floor, which is allowed
    params = teacher("", breaker_after=0, concurrency=1, max_retries=0)
    with FakeOpenAI(fail_after=answered) as server:
        if not fails:
            report = cot(data, tmp_path, replace(params, base_url=server.base_url), traces_per_sample=traces,
                         max_error_share=share)
            assert report.metrics["errors"] == total - answered
            return
        with pytest.raises(TeacherUnavailable) as err:
            cot(data, tmp_path, replace(params, base_url=server.base_url), traces_per_sample=traces,
                max_error_share=share)
    line = one_line(err)
    assert line.startswith(f"cot: {total - answered} of {total} requests went unanswered by the teacher (")
    assert f"more than cot.max_error_share = {share:g}; {total - answered} of them: 5xx server error)" in line
    assert f"the {answered} answered are kept in the cache" in line and "nothing is recorded as done" in line
    assert not (tmp_path / "out").exists() and len(ResponseCache(tmp_path / "cache")) == answered


def test_difficulty_max_error_share_counts_unanswered_samples(data: Path, tmp_path: Path) -> None:
    params = teacher("", breaker_after=0, concurrency=1, max_retries=0)
    with FakeOpenAI(reply=VALID, fail_after=1) as server, pytest.raises(TeacherUnavailable) as err:
        difficulty(data, tmp_path, replace(params, base_url=server.base_url))
    assert " samples went unanswered by the teacher (" in one_line(err)
    assert "difficulty.max_error_share = 0.2" in str(err.value)
    with FakeOpenAI(reply=VALID, fail_after=1) as server:  # all allowed: the unanswered keep the heuristic
        report = difficulty(data, tmp_path / "lenient", replace(params, base_url=server.base_url),
                            max_error_share=1.0)
    scores = pd.read_parquet(tmp_path / "lenient" / "out" / "scores.parquet")
    assert (scores["backend"] == "mllm").sum() == 1 and report.metrics["mllm_fallbacks"] == len(scores) - 1


# ---- visible while it happens ---------------------------------------------------------------------------------

def test_errors_show_on_the_progress_bar_and_a_warning_when_most_recent_requests_fail(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    reqs = [ChatRequest(key=request_key({"i": i}), messages=[{"role": "user", "content": f"q{i}"}]) for i in range(40)]
    progress = ProgressReporter(len(reqs), desc="requests")
    caplog.set_level(logging.WARNING, logger="stages.teacher.client")
    with FakeOpenAI(fail_after=10) as server:
        client = TeacherClient(teacher(server.base_url, breaker_after=0, concurrency=1, max_retries=0),
                               ResponseCache(tmp_path), stage="cot")
        asyncio.run(client.run_all(reqs, on_done=lambda r: progress.advance(errors=int(not r.finish_reason))))
    progress.close()
    assert progress.errors == 30 and progress._bar.postfix == "errors=30"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["cot: 11 of the last 20 teacher requests failed (latest: 500 server error); answered ones "
                        "are cached"]


# ---- downstream: sft refuses an empty shard folder ------------------------------------------------------------

def test_sft_on_an_empty_shard_folder_is_one_line_naming_the_shard_stage_before_any_launch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stages.sft as sft

    def launched(*args: object) -> None:
        raise AssertionError("processes were launched")

    monkeypatch.setattr(sft, "_launch", launched)
    (tmp_path / "shards" / "sft").mkdir(parents=True)
    with pytest.raises(EmptyInput) as err:
        sft.train_sft(SftParams(processes=2), ModelParams(), tmp_path / "shards", tmp_path / "models",
                      tmp_path / "checkpoints", tmp_path / "metrics")
    assert one_line(err).startswith(f"sft: {tmp_path / 'shards' / 'sft'} holds no training samples: the shard stage "
                                    "wrote none")
    assert isinstance(err.value, ValueError) and not (tmp_path / "models").exists()
