"""What a model must beat to have looked: the training prior's constant answer and the query swap
(`stages.evaluate.baselines`), alone and in the evaluate stage. Expected values are worked out by hand from the
definitions (the traces' mean and most common box, their most common keyframe position), not by the project's code."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.answer import parse_answer
from stages.evaluate import evaluate
from stages.evaluate import infer as I
from stages.evaluate.baselines import ConstantAnswer, constant_policy, swap_partners, training_prior
from stages.params.evaluate import EvaluateParams
from stages.params.model import ModelParams
from stages.params.sam2 import Sam2Params
from tests.revos_factory import VideoSpec, simple_video, write_root
from tests.stages.test_evaluate import eval_table


def trace(sample_id: str, key: int, boxes: list[list[int]]) -> dict:
    answer = json.dumps({"keyframe_timestamp": key, "bbox_2d_list": boxes})
    return {"sample_id": sample_id, "pool": "sft", "response": f"<think>t</think><answer>{answer}</answer>"}


SHOWN = {"s1": [0, 2, 4], "s2": [1, 3, 5], "s3": [0, 3, 6], "s4": [2, 4, 6]}


def keyframes_table(shown: dict[str, list[int]] = SHOWN, size: int = 112) -> pd.DataFrame:
    return pd.DataFrame([{"sample_id": k, "timestamps": v, "train_size": size} for k, v in shown.items()])


def test_the_training_prior_is_the_traces_mean_and_most_common_box_at_their_most_common_position() -> None:
    accepted = pd.DataFrame([
        trace("s1", 2, [[0, 12, 18, 37]]),  # position 1
        trace("s2", 3, [[0, 12, 18, 37]]),  # position 1
        trace("s3", 0, [[10, 20, 30, 40], [20, 0, 40, 20]]),  # position 0, two boxes
        trace("s4", 6, [[2, 4, 6, 8]]),  # position 2
        {"sample_id": "s4", "pool": "sft", "response": "<think>t</think><answer>not json</answer>"},  # skipped
        trace("gone", 1, [[99, 99, 100, 100]]),  # not in the keyframes table: skipped
    ])
    mean, mode = training_prior(accepted, keyframes_table())
    # 5 boxes: x1 (0+0+10+20+2)/5 = 6.4, y1 (12+12+20+0+4)/5 = 9.6, x2 (18+18+30+40+6)/5 = 22.4, y2 (37+37+40+20+8)/5
    assert mean == ConstantAnswer("mean", 1, (6.4, 9.6, 22.4, 28.4), 112)
    assert mode == ConstantAnswer("mode", 1, (0.0, 12.0, 18.0, 37.0), 112)
    assert training_prior(accepted.iloc[4:], keyframes_table()) == []  # no trace with a box


def test_ties_go_to_the_earlier_position_and_the_smaller_box() -> None:
    accepted = pd.DataFrame([trace("s1", 4, [[5, 5, 9, 9]]), trace("s3", 0, [[1, 1, 3, 3]])])  # positions 2 and 0
    mean, mode = training_prior(accepted, keyframes_table())
    assert (mean.keyframe_pos, mode.keyframe_pos, mode.box) == (0, 0, (1.0, 1.0, 3.0, 3.0))


def test_traces_shown_at_two_sizes_have_no_one_constant_box() -> None:
    accepted = pd.DataFrame([trace("s1", 2, [[0, 0, 4, 4]]), trace("s2", 3, [[0, 0, 4, 4]])])
    table = keyframes_table().assign(train_size=[112, 224, 112, 112])
    with pytest.raises(ValueError, match="several sizes"):
        training_prior(accepted, table)


def test_the_constant_policy_answers_the_position_and_the_box_at_the_shown_size() -> None:
    policy = constant_policy(ConstantAnswer("mean", 4, (6.4, 9.6, 22.4, 28.4), 112), 56)
    replies = policy([I.Query("a", "x", [0, 3, 7, 9, 12, 14], []), I.Query("b", "y", [0, 2, 5], [])])
    # position 4 of six shown frames is 12; of three, the last (5); the box halved and rounded
    assert [r.answer.keyframe_timestamp for r in replies] == [12, 5]
    assert [list(r.answer.boxes[0]) for r in replies] == [[3, 5, 11, 14]] * 2
    assert replies[0].answer == parse_answer(replies[0].response)


ROWS = [{"expression_id": f"v{v}#{e}", "video": f"v{v}"} for v in range(3) for e in range(4)]
TARGETS = {f"v{v}#{e}": frozenset({str(e % 3)}) for v in range(3) for e in range(4)}  # #0 and #3 name the same


def test_swap_partners_are_of_the_same_video_with_other_targets() -> None:
    partners = swap_partners(ROWS, TARGETS, 0)
    assert set(partners) == set(TARGETS)
    for expression, partner in partners.items():
        assert partner.split("#")[0] == expression.split("#")[0] and TARGETS[partner] != TARGETS[expression]
    lonely = [{"expression_id": "w#0", "video": "w"}, {"expression_id": "w#1", "video": "w"}]
    assert swap_partners(lonely, {"w#0": frozenset({"1"}), "w#1": frozenset({"1"})}, 0) == {}


@settings(max_examples=25, deadline=None)
@given(st.permutations(ROWS), st.integers(0, 3))
def test_the_pairing_depends_on_the_seed_and_the_rows_not_their_order(rows: list[dict], seed: int) -> None:
    assert swap_partners(rows, TARGETS, seed) == swap_partners(ROWS, TARGETS, seed)


def test_the_pairing_changes_with_the_seed() -> None:
    assert len({tuple(sorted(swap_partners(ROWS, TARGETS, seed).items())) for seed in range(8)}) > 1


# two videos whose two referring expressions name one rectangle each, so a swapped query names the other one
SWAP_SPECS = [VideoSpec(key=f"SRC/valid/{name}", split="valid", height=24, width=32, n_frames=4,
                        objects={10 * i + 1: [(2, 2, 12, 10)] * 4, 10 * i + 2: [(18, 12, 30, 22)] * 4},
                        expressions=[{"exp": f"{name} first", "obj_id": [0], "anno_id": [10 * i + 1], "type_id": 0},
                                     {"exp": f"{name} second", "obj_id": [1], "anno_id": [10 * i + 2], "type_id": 0},
                                     {"exp": f"{name} both", "obj_id": [0, 1], "anno_id": [10 * i + 1, 10 * i + 2],
                                      "type_id": 1}])
              for i, name in enumerate(("p", "q"), start=1)]


def reader(specs: list[VideoSpec], size: int):
    """A policy that reads the query: the boxes of the rectangles the query's text names, at the first frame."""
    named = {e["exp"]: (spec, e["anno_id"]) for spec in specs for e in spec.expressions}

    def answer(queries):
        out = []
        for q in queries:
            spec, annos = named[q.text]
            boxes = [[round(v * size / side) for v, side in zip(spec.objects[a][0], (32, 24, 32, 24), strict=True)]
                     for a in annos]
            text = f'<answer>{{"keyframe_timestamp": {q.timestamps[0]}, "bbox_2d_list": {boxes}}}</answer>'
            out.append(I.Reply(text, parse_answer(text), [q.timestamps[0]]))
        return out

    return answer


