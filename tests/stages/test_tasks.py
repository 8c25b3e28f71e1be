"""The task registry: unknown names refused, every task's declaration complete and consistent."""

from __future__ import annotations

import pytest

from schemas.answer import ANSWER_KEYS
from stages.rewards import REGISTRY
from stages.tasks import TASKS, check_tasks, frame_key_order, frame_keys, get_task, meta_content
from stages.teacher.prompts import cot_template_ids


def test_registry_refuses_unknown_names():
    with pytest.raises(ValueError, match="unknown task 'rcot_akz'.*known tasks"):
        get_task("rcot_akz")
    with pytest.raises(ValueError, match="sample.grpo_tasks: unknown task"):
        check_tasks(["veason", "nope"], "sample.grpo_tasks")
    with pytest.raises(ValueError, match="repeat"):
        check_tasks(["veason", "veason"], "x")
    assert sorted(TASKS) == ["rcot_aks", "rcot_kfg", "rcot_ktg", "rcot_vdg", "veason", "videoseg"]


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_task_declares_everything(name):
    task = get_task(name)
    assert task.name == name and task.schema.keys <= ANSWER_KEYS
    assert set(task.components) <= set(REGISTRY) and task.components[0] == "format"
    assert len(cot_template_ids(task.template_set)) == 3  # the teacher's template set exists
    question = task.question("the dog that jumps", [0, 3, 6], description="A dog jumps over a fence.")
    assert '"the dog that jumps"' in question and "<think>" in question and "<answer>" in question
    for key in task.schema.required:
        assert f'"{key}"' in question  # the question states the answer format of its own schema
    assert ("A dog jumps over a fence." in question) == task.uses_description
    assert task.rules[:4] == ("length", "refusal", "three_steps", "no_markings") and task.rules[-1] == "near_duplicate"
    for needed in task.needs_tasks:
        get_task(needed)


def test_task_specific_questions():
    # AKS asks for the option, KTG for boxes and points, Veason-R1 for the keyframe and boxes
    assert '{"option": "A" or "B"}' in get_task("rcot_aks").question("x", [4])
    assert '"point_2d_list"' in get_task("rcot_ktg").question("x", [4])
    assert "one frame of a video, at <4s>" in get_task("rcot_ktg").question("x", [4])
    veason = get_task("veason").question("x", [0, 2])
    assert '{"keyframe_timestamp": t, "bbox_2d_list": [[x1, y1, x2, y2], ...]}' in veason
    with pytest.raises(ValueError, match="no frame timestamps"):
        get_task("veason").question("x", [])


def test_frame_order_is_numeric_with_twelve_frames():
    names = [f"frame_{i}.jpg" for i in range(12)]
    record = {name: i for i, name in enumerate(reversed(names))} | {"json": b"{}", "__key__": "k"}
    assert frame_keys(record) == names  # frame_2 before frame_10 (a string sort puts frame_10 third)
    assert sorted(names) != names and sorted(names, key=frame_key_order) == names


def test_meta_content_uses_the_recorded_question():
    content = meta_content({"timestamps": [0, 5], "question": "Q?"})
    assert content == [{"type": "text", "text": "<0s>"}, {"type": "image"}, {"type": "text", "text": "<5s>"},
                       {"type": "image"}, {"type": "text", "text": "Q?"}]
