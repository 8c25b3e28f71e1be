"""The cot stage end to end: template backend offline, openai backend against a local server, resume
after the process is killed, the API key never written anywhere, the template-choice distribution."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stages.cot import generate_cot
from stages.keyframes import select_keyframes
from stages.params.cot import CotParams
from stages.params.keyframes import KeyframesParams
from stages.params.sample import SampleParams
from stages.params.teacher import TeacherParams
from stages.sample import sample_pools
from stages.teacher.cache import ResponseCache
from tests.fake_openai import FakeOpenAI
from tests.keyframed import keyframed_project

SECRET = "sk-test-0123456789abcdefSECRETSECRET"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return keyframed_project(tmp_path_factory.mktemp("cot"), 6, 7, sft_first_k=2, grpo_size=4, train_size=112)


def openai_params(server: FakeOpenAI, **kw: object) -> TeacherParams:
    return replace(TeacherParams(backend="openai", base_url=server.base_url, model="fake-vlm",
                                 api_key_env="VRSFLOW_TEST_KEY", concurrency=4, timeout_s=5.0, max_retries=2,
                                 backoff_base_s=0.01, image_size=64, price_in_per_m=1.0, price_out_per_m=2.0), **kw)


def test_template_backend_offline(data: Path, tmp_path: Path) -> None:
    report = generate_cot(TeacherParams(), CotParams(cache_dir=str(tmp_path / "cache")), 0, data / "root",
                          data / "keyframes", tmp_path / "out")
    table = pd.read_parquet(tmp_path / "out" / "generations.parquet")
    assert len(table) == report.metrics["requests"] == len(pd.read_parquet(data / "keyframes" / "sft.parquet"))
    assert set(table["backend"]) == {"template"} and set(table["teacher"]) == {"template-teacher-v1"}
    assert table["text"].str.contains("Step 3:").all() and (table["error"] == "").all()
    lineage = json.loads((tmp_path / "out" / "lineage.json").read_text())
    assert sum(lineage["extra"]["template_counts"].values()) == len(table)


def test_compact_template_traces_are_three_short_steps_the_filter_accepts(data: Path, tmp_path: Path) -> None:
    """teacher.template_style compact: every Veason-R1 trace is three steps of a few words naming the shown span,
    the keyframe and the target's place; the filter accepts them (its own rules, at a lower length bound); the two
    styles are cached apart."""
    from stages.filter import filter_traces
    from stages.params.filter import FilterParams

    cache = str(tmp_path / "cache")
    generate_cot(TeacherParams(), CotParams(cache_dir=cache), 0, data / "root", data / "keyframes", tmp_path / "full")
    generate_cot(TeacherParams(template_style="compact"), CotParams(cache_dir=cache), 0, data / "root",
                 data / "keyframes", tmp_path / "cot")
    full = pd.read_parquet(tmp_path / "full" / "generations.parquet")
    table = pd.read_parquet(tmp_path / "cot" / "generations.parquet")
    assert not set(full["request_key"]) & set(table["request_key"])
    samples = pd.read_parquet(data / "keyframes" / "sft.parquet").set_index("sample_id")
    for row in table.itertuples():
        sample = samples.loc[row.sample_id]
        lines = row.text.split("\n")
        assert [line.split(":")[0] for line in lines] == ["Step 1", "Step 2", "Step 3"], row.text
        assert lines[0] == (f"Step 1: {len(sample['timestamps'])} frames from {sample['timestamps'][0]}s to "
                            f"{sample['timestamps'][-1]}s.")
        assert lines[1].endswith(f"clearest at {sample['keyframe_timestamp']}s.") and len(row.text) < 120
    report = filter_traces(FilterParams(min_chars=60), tmp_path / "cot", data / "keyframes", tmp_path / "filter")
    assert report.metrics["rejected"] == 0 and report.metrics["accepted"] == len(table)
    assert filter_traces(FilterParams(), tmp_path / "cot", data / "keyframes",
                         tmp_path / "filter120").metrics["accepted"] == 0  # under the full traces' 120 characters


@given(span=st.integers(1, 6), start=st.integers(0, 20), key=st.integers(0, 5),
       corners=st.lists(st.tuples(st.integers(0, 100), st.integers(0, 100), st.integers(1, 12), st.integers(1, 12)),
                        min_size=1, max_size=3))
def test_a_compact_trace_passes_the_filters_own_step_keyframe_and_location_rules(
        span: int, start: int, key: int, corners: list[tuple[int, int, int, int]]) -> None:
    """Property, against the filter's rules (its own location code): three steps, the keyframe named in step 2 and
    no other shown timestamp there, step 3's place true to the targets' box at the keyframe."""
    from stages.filter import rules
    from stages.teacher.template_teacher import compact_trace

    timestamps = [start + 2 * i for i in range(span)]
    keyframe = timestamps[min(key, span - 1)]
    boxes = [[x, y, x + w, y + h] for x, y, w, h in corners]
    text = compact_trace(timestamps, keyframe, boxes, 112, len(boxes))
    assert rules.three_steps(text) is None and rules.keyframe_named(text, keyframe, timestamps) is None
    assert rules.location_faithful(text, boxes, 112) is None and rules.no_markings(text) is None


def test_openai_backend_and_secret_never_written(data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("VRSFLOW_TEST_KEY", SECRET)
    caplog.set_level(logging.DEBUG)
    with FakeOpenAI(faults=["500"]) as server:
        report = generate_cot(openai_params(server), CotParams(cache_dir=str(tmp_path / "cache")), 0,
                              data / "root", data / "keyframes", tmp_path / "out")
    assert f"Bearer {SECRET}" in server.auth_headers  # the key was used …
    table = pd.read_parquet(tmp_path / "out" / "generations.parquet")
    assert (table["attempts"] == 2).all() and (table["teacher"] == "fake-vlm").all()
    assert report.metrics["prompt_tokens"] == 100 * len(table)
    assert report.metrics["estimated_cost_usd"] == pytest.approx(
        (100 * len(table) * 1.0 + table["completion_tokens"].sum() * 2.0) / 1e6, abs=1e-4)
    for path in tmp_path.rglob("*"):  # … and appears in no output file, cache entry, lineage or log
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in caplog.text
    assert "VRSFLOW_TEST_KEY" in (tmp_path / "out" / "lineage.json").read_text()  # the NAME is recorded


def test_images_are_data_urls_with_timestamps(data: Path) -> None:
    from stages.cot import build_request

    sample = pd.read_parquet(data / "keyframes" / "sft.parquet").iloc[0].to_dict()
    request = build_request(sample, "veason/v1/style_a", 0, TeacherParams(backend="openai", image_size=64),
                            data / "root")
    assert not request.messages  # built only when sent
    content = request.build()[0]["content"]
    assert [c["type"] for c in content[:2]] == ["text", "image_url"]
    assert content[0]["text"] == f"<{int(sample['timestamps'][0])}s>"
    assert content[1]["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert f"Keyframe: {int(sample['keyframe_timestamp'])}s" in content[-1]["text"]
    assert sum(c["type"] == "image_url" for c in content) == len(sample["timestamps"])
    # AKS: the candidate frame follows the sampled frames, and the instruction names its timestamp
    from stages.tasks import get_task

    aks = build_request(sample, "rcot_aks/v1/style_b", 0, TeacherParams(backend="openai", image_size=64),
                        data / "root", get_task("rcot_aks")).build()[0]["content"]
    assert sum(c["type"] == "image_url" for c in aks) == len(sample["timestamps"]) + 1
    assert aks[-3]["text"] == f"Candidate keyframe <{int(sample['aks_frame_idx'])}s>"
    assert f"Candidate keyframe: {int(sample['aks_frame_idx'])}s" in aks[-1]["text"]


def test_template_choice_is_uniform_and_recorded(data: Path, tmp_path: Path) -> None:
    params = CotParams(cache_dir=str(tmp_path / "cache"), traces_per_sample=60)
    generate_cot(TeacherParams(), params, 0, data / "root", data / "keyframes", tmp_path / "out")
    counts = Counter(pd.read_parquet(tmp_path / "out" / "generations.parquet")["template_id"])
    assert set(counts) == {"veason/v1/style_a", "veason/v1/style_b", "veason/v1/style_c"}
    n = sum(counts.values())
    chi2 = sum((c - n / 3) ** 2 / (n / 3) for c in counts.values())
    assert chi2 < 13.8  # p ≈ 0.001, 2 degrees of freedom
    again = tmp_path / "again"
    generate_cot(TeacherParams(), replace(params, cache_dir=str(tmp_path / "cache2")), 0, data / "root",
                 data / "keyframes", again)
    pd.testing.assert_frame_equal(pd.read_parquet(again / "generations.parquet"),
                                  pd.read_parquet(tmp_path / "out" / "generations.parquet"))


RUN_STAGE = """
import sys
from pathlib import Path
from stages.params.cot import CotParams
from stages.params.teacher import TeacherParams
from stages.cot import generate_cot
base, url, cache, out = sys.argv[1:5]
teacher = TeacherParams(backend="openai", base_url=url, model="fake-vlm", api_key_env="VRSFLOW_TEST_KEY",
                        concurrency=4, timeout_s=10.0, max_retries=0)