def test_a_model_that_reads_the_query_drops_when_it_is_swapped_and_one_that_does_not_stays(tmp_path: Path) -> None:
    specs = [*SWAP_SPECS, simple_video("SRC/train/t")]
    root = write_root(tmp_path / "root", specs)
    table = eval_table(tmp_path, root, specs)
    params = EvaluateParams(n_frames=3, segmenter="box", reference=False)
    reads = evaluate(params, ModelParams(), Sam2Params(), 56, root, table, tmp_path / "r", tmp_path / "r.md",
                     policy=reader(SWAP_SPECS, 56))
    m = reads.metrics
    assert m["JF_overall"] == pytest.approx(100.0) and m["swap_n_expressions"] == 6
    assert m["swap_own_JF_overall"] == pytest.approx(100.0)
    assert m["swap_JF_overall"] < 60  # every swapped query names another target set
    assert "each query swapped" in (tmp_path / "r.md").read_text()

    def blind(queries):  # the same answer whatever the query
        text = '<answer>{"keyframe_timestamp": 0, "bbox_2d_list": [[4, 4, 24, 20]]}</answer>'
        return [I.Reply(text, parse_answer(text), [0]) for _ in queries]

    blind_run = evaluate(params, ModelParams(), Sam2Params(), 56, root, table, tmp_path / "b", tmp_path / "b.md",
                         policy=blind).metrics
    assert blind_run["swap_JF_overall"] == pytest.approx(blind_run["swap_own_JF_overall"])
    off = evaluate(EvaluateParams(n_frames=3, segmenter="box", reference=False, swap_query=False), ModelParams(),
                   Sam2Params(), 56, root, table, tmp_path / "o", tmp_path / "o.md", policy=blind).metrics
    assert not any(k.startswith("swap_") for k in off)


