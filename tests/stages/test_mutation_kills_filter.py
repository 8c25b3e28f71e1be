"""The filter stage pinned for the mutation run (scripts/mutation.sh filter, docs/testing.md): the stage end to end on
hand-made tables (order, per-(sample, task) near-duplicates, tables, metrics, lineage, log line), each task's
training response, the request-error reasons, and the rules at their boundaries."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import stages.filter as filter_module
from schemas.cot import AcceptedSchema, GenerationsSchema, RejectedSchema
from schemas.sample import KeyframesSchema
from stages.core import rle
from stages.core.io import write_table
from stages.filter import answer_json, build_response, filter_traces, judge, response_for, rules
from stages.params.filter import FilterParams
from stages.teacher.client import REASONING_BUDGET_EXHAUSTED

GOOD = ("Step 1: A red circle moves from the left to the right while a blue square stays still.\n"
        "Step 2: At 4s the circle is fully visible and largest, so this frame matches the moving circle best.\n"
        "Step 3: At 4s the circle is on the right side of the frame, near the top.")
KEY_BOX = [80.0, 5.0, 100.0, 25.0]  # at train size 112: centre (90, 15) → right third, top third


def _mask_json(cells: list[tuple[int, int]]) -> str:
    mask = np.zeros((8, 8), dtype=bool)
    for y, x in cells:
        mask[y, x] = True
    return json.dumps(rle.encode(mask))


def keyframes_row(sample_id: str, pool: str) -> dict:
    """A keyframes row: 3 sampled frames (timestamps 0, 2, 4; keyframe 4 at position 2), two objects of which
    only the first is present at the keyframe; train size 112, keyframe size 168 (× 1.5)."""
    return {
        "sample_id": sample_id, "pool": pool, "expression_id": f"e-{sample_id}", "video": "v1", "exp_id": "0",
        "split": "train", "text": "the moving circle", "type": "referring", "n_instances": 2, "anno_ids": [1, 2],
        "stratum": "referring/2", "motion": 0.1, "level": None, "tasks": ["veason"],
        "height": 8, "width": 8, "n_video_frames": 6, "frame_indices": [0, 2, 4],
        "frame_names": ["00000.jpg", "00002.jpg", "00004.jpg"], "timestamps": [0, 2, 4], "keyframe_pos": 2,
        "keyframe_idx": 4, "keyframe_timestamp": 4, "keyframe_mode": "max_area",
        "frame_spread": "anchor", "topk_indices": [4],
        "boxes": [[None, None], [[10.0, 10.0, 20.0, 20.0], None], [KEY_BOX, None]],
        "areas": [[0.0, 0.0], [100.0, 0.0], [400.0, 0.0]], "union_areas": [0.0, 100.0, 400.0],
        "union_masks": [_mask_json([]), _mask_json([(1, 1)]), _mask_json([(0, 6), (1, 6)])],
        "ktg_points": [[90.0, 16.0], None], "aks_valid": [4], "aks_invalid": [0], "aks_option": "A",
        "aks_frame_idx": 4, "aks_frame_name": "00004.jpg", "aks_boxes": [[40.0, 40.0, 60.0, 70.0], None],
        "aks_areas": [600.0, 0.0], "aks_union_mask": _mask_json([(3, 3)]), "keyframe_size": 168,
        "video_union_areas": [0.0, 0.0, 100.0, 0.0, 400.0, 0.0], "train_size": 112, "seed": 0,
    }


def generation(sample_id: str, pool: str, index: int, task: str, text: str, template_id: str = "veason-1",
               error: str = "", **extra) -> dict:
    return {"request_key": hashlib.sha256(f"{sample_id}/{index}".encode()).hexdigest(), "sample_id": sample_id,
            "pool": pool, "trace_index": index, "task": task, "template_set": "veason", "template_id": template_id,
            "teacher": "template-teacher-v1", "backend": "template", "keyframe_timestamp": 4, "text": text,
            "finish_reason": "stop", "prompt_tokens": 10, "completion_tokens": 20, "reasoning_tokens": 0,
            "latency_s": 0.5, "attempts": 1, "error": error, **extra}


def write_inputs(base: Path, generations: list[dict]) -> tuple[Path, Path]:
    pools = sorted({g["pool"] for g in generations})
    for pool in pools:
        ids = sorted({g["sample_id"] for g in generations if g["pool"] == pool})
        write_table(pd.DataFrame([keyframes_row(i, pool) for i in ids]), KeyframesSchema,
                    base / "keyframes" / f"{pool}.parquet")
    write_table(pd.DataFrame(generations), GenerationsSchema, base / "cot" / "generations.parquet")
    return base / "cot", base / "keyframes"


VEASON_ANSWER = '{"keyframe_timestamp": 4, "bbox_2d_list": [[80, 5, 100, 25]]}'


def test_filter_traces_end_to_end(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Traces are judged in (sample, trace index) order; near-duplicates only among the accepted traces of the
    same sample and task; every rejection keeps its row and reason; metrics, table, lineage and the log line."""
    almost = GOOD.replace("blue square", "blue squares")
    rows = [
        generation("s1", "sft", 0, "veason", GOOD),
        generation("s1", "sft", 1, "veason", almost),  # near-duplicate of trace 0 (same sample and task)
        generation("s1", "sft", 2, "rcot_kfg", GOOD, template_id="kfg-1"),  # same text, other task: kept
        generation("s1", "sft", 3, "veason", "", error="500 server error"),
        generation("s2", "grpo", 0, "veason", "Step 1: a\nStep 2: 4s\nStep 3: b"),
        generation("s2", "grpo", 1, "veason", "Step 1: c\nStep 2: 4s\nStep 3: d"),
        generation("s2", "grpo", 2, "veason", GOOD),  # same text as s1's trace 0, other sample: kept
    ]
    cot, keyframes = write_inputs(tmp_path, rows[::-1])  # stored in reverse: the stage sorts
    params = FilterParams()
    with caplog.at_level(logging.INFO, logger="stages.filter"):
        report = filter_traces(params, cot, keyframes, tmp_path / "filter")
    accepted = pd.read_parquet(tmp_path / "filter" / "accepted.parquet")
    rejected = pd.read_parquet(tmp_path / "filter" / "rejected.parquet")
    assert list(accepted.columns) == list(AcceptedSchema.to_schema().columns)
    assert list(rejected.columns) == list(RejectedSchema.to_schema().columns)
    assert accepted[["sample_id", "trace_index", "response"]].values.tolist() == [
        ["s1", 0, f"<think>{GOOD}</think><answer>{VEASON_ANSWER}</answer>"],
        ["s1", 2, f'<think>{GOOD}</think><answer>{{"keyframe_timestamp": 4}}</answer>'],
        ["s2", 2, f"<think>{GOOD}</think><answer>{VEASON_ANSWER}</answer>"]]
    assert accepted["request_key"].tolist() == [rows[0]["request_key"], rows[2]["request_key"],
                                                rows[6]["request_key"]]
    assert accepted["text"].tolist() == [GOOD, GOOD, GOOD] and accepted["pool"].tolist() == ["sft", "sft", "grpo"]
    assert rejected[["sample_id", "trace_index", "reason"]].values.tolist() == [
        ["s1", 1, "near_duplicate"], ["s1", 3, "request_error: 500 server error"],
        ["s2", 0, "too_short"], ["s2", 1, "too_short"]]
    assert rejected["text"].tolist() == [almost, "", rows[4]["text"], rows[5]["text"]]
    expected_metrics = {"accepted": 3, "acceptance_rate": 0.4286, "rejected": 4, "rejected.near_duplicate": 1,
                        "rejected.request_error": 1, "rejected.too_short": 2}
    assert report.stage == "filter" and report.metrics == expected_metrics
    assert list(report.metrics) == sorted(expected_metrics)
    assert list(report.tables) == ["rejections per rule"]
    assert report.tables["rejections per rule"].values.tolist() == [["near_duplicate", 1], ["request_error", 1],
                                                                    ["too_short", 2]]
    assert list(report.tables["rejections per rule"].columns) == ["rule", "traces"]
    assert [r.getMessage() for r in caplog.records if r.name == "stages.filter"] == [
        "filter: accepted=3, rejected=4, acceptance_rate=0.4286, rejected.near_duplicate=1, "
        "rejected.request_error=1, rejected.too_short=2"]
    record = json.loads((tmp_path / "filter" / "lineage.json").read_text())
    assert record["stage"] == "filter" and record["params"] == {
        "min_chars": 120, "max_chars": 4000, "near_duplicate_ratio": 0.9, "check_faithfulness": True}
    assert sorted(record["inputs"]) == ["generations", "keyframes"]
    assert record["inputs"]["generations"]["path"] == (cot / "generations.parquet").as_posix()
    assert record["inputs"]["generations"]["sha256"] == hashlib.sha256(
        (cot / "generations.parquet").read_bytes()).hexdigest()
    assert record["inputs"]["keyframes"]["path"] == keyframes.as_posix()
    assert record["counts"] == {"accepted": 3, "rejected": 4}
    assert {k: int(v) for k, v in record["extra"]["accepted_per_template"].items()} == {"kfg-1": 1, "veason-1": 2}
    package = Path(filter_module.__file__).parent  # the code version: every .py of stages/filter
    digest = hashlib.sha256()
    for file in sorted(package.rglob("*.py")):
        digest.update(file.name.encode() + file.read_bytes())
    assert record["code_version"]["sha256"] == digest.hexdigest()


