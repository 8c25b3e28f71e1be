"""Every filter rule on literal traces, and the response built from an accepted trace."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stages.core.params import FilterParams
from stages.filter import build_response, judge, response_for, rules
from stages.teacher.template_teacher import location_of, location_phrase

GOOD = ("Step 1: A red circle moves from the left to the right while a blue square stays still.\n"
        "Step 2: At 4s the circle is fully visible and largest, so this frame matches the moving circle best.\n"
        "Step 3: At 4s the circle is on the right side of the frame, near the top.")
SAMPLE = {"keyframe_timestamp": 4, "timestamps": [0, 2, 4, 6, 8, 10], "keyframe_pos": 2, "train_size": 112,
          "aks_option": "A",
          "boxes": [[None]] * 2 + [[[80.0, 5.0, 100.0, 25.0]]] + [[None]] * 3}


def row(text: str, template_set: str = "veason", error: str = "") -> dict:
    return {"text": text, "error": error, "template_set": template_set}


@pytest.mark.parametrize(("text", "reason"), [
    (GOOD, None),
    (GOOD.replace("Step 3:", "Finally:"), "missing_steps"),
    (GOOD.replace("Step 2:", "Step 3:").replace("Step 3: At 4s the circle is on", "Step 2: At 4s the circle is on"),
     "missing_steps"),
    (GOOD.replace("At 4s the circle is fully", "At 6s the circle is fully"), "keyframe_not_named"),
    (GOOD.replace("so this frame", "unlike 6s, so this frame"), "other_keyframe_named"),
    (GOOD.replace("moving circle best", "circle inside the red rectangle best"), "mentions_markings"),
    (GOOD.replace("moving circle best", "highlighted circle best"), "mentions_markings"),
    ("Step 1: x\nStep 2: 4s\nStep 3: y", "too_short"),
    (GOOD + " I'm sorry, I cannot help with that.", "refusal"),
    (GOOD.replace("on the right side of the frame, near the top", "on the left side of the frame"),
     "location_contradicts_box"),
    (GOOD.replace("near the top", "near the bottom"), "location_contradicts_box"),
])
def test_rules_on_literal_traces(text: str, reason: str | None) -> None:
    assert judge(row(text), SAMPLE, [], FilterParams()) == reason


def test_quoted_expression_is_not_a_location_claim() -> None:
    text = GOOD.replace("near the top.", 'near the top, as "the object on the left at the start" says.')
    assert judge(row(text), SAMPLE, [], FilterParams()) is None


def test_request_errors_and_length_bound() -> None:
    assert judge(row("", error="500 server error"), SAMPLE, [], FilterParams()).startswith("request_error")
    assert judge(row(GOOD), SAMPLE, [], FilterParams(max_chars=50)) == "too_long"


def test_near_duplicate_of_an_accepted_trace() -> None:
    almost = GOOD.replace("blue square", "blue squares")
    assert judge(row(almost), SAMPLE, [GOOD], FilterParams()) == "near_duplicate"
    assert judge(row(almost), SAMPLE, [GOOD], FilterParams(near_duplicate_ratio=1.0)) is None


@pytest.mark.parametrize(("ending", "reason"), [("Answer: A", None), ("Answer: B", "aks_wrong_option"),
                                                ("So it is valid.", "aks_no_option")])
def test_aks_option_must_match_ground_truth(ending: str, reason: str | None) -> None:
    text = GOOD.replace("near the top.", f"near the top. {ending}")
    assert judge(row(text, template_set="rcot_aks"), SAMPLE, [], FilterParams()) == reason


def test_response_format() -> None:
    response = build_response(" trace ", 4, [[80.4, 5.0, 99.6, 25.0], None])
    think, answer = response.split("</think>")
    assert think == "<think>trace"
    payload = json.loads(answer.removeprefix("<answer>").removesuffix("</answer>"))
    assert payload == {"keyframe_timestamp": 4, "bbox_2d_list": [[80, 5, 100, 25]]}


def test_split_steps() -> None:
    steps = rules.split_steps(GOOD)
    assert steps is not None and steps[2].startswith("At 4s")


def test_rules_depend_on_the_template_set() -> None:
    # a video description names no keyframe and makes no step-3 location claim: fine for rcot_description only
    description = GOOD.replace("At 4s the circle is fully visible and largest, so this frame matches the moving "
                               "circle best.", "Then the circle stops next to the square and both stay still.")
    description = description.replace("At 4s the circle is on the right side of the frame, near the top.",
                                      "The circle ends up on the left, beside the square.")
    assert judge(row(description), SAMPLE, [], FilterParams()) == "keyframe_not_named"
    assert judge(row(description, template_set="rcot_description"), SAMPLE, [], FilterParams()) is None
    # KTG traces are held to the keyframe and location rules like Veason-R1's
    assert judge(row(GOOD.replace("near the top", "near the bottom"), template_set="rcot_ktg"), SAMPLE, [],
                 FilterParams()) == "location_contradicts_box"


def test_responses_per_template_set() -> None:
    sample = {**SAMPLE, "ktg_points": [[90.4, 15.0]]}
    ktg = response_for("rcot_ktg", "t", sample)
    assert json.loads(ktg.split("<answer>")[1].removesuffix("</answer>")) == \
        {"keyframe_timestamp": 4, "bbox_2d_list": [[80, 5, 100, 25]], "point_2d_list": [[90, 15]]}
    assert response_for("rcot_aks", "t", sample) == '<think>t</think><answer>{"option": "A"}</answer>'


boxes = st.tuples(st.floats(0, 100), st.floats(0, 100), st.floats(1, 60), st.floats(1, 60)).map(
    lambda b: [b[0], b[1], min(112.0, b[0] + b[2]), min(112.0, b[1] + b[3])])


@given(box=boxes)
def test_location_words_of_the_box_itself_are_faithful(box: list[float]) -> None:
    """Property: step 3 written from a box's own location (the template teacher's words) always passes;
    the mirrored horizontal word fails whenever the box centre is in an outer third."""
    phrase = location_phrase(box, 112, 112)
    text = f"Step 1: a.\nStep 2: b.\nStep 3: The target is in {phrase} of the frame."
    assert rules.location_faithful(text, [box], 112) is None
    horizontal, _ = location_of(box, 112, 112)
    if horizontal in ("left", "right"):
        mirrored = "right" if horizontal == "left" else "left"
        wrong = f"Step 1: a.\nStep 2: b.\nStep 3: The target is on the {mirrored}."
        assert rules.location_faithful(wrong, [box], 112) == "location_contradicts_box"
