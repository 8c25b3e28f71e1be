"""VideoSeg-R1's HTFS: K averaged intervals narrow the key segment while it is longer than δ·T, then the mean
percentage position picks the target frame; through a scripted video LLM and through the OpenAI client."""

from __future__ import annotations

import json
import re

import numpy as np
from PIL import Image

from stages.params.teacher import TeacherParams
from stages.tasks.inference import HtfsParams, htfs, htfs_answer, openai_generate, parse_interval, parse_percent
from tests.fake_openai import FakeOpenAI

T = 40
TIMESTAMPS = list(range(0, 2 * T, 2))  # 1 frame every 2 s (frame i at 2i s)
IMAGES = [Image.new("RGB", (8, 8), (i, i, i)) for i in range(T)]


def scripted(target: int, log: list):
    """A video LLM that knows the target frame: the k-th interval answer is the target's time ± (span / 8 + 2k) s
    (span: the time the shown frames cover), clipped to them; the position answer is the target's place inside
    the shown segment."""
    def generate(chats, images):
        out = []
        for k, chat in enumerate(chats):
            content = chat[0]["content"]
            shown = [int(c["text"][1:-2]) for c in content
                     if c["type"] == "text" and re.fullmatch(r"<\d+s>", c["text"])]
            question = content[-1]["text"]
            log.append((shown[0], shown[-1], "percent" in question))
            t = TIMESTAMPS[target]
            if "percent" in question:
                out.append(f'<answer>{{"percent": {100 * (t - shown[0]) / (shown[-1] - shown[0])}}}</answer>')
            else:
                pad = (shown[-1] - shown[0]) / 8 + 2 * k
                out.append(json.dumps({"start": max(shown[0], t - pad), "end": min(shown[-1], t + pad)}))
        return out
    return generate


def test_htfs_narrows_then_finds_the_target_frame():
    log: list = []
    trace = htfs("the dog", TIMESTAMPS, IMAGES, scripted(30, log), HtfsParams(k=3, delta=0.25, m=2, max_shown=16))
    # round 1 over the whole video (78 s): 60 ± 9.75 / 11.75 / 13.75 s → mean [48.25, 71.75] s → frames 24..36;
    # 13 frames > δ·T = 10 → round 2 inside (24 s): 60 ± 3 / 5 / 7 → [55, 65] s → frames 27..32 (ties: earlier)
    assert trace.intervals[0] == [(50.25, 69.75), (48.25, 71.75), (46.25, 73.75)]
    assert trace.segments == [(24, 36), (27, 32)]
    # position inside 54..64 s: (60 − 54) / 10 = 60 % → 27 + round(0.6 · 5) = 30
    assert trace.positions == [60.0, 60.0] and trace.target == 30
    assert sum(not is_position for _, _, is_position in log) == 6 and sum(p for _, _, p in log) == 2
    assert log[0][:2] == (0, 78) and log[-1][:2] == (54, 64)  # the position question shows the key segment


def test_htfs_stops_at_delta_and_at_max_rounds():
    log: list = []
    wide = htfs("the dog", TIMESTAMPS, IMAGES, scripted(30, log), HtfsParams(k=3, delta=0.5, m=1))
    assert wide.segments == [(24, 36)]  # 13 frames ≤ δ·T = 20 after one round
    one_round = htfs("the dog", TIMESTAMPS, IMAGES, scripted(30, log), HtfsParams(k=3, delta=0.01, m=1, max_rounds=1))
    assert one_round.segments == [(24, 36)] and 24 <= one_round.target <= 36


def test_unparseable_answers_fall_back_to_the_middle():
    trace = htfs("x", TIMESTAMPS, IMAGES, lambda chats, images: ["no idea"] * len(chats), HtfsParams(k=2, m=2))
    assert trace.segments == [] and trace.positions == [None, None] and trace.target == round(0.5 * (T - 1))
    assert parse_interval('{"start": 5, "end": 2}') is None and parse_interval('{"start": 1, "end": NaN}') is None
    assert parse_percent('{"percent": 101}') is None and parse_percent('<answer>{"percent": 12.5}</answer>') == 12.5