def test_filter_traces_all_rejected_and_all_accepted(tmp_path: Path) -> None:
    """Empty tables keep their columns; the rate divides by the number of traces (one trace: 0 or 1)."""
    cot, keyframes = write_inputs(tmp_path / "a", [generation("s1", "sft", 0, "veason", "short")])
    report = filter_traces(FilterParams(), cot, keyframes, tmp_path / "a" / "filter")
    accepted = pd.read_parquet(tmp_path / "a" / "filter" / "accepted.parquet")
    assert len(accepted) == 0 and list(accepted.columns) == list(AcceptedSchema.to_schema().columns)
    assert report.metrics == {"accepted": 0, "acceptance_rate": 0.0, "rejected": 1, "rejected.too_short": 1}
    cot, keyframes = write_inputs(tmp_path / "b", [generation("s1", "sft", 0, "veason", GOOD)])
    report = filter_traces(FilterParams(), cot, keyframes, tmp_path / "b" / "filter")
    rejected = pd.read_parquet(tmp_path / "b" / "filter" / "rejected.parquet")
    assert len(rejected) == 0 and list(rejected.columns) == list(RejectedSchema.to_schema().columns)
    assert report.metrics == {"accepted": 1, "acceptance_rate": 1.0, "rejected": 0}
    table = report.tables["rejections per rule"]
    assert list(table.columns) == ["rule", "traces"] and len(table) == 0