def test_the_constant_row_scores_what_that_fixed_answer_scores_as_a_model(tmp_path: Path) -> None:
    """evaluate with the traces: `constant_*` equals the evaluation of a scripted policy that gives the stronger of
    the two constant answers to every query; the report shows the row."""
    specs = [*SWAP_SPECS, simple_video("SRC/train/t")]
    root = write_root(tmp_path / "root", specs)
    table = eval_table(tmp_path, root, specs)
    # three rows of the keyframes table as SFT samples; each trace names the first frame shown with it
    kf = pd.read_parquet(table).head(3).assign(sample_id=["a", "b", "c"], pool="sft", train_size=56,
                                               expression_id=["x1", "x2", "x3"])
    first = [int(t[0]) for t in kf["timestamps"]]
    # the mean box [8, 8, 24, 24] at 56 px; the most common box [36, 28, 52, 44] (the second rectangle at 56 px)
    accepted = pd.DataFrame([trace("a", first[0], [[36, 28, 52, 44]]), trace("b", first[1], [[36, 28, 52, 44]]),
                             trace("c", first[2], [[-48, -32, -32, -16]])])
    accepted_path, kf_path = tmp_path / "accepted.parquet", tmp_path / "kf.parquet"
    full = accepted.assign(**{c: 0 for c in ("trace_index", "keyframe_timestamp", "prompt_tokens",
                                               "completion_tokens", "reasoning_tokens", "attempts")},
                           **{c: "x" for c in ("task", "template_set", "template_id", "teacher", "text",
                                               "finish_reason", "error")},
                           request_key=["0" * 63 + str(i) for i in range(3)], backend="template", latency_s=0.0)
    full.to_parquet(accepted_path)
    kf.to_parquet(kf_path)
    params = EvaluateParams(n_frames=3, segmenter="box", swap_query=False)

    def fixed(box):  # the first frame shown, this box, whatever the query
        def answer(queries):
            texts = [f'<answer>{{"keyframe_timestamp": {q.timestamps[0]}, "bbox_2d_list": [{box}]}}</answer>'
                     for q in queries]
            return [I.Reply(text, parse_answer(text), [q.timestamps[0]])
                    for text, q in zip(texts, queries, strict=True)]
        return answer

    run = evaluate(params, ModelParams(), Sam2Params(), 56, root, table, tmp_path / "m", tmp_path / "m.md",
                   policy=fixed([36, 28, 52, 44]), traces=(accepted_path, kf_path)).metrics
    assert run["constant_kind"] == 1  # the most common box scores more than the mean box here
    assert run["constant_JF_overall"] == pytest.approx(run["JF_overall"])
    assert run["constant_mode_JF_overall"] > run["constant_mean_JF_overall"]
    assert [run[f"constant_box_{k}"] for k in ("x1", "y1", "x2", "y2")] == [36, 28, 52, 44]
    as_model = evaluate(params, ModelParams(), Sam2Params(), 56, root, table, tmp_path / "n", tmp_path / "n.md",
                        policy=fixed([8, 8, 24, 24])).metrics
    assert run["constant_mean_JF_overall"] == pytest.approx(as_model["JF_overall"])
    assert "| constant answer (the training prior) |" in (tmp_path / "m.md").read_text()
    assert np.isfinite(run["ceiling_JF_overall"]) and np.isfinite(run["empty_JF_overall"])