def test_htfs_answer_asks_the_videoseg_question_on_the_target_frame():
    log: list = []
    base = scripted(30, log)
    answer_text = ('<think>It is the dog.</think><answer>{"bbox_2d_list": [[1, 1, 5, 5]], "point_2d_list": [[3, 3]], '
                   '"negative_point_2d_list": [[6, 6]]}</answer>')
    seen = []

    def generate(chats, images):
        if '"negative_point_2d_list"' in chats[0][0]["content"][-1]["text"]:
            seen.append((chats[0][0]["content"][0]["text"], images[0][0].getpixel((0, 0))))
            return [answer_text]
        return base(chats, images)

    text, answer, trace = htfs_answer("the dog", TIMESTAMPS, IMAGES, generate, HtfsParams(k=3, m=2))
    assert seen == [("<60s>", (30, 30, 30))]  # the target frame alone, with its own timestamp
    assert answer.keyframe_timestamp == 60 and answer.boxes == ((1.0, 1.0, 5.0, 5.0),)
    assert answer.negative_points == ((6.0, 6.0),) and text == answer_text


def test_htfs_through_the_openai_client(tmp_path, monkeypatch):
    monkeypatch.setenv("VRSFLOW_TEST_KEY", "sk-test")
    with FakeOpenAI(reply='<answer>{"start": 10, "end": 16}</answer>') as server:
        teacher = TeacherParams(backend="openai", base_url=server.base_url, model="fake-vlm",
                                api_key_env="VRSFLOW_TEST_KEY", max_retries=0, timeout_s=5.0)
        generate = openai_generate(teacher, tmp_path / "cache", image_size=8)
        trace = htfs("the dog", TIMESTAMPS, IMAGES, generate, HtfsParams(k=3, m=2))
        sent = sum(len(a) for a in server.attempts.values())
    # every interval answer is [10, 16] s = frames 5..8; the position answers do not parse → the middle
    assert trace.segments == [(5, 8)] and trace.target == 5 + round(0.5 * 3)
    assert sent == 5  # K = 3 interval requests (distinct keys) + M = 2 position requests
    again = htfs("the dog", TIMESTAMPS, IMAGES, openai_generate(teacher, tmp_path / "cache", image_size=8),
                 HtfsParams(k=3, m=2))
    assert again.target == trace.target  # answered from the response cache
    assert np.isfinite(trace.target)


def test_rcot_inference_asks_each_task_its_own_question():
    """VDG → KFG → AKS (B: re-select with the rejected frame named) → KFG → AKS (A) → KTG on that frame alone."""
    from stages.tasks.inference import rcot_answer

    calls = []
    replies = iter([
        '<think>x</think><answer>{"description": "A dog runs, then sits."}</answer>',  # VDG
        '<think>x</think><answer>{"keyframe_timestamp": 4}</answer>',  # KFG
        '<think>x</think><answer>{"option": "B"}</answer>',  # AKS on <4s>
        '<think>x</think><answer>{"keyframe_timestamp": 8}</answer>',  # KFG again
        '<think>x</think><answer>{"option": "A"}</answer>',  # AKS on <8s>
        '<think>x</think><answer>{"bbox_2d_list": [[1, 2, 6, 7]], "point_2d_list": [[3, 4]]}</answer>',  # KTG
    ])

    def generate(chats, images):
        content = chats[0][0]["content"]
        calls.append(([c["text"] for c in content if c["type"] == "text"], len(images[0])))
        return [next(replies)]

    text, answer, trace = rcot_answer("the dog", TIMESTAMPS[:6], IMAGES[:6], generate, max_rounds=5)
    assert trace.description == "A dog runs, then sits." and trace.selections == [4, 8]
    assert trace.judgments == ["B", "A"]
    assert answer.keyframe_timestamp == 8 and answer.boxes == ((1.0, 2.0, 6.0, 7.0),) and answer.points == ((3.0, 4.0),)
    questions = [texts[-1] for texts, _ in calls]
    assert '"description"' in questions[0] and '{"keyframe_timestamp": t}' in questions[1]
    assert '"option"' in questions[2] and 'Video description: "A dog runs, then sits."' in questions[2]
    assert "<4s>" in questions[3] and "not to be valid keyframes" in questions[3]  # the rejected frame is named
    assert '"point_2d_list"' in questions[5] and "A dog runs" in questions[5]
    assert [n for _, n in calls] == [6, 6, 1, 6, 1, 1]  # AKS and KTG see the chosen frame alone
    assert calls[2][0][0] == "<4s>" and calls[5][0][0] == "<8s>"
    # λ = 2: the second selection is kept without another judgment
    replies = iter(['<think>x</think><answer>{"description": "d"}</answer>',
                    '<think>x</think><answer>{"keyframe_timestamp": 0}</answer>',
                    '<think>x</think><answer>{"option": "B"}</answer>',
                    '<think>x</think><answer>{"keyframe_timestamp": 2}</answer>',
                    '<think>x</think><answer>{"bbox_2d_list": [], "point_2d_list": []}</answer>'])
    _, answer, trace = rcot_answer("x", TIMESTAMPS[:3], IMAGES[:3], generate, max_rounds=2)
    assert trace.selections == [0, 2] and trace.judgments == ["B"] and answer.keyframe_timestamp == 2