# ---------------------------------------------------------------- the training response of each task


@pytest.mark.parametrize(("task", "answer"), [
    ("veason", VEASON_ANSWER),  # sampled frames at train size; the absent object left out
    ("rcot_kfg", '{"keyframe_timestamp": 4}'),
    # the keyframe at 168 = 1.5 × 112: box (80, 5, 100, 25) → (120, 7.5, 150, 37.5); point (90, 16) → (135, 24)
    ("rcot_ktg", '{"bbox_2d_list": [[120, 8, 150, 38]], "point_2d_list": [[135, 24]]}'),
    ("rcot_aks", '{"option": "A"}'),
])
def test_response_for_each_task(task: str, answer: str) -> None:
    sample = keyframes_row("s1", "sft")
    assert response_for(task, f"  {GOOD}\n", sample) == f"<think>{GOOD}</think><answer>{answer}</answer>"


def test_response_for_a_description_is_the_trace_under_a_fixed_thinking() -> None:
    sample = keyframes_row("s1", "sft")
    assert response_for("rcot_vdg", "  The circle moves right.\n", sample) == (
        "<think>I describe the scene and its objects, the events in order and the relations the question needs."
        '</think><answer>{"description": "The circle moves right."}</answer>')


def test_answer_json_and_build_response_with_points() -> None:
    assert answer_json(4, [[1.4, 2.6, 3.5, 4.5], None], [[5.2, 6.7], None, [0.4, 9.9]]) == (
        '{"keyframe_timestamp": 4, "bbox_2d_list": [[1, 3, 4, 4]], "point_2d_list": [[5, 7], [0, 10]]}')
    assert build_response(" t ", 2, [[1.0, 2.0, 3.0, 4.0]], [[1.6, 2.2]]) == (
        '<think>t</think><answer>{"keyframe_timestamp": 2, "bbox_2d_list": [[1, 2, 3, 4]], '
        '"point_2d_list": [[2, 2]]}</answer>')
    assert build_response("t", 2, [[1.0, 2.0, 3.0, 4.0]]) == (
        '<think>t</think><answer>{"keyframe_timestamp": 2, "bbox_2d_list": [[1, 2, 3, 4]]}</answer>')


# ---------------------------------------------------------------- judge


def _row(text: str, task: str = "veason", error: str = "", **extra) -> dict:
    return {"text": text, "error": error, "task": task, **extra}


def test_request_error_reasons() -> None:
    sample, params = keyframes_row("s1", "sft"), FilterParams()
    exhausted = f"{REASONING_BUDGET_EXHAUSTED} (max_tokens 40)"
    assert judge(_row("", error=exhausted, reasoning_tokens=40, finish_reason="max_tokens"), sample, [], params) == (
        "reasoning_budget_exhausted: 40 reasoning tokens, finish_reason=max_tokens, no content")
    assert judge(_row("", error=exhausted), sample, [], params) == (  # a row without the counts
        "reasoning_budget_exhausted: 0 reasoning tokens, finish_reason=length, no content")
    long_error = "E" * 79 + "xyz"
    assert judge(_row(GOOD, error=long_error), sample, [], params) == "request_error: " + "E" * 79 + "x"


