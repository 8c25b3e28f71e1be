"""Every filter rule on literal traces, and the response built from an accepted trace."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stages.filter import build_response, judge, rules
from stages.params.filter import FilterParams

GOOD = ("Step 1: A red circle moves from the left to the right while a blue square stays still.\n"
        "Step 2: At 4s the circle is fully visible and largest, so this frame matches the moving circle best.\n"
        "Step 3: At 4s the circle is on the right side of the frame, near the top.")
SAMPLE = {"keyframe_timestamp": 4, "timestamps": [0, 2, 4, 6, 8, 10], "keyframe_pos": 2, "train_size": 112,
          "aks_option": "A",
          "boxes": [[None]] * 2 + [[[80.0, 5.0, 100.0, 25.0]]] + [[None]] * 3}


def row(text: str, task: str = "veason", error: str = "") -> dict:
    return {"text": text, "error": error, "task": task}


@pytest.mark.parametrize(("text", "reason"), [
    (GOOD, None),
    (GOOD.replace("Step 3:", "Finally:"), "missing_steps"),
    (GOOD.replace("Step 2:", "Step 3:").replace("Step 3: At 4s the circle is on", "Step 2: At 4s the circle is on"),
     "missing_steps"),
    (GOOD.replace("At 4s the circle is fully", "At 6s the circle is fully"), "other_keyframe_named"),
    (GOOD.replace("At 4s the circle is fully", "Then the circle is fully").replace("At 4s the circle is on",
                                                                                  "The circle is on"),
     "keyframe_not_named"),
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
    assert judge(row(text, task="rcot_aks"), SAMPLE, [], FilterParams()) == reason


def test_response_format() -> None:
    response = build_response(" trace ", 4, [[80.4, 5.0, 99.6, 25.0], None])
    think, answer = response.split("</think>")
    assert think == "<think>trace"
    payload = json.loads(answer.removeprefix("<answer>").removesuffix("</answer>"))
    assert payload == {"keyframe_timestamp": 4, "bbox_2d_list": [[80, 5, 100, 25]]}


def test_split_steps() -> None:
    steps = rules.split_steps(GOOD)
    assert steps is not None and steps[2].startswith("At 4s")


def test_rules_depend_on_the_task() -> None:
    # a video description names no keyframe and makes no step-3 location claim: fine for rcot_vdg only
    description = GOOD.replace("At 4s the circle is fully visible and largest, so this frame matches the moving "
                               "circle best.", "Then the circle stops next to the square and both stay still.")
    description = description.replace("At 4s the circle is on the right side of the frame, near the top.",
                                      "The circle ends up on the left, beside the square.")
    assert judge(row(description), SAMPLE, [], FilterParams()) == "keyframe_not_named"
    assert judge(row(description, task="rcot_vdg"), SAMPLE, [], FilterParams()) is None
    # KTG traces are held to the keyframe and location rules like Veason-R1's
    assert judge(row(GOOD.replace("near the top", "near the bottom"), task="rcot_ktg"), SAMPLE, [],
                 FilterParams()) == "location_contradicts_box"
    with pytest.raises(ValueError, match="unknown task"):
        judge(row(GOOD, task="rcot_xyz"), SAMPLE, [], FilterParams())


# the published Veason-R1 trace style (numbered steps, "the frame at timestamp 41", "In frame 41")
PUBLISHED = ("1. The video shows a street where a white van drives past parked cars while a cyclist waits at "
             "the crossing.\n"
             "2. The question asks for the vehicle that overtakes the others; the frame at timestamp 41 shows it "
             "fully beside the parked cars, so it matches best there.\n"
             "3. In frame 41, the white van is at the right of the frame, near the top, moving left.")
PUBLISHED_SAMPLE = {"keyframe_timestamp": 41, "timestamps": [5, 17, 29, 41, 53, 65], "keyframe_pos": 3,
                    "train_size": 112, "aks_option": "A",
                    "boxes": [[None]] * 3 + [[[80.0, 5.0, 100.0, 25.0]]] + [[None]] * 2}


@pytest.mark.parametrize(("text", "reason"), [
    (PUBLISHED, None),
    (PUBLISHED.replace("the frame at timestamp 41", "<41s>"), None),
    (PUBLISHED.replace("the frame at timestamp 41", "the frame at 41 seconds"), None),
    (PUBLISHED.replace("1. The video", "**Step 1:** The video").replace("2. The question", "**Step 2:** The "
                                                                         "question").replace("3. In frame",
                                                                                             "**Step 3:** In frame"),
     None),
    # known-bad traces of the same style
    (PUBLISHED.replace("timestamp 41", "timestamp 29").replace("In frame 41", "In frame 29"), "keyframe_not_named"),
    (PUBLISHED.replace("shows it fully", "shows it fully, unlike frame 53,"), "other_keyframe_named"),
    (PUBLISHED.replace("at the right of the frame", "at the left of the frame"), "location_contradicts_box"),
    (PUBLISHED.replace("near the top", "near the bottom"), "location_contradicts_box"),
    (PUBLISHED.replace("3. In frame", "In frame"), "missing_steps"),
])
def test_published_trace_style(text: str, reason: str | None) -> None:
    assert judge(row(text), PUBLISHED_SAMPLE, [], FilterParams()) == reason


@pytest.mark.parametrize(("step3", "reason"), [
    # regression: motion words are not location claims ("at the right, moving left" is on the right)
    ("Step 3: At 4s the circle is at the right, moving left.", None),
    ("Step 3: At 4s the circle is near the top right, heading towards the bottom left.", None),
    ("Step 3: At 4s the circle, which came from the left, is on the right.", None),
    ("Step 3: At 4s the circle is to the left of the square, on the right side of the frame.", None),
    ("Step 3: At 4s the circle moves left; it is still in the top right.", None),
    # and the claims themselves are still checked
    ("Step 3: At 4s the circle is at the left, moving right.", "location_contradicts_box"),
    ("Step 3: At 4s the circle is in the lower part of the frame, moving up.", "location_contradicts_box"),
    ("Step 3: At 4s the circle is in the centre of the frame.", "location_contradicts_box"),
])
def test_motion_words_are_not_locations(step3: str, reason: str | None) -> None:
    text = GOOD.split("Step 3:")[0] + step3
    assert judge(row(text), SAMPLE, [], FilterParams()) == reason


@pytest.mark.parametrize(("box", "place"), [
    # the filter's own literals: box centre by thirds of a 112-px frame (37.33 / 74.67)
    ([0, 0, 20, 20], ("left", "top")), ([90, 90, 112, 112], ("right", "bottom")),
    ([40, 40, 70, 70], ("centre", "middle")), ([30, 0, 44, 10], ("left", "top")),  # centre x 37 < 37.33
    ([31, 0, 45, 10], ("centre", "top")), ([0, 70, 10, 80], ("left", "bottom")),
])
def test_box_thirds_literals(box: list[float], place: tuple[str, str]) -> None:
    assert rules.box_thirds([box], 112) == place
    assert rules.box_thirds([None, [0, 0, 10, 10], [100, 100, 112, 112]], 112) == ("centre", "middle")  # union
    assert rules.box_thirds([None], 112) is None


boxes = st.tuples(st.floats(0, 100), st.floats(0, 100), st.floats(1, 60), st.floats(1, 60)).map(
    lambda b: [b[0], b[1], min(112.0, b[0] + b[2]), min(112.0, b[1] + b[3])])


WORDS = {("left", "top"): "the top left", ("right", "top"): "the top right", ("centre", "top"): "the top",
         ("left", "middle"): "the left", ("right", "middle"): "the right", ("centre", "middle"): "the centre",
         ("left", "bottom"): "the bottom left", ("right", "bottom"): "the bottom right",
         ("centre", "bottom"): "the bottom"}


@given(box=boxes)
def test_location_words_of_the_box_itself_are_faithful(box: list[float]) -> None:
    """Property: step 3 naming the box's own place (written here from literals) passes; the mirrored
    horizontal word fails whenever the box centre is in an outer third."""
    cx = (box[0] + box[2]) / 2
    cy = (box[1] + box[3]) / 2
    column = "left" if cx * 3 < 112 else "right" if cx * 3 > 224 else "centre"
    row_ = "top" if cy * 3 < 112 else "bottom" if cy * 3 > 224 else "middle"
    text = f"Step 1: a.\nStep 2: b.\nStep 3: The target is in {WORDS[column, row_]} of the frame."
    assert rules.location_faithful(text, [box], 112) is None
    if column in ("left", "right"):
        mirrored = "right" if column == "left" else "left"
        wrong = f"Step 1: a.\nStep 2: b.\nStep 3: The target is on the {mirrored}."
        assert rules.location_faithful(wrong, [box], 112) == "location_contradicts_box"


def test_the_filter_does_not_use_the_teachers_location_code() -> None:
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(rules))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(m and m.startswith("stages.teacher") for m in imported)