def test_videoseg_points_become_sam2_prompts_at_inference(monkeypatch):
    """Evaluation: a VideoSeg-R1 answer's points, scaled to video pixels, go to SAM2 with the kept boxes (label 1
    positive, label 0 for each negative point, given to its nearest box); a box-only answer prompts boxes only."""
    from schemas.answer import BOXES_POINTS_NEGATIVE, parse_answer
    from stages import evaluate as E
    from stages.evaluate.infer import Reply

    text = ('<think>x</think><answer>{"bbox_2d_list": [[10, 10, 20, 20], [40, 40, 50, 50], [60, 60, 60, 70]], '
            '"point_2d_list": [[15, 15], [45, 45], [60, 65]], "negative_point_2d_list": [[22, 15], [52, 44]]}'
            '</answer>')
    answer = parse_answer(text, BOXES_POINTS_NEGATIVE)
    from dataclasses import replace

    reply = Reply(text, replace(answer, keyframe_timestamp=4))
    points = E.select_points(reply, size=56, width=112, height=56)  # x scaled ×2, y ×1; the empty 3rd box dropped
    assert points == [[(30.0, 15.0, 1), (44.0, 15.0, 0)], [(90.0, 45.0, 1), (104.0, 44.0, 0)]]
    assert E.select_points(Reply("", None), 56, 112, 56) == []
    seen = []

    def fake_groups(predictor, frames, groups, threshold=0.0):
        seen.extend(groups)
        return [np.zeros((len(g.boxes), len(frames), 56, 112), dtype=bool) for g in groups]

    monkeypatch.setattr("stages.sam2_wrapper.propagate_groups", fake_groups)
    frames = [np.zeros((56, 112, 3), np.uint8)] * 3
    E.predict_masks(None, frames, [(1, [[20.0, 10.0, 40.0, 20.0]], points[:1]), (2, [[0.0, 0.0, 4.0, 4.0]])])
    assert seen[0].points == points[:1] and seen[1].points == ()
    assert E.box_masks(frames, [(1, [[0, 0, 2, 2]], points[:1])])[0].sum() == 3 * 4


def test_agentic_steps_see_the_chosen_frame_at_the_keyframe_size(monkeypatch):
    """RCoT-Seg: AKS and KTG get the chosen frame alone at the keyframe size (840² in the profile), and the reply
    records that side, so evaluation reads the KTG boxes in that frame's pixels."""
    from stages.evaluate import infer as I

    replies = iter([['<think>x</think><answer>{"description": "d"}</answer>'],
                    ['<think>x</think><answer>{"keyframe_timestamp": 2}</answer>'],
                    ['<think>x</think><answer>{"option": "A"}</answer>'],
                    ['<think>x</think><answer>{"bbox_2d_list": [[10, 10, 20, 20]], "point_2d_list": [[15, 15]]}'
                     '</answer>']])
    sizes = []

    def scripted(model, processor, chats, images, max_new_tokens):
        sizes.append([im.size for im in images[0]])
        return next(replies)

    monkeypatch.setattr(I, "generate", scripted)
    big = {t: Image.new("RGB", (32, 32), (t, t, t)) for t in (0, 2, 4)}
    query = I.Query("q", "the box", [0, 2, 4], [Image.new("RGB", (8, 8))] * 3, frame_at=big.__getitem__)
    reply = I.answer_queries(None, None, [query], 16, 4, mode="rcot", max_rounds=3)[0]
    assert sizes == [[(8, 8)] * 3, [(8, 8)] * 3, [(32, 32)], [(32, 32)]]
    assert reply.answer_size == 32 and reply.answer.keyframe_timestamp == 2
    from stages.evaluate import select_prompt

    # boxes on the 32-px keyframe map to a 64 × 32 video: ×2 and ×1
    assert select_prompt(reply, [0, 2, 4], reply.answer_size, 64, 32) == ("ok", 2, [[20.0, 10.0, 40.0, 20.0]])