generate_cot(teacher, CotParams(cache_dir=cache, traces_per_sample=3), 0, Path(base) / "root",
             Path(base) / "keyframes", Path(out))
"""


def test_resume_after_kill_sends_nothing_twice(data: Path, tmp_path: Path) -> None:
    cache_dir, out = tmp_path / "cache", tmp_path / "out"
    env = {**os.environ, "VRSFLOW_TEST_KEY": SECRET, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    with FakeOpenAI(latency=0.1) as server:
        args = [sys.executable, "-c", RUN_STAGE, str(data), server.base_url, str(cache_dir), str(out)]
        proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while len(ResponseCache(cache_dir)) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.kill()
        proc.wait()
        stored = {p: p.read_bytes() for p in cache_dir.rglob("*.json")}
        assert len(stored) >= 6 and not (out / "generations.parquet").exists()
        subprocess.run(args, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    table = pd.read_parquet(out / "generations.parquet")
    samples = len(pd.read_parquet(data / "keyframes" / "sft.parquet"))
    assert len(table) == 3 * samples and (table["error"] == "").all()
    # nothing already stored was lost or asked for again …
    assert all(p.read_bytes() == content for p, content in stored.items())
    successes = sum(server.successes(key) for key in server.attempts)
    # … only the answers in flight when the process died (at most `concurrency` = 4) were paid twice
    assert len(table) <= successes <= len(table) + 4


@pytest.mark.parametrize("task", ["veason", "rcot_kfg", "rcot_aks", "rcot_ktg", "rcot_vdg", "videoseg"])
def test_template_traces_pass_the_filter(data: Path, tmp_path: Path, task: str) -> None:
    """The template teacher writes, for every task, traces that the filter accepts (a consistency check of
    both), and the response carries the ground truth in the task's answer format at the task's view."""
    from stages.filter import filter_traces
    from stages.params.filter import FilterParams
    from stages.tasks import get_task

    sample_pools(SampleParams(sft_first_k=2, grpo_size=4, sft_tasks=(task,)), 0, data / "index", tmp_path / "sample")
    select_keyframes(KeyframesParams(train_size=112, keyframe_size=168), 0, data / "root", data / "index",
                     tmp_path / "sample", tmp_path / "keyframes")
    generate_cot(TeacherParams(), CotParams(cache_dir=str(tmp_path / "cache")), 0, data / "root",
                 tmp_path / "keyframes", tmp_path / "cot")
    report = filter_traces(FilterParams(), tmp_path / "cot", tmp_path / "keyframes", tmp_path / "filter")
    accepted = pd.read_parquet(tmp_path / "filter" / "accepted.parquet")
    assert report.metrics["rejected"] == 0, pd.read_parquet(tmp_path / "filter" / "rejected.parquet")["reason"]
    samples = pd.read_parquet(tmp_path / "keyframes" / "sft.parquet").set_index("sample_id")
    if task == "rcot_kfg":  # regression: with all four RCoT tasks a sample's KFG and KTG traces share their
        # first steps by design; near-duplicates are judged per (sample, task), so none is lost
        sample_pools(SampleParams(sft_first_k=2, grpo_size=4, sft_tasks=("rcot_vdg", "rcot_kfg", "rcot_aks",
                                                                         "rcot_ktg")), 0, data / "index",
                     tmp_path / "sample4")
        select_keyframes(KeyframesParams(train_size=112, keyframe_size=168), 0, data / "root", data / "index",
                         tmp_path / "sample4", tmp_path / "keyframes4")
        generate_cot(TeacherParams(), CotParams(cache_dir=str(tmp_path / "cache")), 0, data / "root",
                     tmp_path / "keyframes4", tmp_path / "cot4")
        four = filter_traces(FilterParams(), tmp_path / "cot4", tmp_path / "keyframes4", tmp_path / "filter4")
        assert four.metrics["rejected"] == 0 and four.metrics["accepted"] == 4 * len(samples)
    # AKS and KTG samples also get the VDG description they are given; each (sample, task) has its own trace index
    expected_tasks = {"rcot_aks": {"rcot_vdg", "rcot_aks"}, "rcot_ktg": {"rcot_vdg", "rcot_ktg"}}.get(task, {task})
    assert set(accepted["task"]) == expected_tasks and len(accepted) == len(samples) * len(expected_tasks)
    assert not accepted.duplicated(["sample_id", "trace_index"]).any()
    for row in accepted[accepted["task"] == task].itertuples():
        assert get_task(task).parse(row.response) is not None, row.response
        answer = json.loads(row.response.split("<answer>")[1].removesuffix("</answer>"))
        sample = samples.loc[row.sample_id]
        key_boxes = [b for b in sample["boxes"][sample["keyframe_pos"]] if b is not None]
        if task == "rcot_aks":
            assert answer == {"option": sample["aks_option"]} and row.text.endswith(f"Answer: {sample['aks_option']}")
        elif task == "rcot_vdg":
            assert answer == {"description": row.text.strip()} and "<think>I describe" in row.response
        elif task == "rcot_kfg":
            assert answer == {"keyframe_timestamp": sample["keyframe_timestamp"]}
        elif task == "veason":
            assert answer["keyframe_timestamp"] == sample["keyframe_timestamp"]
            assert answer["bbox_2d_list"] == [[int(round(v)) for v in b] for b in key_boxes]
        else:  # KTG and VideoSeg-R1 answer on the keyframe shown at keyframe_size = 1.5 × train size
            assert answer["bbox_2d_list"] == [[int(round(v * 1.5)) for v in b] for b in key_boxes]
            points = [p for p in sample["ktg_points"] if p is not None]
            assert answer["point_2d_list"] == [[int(round(v * 1.5)) for v in p] for p in points]


def test_thinking_teacher_counted_and_budget_exhaustion_filtered(data: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A thinking teacher (reasoning first, `reasoning_content`, reasoning tokens in usage): its reasoning tokens
    reach the table, the metrics and the cost; a reply whose reasoning spent max_tokens is rejected by the filter
    under its own reason; switching thinking off is a new request (new cache key), answered without reasoning."""
    from stages.filter import filter_traces
    from stages.params.filter import FilterParams

    monkeypatch.setenv("VRSFLOW_TEST_KEY", SECRET)
    thought = " ".join(["ponder"] * 50)
    cot = CotParams(cache_dir=str(tmp_path / "cache"))
    with FakeOpenAI(reasoning=thought) as server:
        big = generate_cot(openai_params(server, max_tokens=500), cot, 0, data / "root", data / "keyframes",
                           tmp_path / "big")
        small = generate_cot(openai_params(server, max_tokens=40), cot, 0, data / "root", data / "keyframes",
                             tmp_path / "small")
        off = generate_cot(openai_params(server, max_tokens=40, thinking="disabled"), cot, 0, data / "root",
                           data / "keyframes", tmp_path / "off")
    n = big.metrics["requests"]
    table = pd.read_parquet(tmp_path / "big" / "generations.parquet")
    assert (table["reasoning_tokens"] == 50).all() and (table["error"] == "").all()
    assert not table["text"].str.contains("ponder").any()  # the reasoning is not the trace
    assert big.metrics["reasoning_tokens"] == 50 * n
    assert big.metrics["answer_tokens"] == big.metrics["completion_tokens"] - 50 * n > 0
    assert big.metrics["estimated_cost_usd"] == pytest.approx((100 * n + big.metrics["completion_tokens"] * 2) / 1e6,
                                                              abs=1e-4)
    assert big.metrics["estimated_reasoning_cost_usd"] == pytest.approx(50 * n * 2 / 1e6, abs=1e-4)
    assert small.metrics["reasoning_budget_exhausted"] == n and small.metrics["reasoning_tokens"] == 40 * n
    assert small.tables["errors"].to_dict("records") == [{"error": "reasoning exhausted the budget", "requests": n}]
    assert off.metrics["sent"] == n and off.metrics["reasoning_tokens"] == 0  # a new key: sent again, no thinking
    assert [b.get("thinking") for b in server.bodies[-n:]] == [{"type": "disabled"}] * n
    keys = [set(pd.read_parquet(tmp_path / run / "generations.parquet")["request_key"]) for run in ("small", "off")]
    assert not keys[0] & keys[1]
    report = filter_traces(FilterParams(), tmp_path / "small", data / "keyframes", tmp_path / "filter")
    rejected = pd.read_parquet(tmp_path / "filter" / "rejected.parquet")
    assert report.metrics["rejected.reasoning_budget_exhausted"] == n == len(rejected)
    assert rejected["reason"].str.fullmatch(r"reasoning_budget_exhausted: 40 reasoning tokens, "
                                            r"finish_reason=length, no content").all()