def test_every_task_checks_three_steps() -> None:
    sample, params = keyframes_row("s1", "sft"), FilterParams()
    prose = ("The circle moves from one side to the other while the square stays where it is; both are round "
             "and square shapes on a plain background, filmed from above.")
    assert judge(_row(prose, task="rcot_vdg"), sample, [], params) == "missing_steps"
    assert judge(_row(prose + " Answer: A", task="rcot_aks"), sample, [], params) == "missing_steps"
    assert rules.three_steps(prose) == "missing_steps" and rules.three_steps(GOOD) is None


def test_faithfulness_check_can_be_switched_off() -> None:
    sample = keyframes_row("s1", "sft")
    wrong = GOOD.replace("on the right side of the frame, near the top", "on the left side of the frame")
    assert judge(_row(wrong), sample, [], FilterParams()) == "location_contradicts_box"
    assert judge(_row(wrong), sample, [], FilterParams(check_faithfulness=False)) is None


# ---------------------------------------------------------------- rules


def test_split_steps_exact_parts() -> None:
    assert rules.split_steps("Step 1: a.\nStep 2: b b.\nStep 3: c.") == {1: "a.", 2: "b b.", 3: "c."}
    assert rules.split_steps("1. first\n2) second\n3. third") == {1: "first", 2: "second", 3: "third"}


def test_missing_steps_from_the_step_rules() -> None:
    no_steps = "The circle is on the right at 4s."
    assert rules.keyframe_named(no_steps, 4, [0, 2, 4]) == "missing_steps"
    assert rules.location_faithful(no_steps, [KEY_BOX], 112) == "missing_steps"


def test_unquoted_replaces_each_quote_by_one_space() -> None:
    assert rules.unquoted('a "left one" b “marked” c') == "a   b   c"


def test_length_bounds_are_inclusive() -> None:
    assert rules.length_within("  abcde  ", 5, 5) is None
    assert rules.length_within("abcd", 5, 9) == "too_short"
    assert rules.length_within("abcdefghij", 5, 9) == "too_long"


def test_near_duplicate_of_a_long_trace_and_at_ratio_one() -> None:
    """One word changed in a 400-character trace is a near-duplicate (no characters discarded as junk: with
    difflib's autojunk the ratio of these two falls to about 0.75); an identical trace is one even at ratio 1."""
    long = ("Step 1: " + "the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat near the "
            "door. " * 4)
    other = long.replace("lazy dog while", "sleepy dog while", 1)
    assert rules.not_near_duplicate(other, [long], 0.9) == "near_duplicate"
    assert rules.not_near_duplicate(long, [long], 1.0) == "near_duplicate"
    assert rules.not_near_duplicate(other, [long], 1.0) is None


@pytest.mark.parametrize(("box", "place"), [
    # size 6: thirds at 2 and 4; a centre exactly on a third line is in the centre third
    ([1, 1, 3, 3], ("centre", "middle")),  # centre (2, 2) = 1/3 of the side
    ([3, 3, 5, 5], ("centre", "middle")),  # centre (4, 4) = 2/3
    ([3, 1, 4.2, 2.6], ("centre", "top")),  # centre (3.6, 1.8): x 0.6 (centre, not right of 1/2), y 0.3 (top)
    ([0, 3, 1, 4.2], ("left", "middle")),  # centre y 3.6 = 0.6 of the side: the middle third
])
def test_box_thirds_boundaries(box: list[float], place: tuple[str, str]) -> None:
    assert rules.box_thirds([box], 6) == place


@pytest.mark.parametrize(("box", "step3", "reason"), [
    # a side word is not contradicted by a box in the centre third of that axis
    ([40, 5, 70, 25], "Step 3: At 4s the circle is on the left, near the top.", None),  # column centre
    ([80, 40, 100, 70], "Step 3: At 4s the circle is on the right, near the top.", None),  # row middle
    # "centre" alone is contradicted only when the box is in an outer third along both axes
    ([40, 5, 70, 25], "Step 3: At 4s the circle is in the centre of the frame.", None),  # (centre, top)
    ([5, 40, 25, 70], "Step 3: At 4s the circle is in the middle of the frame.", None),  # (left, middle)
    ([5, 5, 25, 25], "Step 3: At 4s the circle is in the middle of the frame.", "location_contradicts_box"),
])
def test_location_words_against_centre_thirds(box: list[float], step3: str, reason: str | None) -> None:
    text = "Step 1: a.\nStep 2: b.\n" + step3
    assert rules.location_faithful(text, [box, None], 112) == reason
