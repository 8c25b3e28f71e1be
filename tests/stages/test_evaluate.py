"""The standalone scorer on a tiny ReVOS root, the CLI, inference helpers, SAM2 prompting, and an
end-to-end `evaluate` with the tiny random Qwen2.5-VL and micro SAM2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from flows.cli import main as cli_main
from schemas.answer import parse_answer
from schemas.evaluate import ExpressionScoresSchema, InferenceSchema
from stages.core.frame_spread import spread_frames
from stages.core.io import read_table
from stages.core.runner import RunnerParams
from stages.evaluate import evaluate, predict_masks, read_answers, select_prompt, write_prediction
from stages.evaluate import infer as I
from stages.evaluate.scorer import load_ground_truth, score_predictions
from stages.params.evaluate import EvaluateParams
from stages.params.keyframes import KeyframesParams
from stages.params.model import ModelParams
from stages.params.sam2 import Sam2Params
from stages.params.sample import SampleParams
from stages.params.tiny_models import TinyModelsParams
from tests.revos_factory import VideoSpec, rect_mask, simple_video, write_root
from tests.sam2_probe import count_encoded_frames

VALID = [simple_video("SRC/valid/a", split="valid", n_frames=4), simple_video("SRC/valid/b", split="valid", n_frames=5)]


def gt_union(spec: VideoSpec, exp: dict, t: int) -> np.ndarray:
    mask = np.zeros((spec.height, spec.width), dtype=bool)
    for anno in exp["anno_id"]:
        mask |= rect_mask(spec.objects[anno][t], spec.height, spec.width)
    return mask


def write_predictions(pred: Path, specs: list[VideoSpec], value: int = 255, shift: int = 0) -> None:
    """Every expression's ground truth (shifted right by `shift` px) as PNGs holding 0/`value`."""
    for spec in specs:
        for i, exp in enumerate(spec.expressions):
            folder = pred / spec.key / str(i)
            folder.mkdir(parents=True, exist_ok=True)
            for t, name in enumerate(spec.frame_names()):
                mask = np.roll(gt_union(spec, exp, t), shift, axis=1)
                Image.fromarray(mask.astype(np.uint8) * value, mode="L").save(folder / f"{name}.png")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_root(tmp_path_factory.mktemp("revos") / "root", VALID + [simple_video("SRC/train/t")])


# --- the standalone scorer ---------------------------------------------------------------------------------


def test_perfect_predictions_score_one(root: Path, tmp_path: Path) -> None:
    write_predictions(tmp_path / "pred", VALID)
    summary, table = score_predictions(tmp_path / "pred", root)
    ExpressionScoresSchema.validate(table)
    assert len(table) == 6 and (table["status"] == "ok").all()
    for subset in ("referring", "reasoning", "overall"):
        for metric in ("J", "F", "JF", "R_visa", "R_binary"):
            assert summary[f"{metric}_{subset}"] == pytest.approx(100.0)
    assert summary["n_expressions"] == 6 and summary["n_scored"] == 4
    assert (table.loc[table["type_id"] == 2, "J"] == 1.0).all()  # empty vs empty, excluded from the aggregates


def test_shifted_predictions_known_values_and_r_on_0_1_pngs(root: Path, tmp_path: Path) -> None:
    write_predictions(tmp_path / "p255", VALID, value=255, shift=2)
    write_predictions(tmp_path / "p1", VALID, value=1, shift=2)
    _, t255 = score_predictions(tmp_path / "p255", root)
    _, t1 = score_predictions(tmp_path / "p1", root)
    # J and F binarise: 0/1 and 0/255 PNGs score the same
    assert np.allclose(t255["J"], t1["J"]) and np.allclose(t255["F"], t1["F"])
    # the referring target of video a is 8 px wide (6 rows): shifted by 2 → IoU 6·6 / 6·10 on every frame
    ref_a = t255.set_index("expression_id").loc["SRC/valid/a#0"]
    assert ref_a["J"] == pytest.approx(36 / 60)
    # R: stored 0/1, VISA's replica equals the binary R; stored 0/255 each false positive weighs 255
    assert np.allclose(t1["R_visa"], t1["R_binary"])
    targets = t255[t255["type_id"] < 2]
    assert (targets["R_visa"] < targets["R_binary"]).all()
    assert (targets["R_binary"] < 1).all()


def test_missing_predictions_score_zero(root: Path, tmp_path: Path) -> None:
    write_predictions(tmp_path / "pred", VALID)
    (tmp_path / "pred/SRC/valid/a/0/00002.png").unlink()
    shutil.rmtree(tmp_path / "pred/SRC/valid/b")
    summary, table = score_predictions(tmp_path / "pred", root)
    rows = table.set_index("expression_id")
    assert rows.loc["SRC/valid/a#0", "status"] == "missing_frame"
    assert rows.loc["SRC/valid/a#0", ["J", "F", "R_visa"]].tolist() == [0.0, 0.0, 0.0]
    assert (rows.loc[[f"SRC/valid/b#{i}" for i in range(3)], "status"] == "missing_video").all()
    assert summary["n_missing_frame"] == 1 and summary["n_missing_video"] == 3
    assert summary["J_referring"] == pytest.approx(0.0)  # both referring expressions are missing
    assert summary["J_reasoning"] == pytest.approx(50.0)  # a#1 perfect, b#1 missing


def test_wrong_size_prediction_scores_zero(root: Path, tmp_path: Path) -> None:
    write_predictions(tmp_path / "pred", VALID[:1])
    Image.new("L", (5, 5)).save(tmp_path / "pred/SRC/valid/a/1/00000.png")
    _, table = score_predictions(tmp_path / "pred", root, expressions=["SRC/valid/a#0", "SRC/valid/a#1"])
    assert table.set_index("expression_id")["status"].to_dict() == {"SRC/valid/a#0": "ok",
                                                                     "SRC/valid/a#1": "bad_shape"}


def test_unknown_expression_is_an_error(root: Path) -> None:
    with pytest.raises(ValueError, match="not found"):
        load_ground_truth(root, "valid", ["SRC/valid/a#99"])


def test_cli_scores_a_folder(root: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_predictions(tmp_path / "pred", VALID)
    code = cli_main(["evaluate", "--pred", str(tmp_path / "pred"), "--data", str(root),
                     "--out", str(tmp_path / "m.json"), "--table", str(tmp_path / "t.csv")])
    assert code == 0
    assert json.loads((tmp_path / "m.json").read_text())["JF_overall"] == pytest.approx(100.0)
    assert len(pd.read_csv(tmp_path / "t.csv")) == 6
    assert json.loads(capsys.readouterr().out)["n_expressions"] == 6
    assert cli_main(["evaluate", "--pred", str(tmp_path / "nowhere"), "--data", str(root)]) == 1


# --- inference helpers -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("T", "N", "expected"), [
    (10, 6, [0, 2, 4, 5, 7, 9]), (4, 6, [0, 1, 2, 3]), (100, 2, [0, 99]), (7, 1, [0]), (6, 6, list(range(6))),
])
def test_uniform_frames(T: int, N: int, expected: list[int]) -> None:
    assert spread_frames(T, N) == expected  # the frames the evaluation shows (stages.core.frame_spread)


@pytest.mark.parametrize(("text", "option"), [
    ('<think>x</think><answer>{"option": "B"}</answer>', "B"),
    ('<answer> {"option": "A"} </answer>', "A"),
    ("Step 3: it is there.\nAnswer: A", "A"),
    ('<answer>{"option": "C"}</answer>', None),
    ("no idea", None),
])
def test_parse_option(text: str, option: str | None) -> None:
    assert I.parse_option(text) == option


def reply(text: str) -> I.Reply:
    return I.Reply(text, parse_answer(text))


@pytest.mark.parametrize(("text", "status", "key", "boxes"), [
    ('<think>a</think><answer>{"keyframe_timestamp": 4, "bbox_2d_list": [[0, 0, 56, 28]]}</answer>', "ok", 4,
     [[0.0, 0.0, 16.0, 6.0]]),  # 112² shown, 32×24 video
    ('<think>a</think><answer>{"keyframe_timestamp": 3, "bbox_2d_list": [[0, 0, 56, 28]]}</answer>',
     "keyframe_not_shown", 2, [[0.0, 0.0, 16.0, 6.0]]),  # 3 is between shown 2 and 4: the earlier wins
    ('<think>a</think><answer>{"keyframe_timestamp": 4, "bbox_2d_list": [[200, 0, 300, 28]]}</answer>',
     "degenerate_boxes", 4, []),  # outside the frame after clipping
    ('<think>a</think><answer>{"keyframe_timestamp": 4, "bbox_2d_list": [[76, 49, 49, 57], [37, 75, 75, 75]]}'
     '</answer>', "degenerate_boxes", 4, []),  # x2 < x1, zero height: the default run's tiny model writes these
    ('<think>a</think><answer>{"keyframe_timestamp": 3, "bbox_2d_list": [[5, 5, 5, 9]]}</answer>',
     "degenerate_boxes", 2, []),  # zero width wins over the moved keyframe: nothing is segmented
    ('<think>a</think><answer>{"keyframe_timestamp": 4, "bbox_2d_list": []}</answer>', "no_boxes", 4, []),
    ("garbage", "parse_failure", 0, []),
])
def test_select_prompt(text: str, status: str, key: int, boxes: list) -> None:
    assert select_prompt(reply(text), [0, 2, 4], 112, 32, 24) == (status, key, boxes)


def test_an_answers_table_from_before_degenerate_boxes_is_relabelled_or_refused(tmp_path: Path) -> None:
    """Older tables labelled degenerate boxes "no_boxes" (boxes kept): `read_answers` relabels those rows, the
    schema refuses them as they are."""
    import pandera.errors

    row = {"sample_id": "s", "expression_id": "v#0", "video": "v", "exp_id": "0", "type_id": 0, "text": "t",
           "n_video_frames": 4, "frame_indices": [0, 2], "timestamps": [0, 2], "frame_size": 56, "response": "r",
           "keyframe_timestamp": 2.0, "keyframe_idx": 2.0, "n_rounds": 1, "rounds": [],
           "keyframe_area_ratio": None, "keyframe_box_iou": None}
    old = pd.DataFrame([{**row, "sample_id": "a", "expression_id": "v#0", "status": "no_boxes",
                         "boxes": [[76.0, 49.0, 49.0, 57.0]]},
                        {**row, "sample_id": "b", "expression_id": "v#1", "status": "no_boxes", "boxes": []}])
    old.to_parquet(tmp_path / "answers.parquet")
    with pytest.raises(pandera.errors.SchemaErrors, match="no_boxes_without_boxes"):
        read_table(tmp_path / "answers.parquet", InferenceSchema)
    assert read_answers(tmp_path / "answers.parquet")["status"].tolist() == ["degenerate_boxes", "no_boxes"]


def test_rcot_loop_reselects_after_b_and_stops_at_lambda(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop's control flow with scripted completions (a unit test of the loop, not of a model): RCoT-Seg's
    tasks in order, VDG → KFG → AKS (B) → KFG → AKS (B) → KFG (unparseable: the last selection is kept) → KTG."""
    answers = iter([
        ['<think>a</think><answer>{"description": "a box moves"}</answer>'],
        ['<think>a</think><answer>{"keyframe_timestamp": 0}</answer>'], ['<answer>{"option": "B"}</answer>'],
        ['<think>a</think><answer>{"keyframe_timestamp": 2}</answer>'], ['<answer>{"option": "B"}</answer>'],
        ["nonsense"],
        ['<think>a</think><answer>{"bbox_2d_list": [[1, 1, 5, 5]], "point_2d_list": [[3, 3]]}</answer>'],
    ])
    seen: list[list[dict]] = []

    def scripted(model, processor, chats, images, max_new_tokens):
        seen.extend(chats)
        return next(answers)

    monkeypatch.setattr(I, "generate", scripted)
    queries = [I.Query("q0", "the box", [0, 2, 4], [None, None, None])]
    replies = I.answer_queries(None, None, queries, 16, 4, mode="rcot", max_rounds=5)
    assert [r.rounds for r in replies] == [[0, 2]] and replies[0].n_rounds == 2
    assert replies[0].answer.keyframe_timestamp == 2  # the last parsed selection is kept
    assert queries[0].rejected == [0, 2] and replies[0].judgments == ["B", "B"]
    assert "<0s>, <2s>" in seen[5][0]["content"][-1]["text"]  # the re-selection names the rejected frames
    answers_lambda = iter([['<think>a</think><answer>{"description": "d"}</answer>'],
                           ['<think>a</think><answer>{"keyframe_timestamp": 0}</answer>'],
                           ['<answer>{"option": "B"}</answer>'],
                           ['<think>a</think><answer>{"keyframe_timestamp": 2}</answer>'],
                           ['<think>a</think><answer>{"bbox_2d_list": [], "point_2d_list": []}</answer>']])
    monkeypatch.setattr(I, "generate", lambda *a, **k: next(answers_lambda))
    replies = I.answer_queries(None, None, [I.Query("q", "x", [0, 2], [None, None])], 16, 4, mode="rcot",
                               max_rounds=2)
    assert replies[0].n_rounds == 2  # λ selections, the last kept without another judgment


# --- models: SAM2 prompting and the whole stage ------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    from stages.tiny_models.tiny_qwen import build_tiny_qwen
    from stages.tiny_models.tiny_sam2 import build_tiny_sam2

    torch.set_num_threads(1)  # two threads wait on each other beside the other worker (tests/conftest.py)
    base = tmp_path_factory.mktemp("models")
    build_tiny_qwen(TinyModelsParams(vocab_size=512, hidden_size=64, num_layers=1, max_image_side=56), base / "qwen")
    checkpoint, config = build_tiny_sam2(base / "sam2", 128, 0)
    return base / "qwen", checkpoint, config


def test_sam2_prompt_from_a_parsed_answer_fills_every_frame(root: Path, tiny_models, tmp_path: Path) -> None:
    from stages.sam2_wrapper import load_video_predictor

    _, checkpoint, config = tiny_models
    predictor = load_video_predictor(str(checkpoint), str(config), device="cpu")
    spec = VALID[1]
    names = spec.frame_names()
    frames = [np.asarray(Image.open(root / "JPEGImages" / spec.key / f"{n}.jpg").convert("RGB")) for n in names]
    text = '<think>a</think><answer>{"keyframe_timestamp": 2, "bbox_2d_list": [[14, 14, 56, 56]]}</answer>'
    status, key, boxes = select_prompt(reply(text), [0, 2, 4], 112, spec.width, spec.height)
    assert (status, key) == ("ok", 2)
    masks = predict_masks(predictor, frames, [(key, boxes), (0, [])])
    assert [m.shape for m in masks] == [(5, 24, 32)] * 2
    assert not masks[1].any()  # no boxes: an empty prediction
    write_prediction(tmp_path / "pred" / spec.key / "0", names, masks[0])
    _, table = score_predictions(tmp_path / "pred", root, expressions=[f"{spec.key}#0"])
    assert table["status"].tolist() == ["ok"]


def eval_table(base: Path, root: Path, specs: list[VideoSpec] | None = None) -> Path:
    """The real sample + keyframes stages on the tiny root (written from `specs`, default VALID and a train
    video) → data/keyframes/eval.parquet."""
    from stages.keyframes import select_keyframes
    from stages.sample import sample_pools
    from tests.stages.test_sample import write_index

    specs = specs or VALID + [simple_video("SRC/train/t")]
    write_index(base / "index", specs)
    sample_pools(SampleParams(sft_first_k=1, grpo_size=1), 0, base / "index", base / "sample")
    select_keyframes(KeyframesParams(n_frames=3, train_size=56), 0, root, base / "index", base / "sample",
                     base / "kf", RunnerParams(kind="serial"))
    return base / "kf" / "eval.parquet"


@pytest.mark.parametrize("mode", ["veason", "rcot"])
def test_evaluate_end_to_end_with_tiny_models(root: Path, tiny_models, tmp_path: Path, mode: str) -> None:
    qwen, checkpoint, config = tiny_models
    table = eval_table(tmp_path, root)
    params = EvaluateParams(model_path=str(qwen), n_frames=3, batch_size=4, max_new_tokens=8, mode=mode,
                            max_rounds=2, report_examples=1)
    report = evaluate(params, ModelParams(), Sam2Params(checkpoint=str(checkpoint), config=str(config)), 56, root,
                      table, tmp_path / "out", tmp_path / "reports" / "eval.md")
    answers = read_table(tmp_path / "out" / "answers.parquet", InferenceSchema)
    scores = read_table(tmp_path / "out" / "scores.parquet", ExpressionScoresSchema)
    n = len(pd.read_parquet(table))
    assert len(answers) == len(scores) == n == report.metrics["n_expressions"]
    # every frame of every evaluated expression has a 0/255 prediction PNG
    for row in answers.itertuples():
        pngs = sorted((tmp_path / "out" / "predictions" / row.video / row.exp_id).glob("*.png"))
        assert len(pngs) == row.n_video_frames
        assert set(np.unique(np.asarray(Image.open(pngs[0])))) <= {0, 255}
    assert (scores["status"] == "ok").all()
    # a random model does not write the answer format: empty predictions, counted as parse failures
    failures = int((answers["status"] == "parse_failure").sum())
    assert report.metrics["n_answer_parse_failure"] == failures
    assert set(answers["frame_indices"].map(len)) == {3}
    for key in ("JF_overall", "R_visa_overall", "R_binary_overall", "keyframe_area_ratio", "seconds_per_video"):
        assert key in report.metrics
    if mode == "rcot":
        assert 1 <= report.metrics["rcot_mean_rounds"] <= 2
    text = (tmp_path / "reports" / "eval.md").read_text()
    assert "referring J&F" in text and "_boxes.png" in text
    assert (tmp_path / "out" / "lineage.json").is_file()
    pictures = list((tmp_path / "reports" / "eval").glob("*.png"))
    assert pictures and all(Image.open(p).size[0] > 0 for p in pictures)


def test_evaluate_scores_the_ground_truth_answers_as_its_ceiling_row(root: Path, tmp_path: Path) -> None:
    """evaluate.reference: the ceiling row is what a policy answering the ground truth scores. The ground truth here
    is worked out from the rectangles of the test videos (the shown frame where the targets cover the most area,
    the earliest on a tie; their boxes there at the shown size), not by the project's code."""
    from stages.evaluate.infer import Reply

    specs = {spec.key: spec for spec in VALID}
    size = 56
    table = eval_table(tmp_path, root)
    expressions = {row.sample_id: (specs[row.video], int(row.exp_id)) for row in pd.read_parquet(table).itertuples()}

    def area(spec: VideoSpec, annos: list[int], t: int) -> int:
        boxes = [spec.objects[a][t] for a in annos if spec.objects[a][t] is not None]
        return sum((x2 - x1) * (y2 - y1) for x1, y1, x2, y2 in boxes)  # the two rectangles never overlap

    def truth(queries):
        out = []
        for q in queries:
            spec, exp_id = expressions[q.key]
            annos = spec.expressions[exp_id]["anno_id"]
            key = max(q.timestamps, key=lambda t: (area(spec, annos, t), -t))
            boxes = [[round(x1 * size / spec.width), round(y1 * size / spec.height), round(x2 * size / spec.width),
                      round(y2 * size / spec.height)]
                     for x1, y1, x2, y2 in (spec.objects[a][key] for a in annos if spec.objects[a][key] is not None)]
            text = f'<think>t</think><answer>{{"keyframe_timestamp": {key}, "bbox_2d_list": {boxes}}}</answer>'
            out.append(Reply(text, parse_answer(text), [key]))
        return out

    def silent(queries):
        return [Reply("no answer", None) for _ in queries]

    params = EvaluateParams(n_frames=3, segmenter="box")
    runs = {name: evaluate(params, ModelParams(), Sam2Params(), size, root, table, tmp_path / name,
                           tmp_path / name / "eval.md", policy=policy)
            for name, policy in (("truth", truth), ("silent", silent))}
    ceiling = {k: v for k, v in runs["truth"].metrics.items() if k.startswith("ceiling_")}
    assert ceiling["ceiling_JF_overall"] < 100  # the rectangles move: the keyframe box misses on other frames
    for name in ("truth", "silent"):  # the same ceiling, whatever the model answered
        assert {k: v for k, v in runs[name].metrics.items() if k.startswith("ceiling_")} == ceiling
    for key in ("J_overall", "F_overall", "JF_overall", "JF_referring", "JF_reasoning", "R_visa_overall"):
        assert runs["truth"].metrics[key] == pytest.approx(ceiling[f"ceiling_{key}"]), key
    assert runs["silent"].metrics["JF_referring"] < ceiling["ceiling_JF_referring"]
    text = (tmp_path / "silent" / "eval.md").read_text()
    assert "| ground-truth answers (the ceiling) |" in text and "ceiling_" not in text
    off = evaluate(EvaluateParams(n_frames=3, segmenter="box", reference=False), ModelParams(), Sam2Params(), size,
                   root, table, tmp_path / "silent", tmp_path / "off.md", policy=silent)
    assert not any(k.startswith("ceiling_") for k in off.metrics) and not (tmp_path / "silent/reference").exists()


# a video whose targets are absent on some frames and fill the whole frame on one: an all-empty prediction scores
# J = 1 exactly where the target is absent, and F = 1 also where it fills the frame (no boundary on either side)
EMPTY_SPEC = VideoSpec(
    key="SRC/valid/e", split="valid", height=24, width=32, n_frames=5,
    objects={1: [(2, 2, 10, 8), None, None, (0, 0, 32, 24), (4, 4, 12, 12)],
             2: [None, None, (20, 10, 28, 18), (20, 10, 28, 18), (20, 10, 28, 18)]},
    expressions=[{"exp": "the first", "obj_id": [0], "anno_id": [1], "type_id": 0},
                 {"exp": "the second", "obj_id": [1], "anno_id": [2], "type_id": 0},
                 {"exp": "both", "obj_id": [0, 1], "anno_id": [1, 2], "type_id": 1},
                 {"exp": "nothing", "obj_id": [], "anno_id": [], "type_id": 2}])


def empty_answer_oracle(spec: VideoSpec) -> dict[str, float]:
    """ReVOS aggregates (percent) of empty masks on every frame, from the definitions alone: per frame J = 1 when the
    target is absent (DAVIS: both empty → 1, else 0); F = 1 when the target has no boundary (absent, or filling the
    frame: the image border is no boundary), else 0 (no predicted boundary: precision 1, recall 0); R = 1 (nothing
    predicted, no false positive). Per expression the mean over frames, rounded to 2 decimals in percent; per subset
    the mean over its expressions; overall the mean of referring and reasoning."""
    per_type: dict[int, list[tuple[float, float]]] = {0: [], 1: []}
    for exp in spec.expressions:
        if exp["type_id"] == 2:
            continue
        unions = [np.any([rect_mask(spec.objects[a][t], spec.height, spec.width) for a in exp["anno_id"]], axis=0)
                  for t in range(spec.n_frames)]
        j = sum(not u.any() for u in unions) / len(unions)
        f = sum(not u.any() or u.all() for u in unions) / len(unions)
        per_type[exp["type_id"]].append((round(100 * j, 2), round(100 * f, 2)))
    out: dict[str, float] = {}
    for type_id, name in ((0, "referring"), (1, "reasoning")):
        out[f"J_{name}"] = float(np.mean([j for j, _ in per_type[type_id]]))
        out[f"F_{name}"] = float(np.mean([f for _, f in per_type[type_id]]))
        out[f"JF_{name}"] = (out[f"J_{name}"] + out[f"F_{name}"]) / 2
        out[f"R_visa_{name}"] = out[f"R_binary_{name}"] = 100.0
    for metric in ("J", "F", "JF", "R_visa", "R_binary"):
        out[f"{metric}_overall"] = (out[f"{metric}_referring"] + out[f"{metric}_reasoning"]) / 2
    return out


def test_evaluate_scores_the_empty_answer_beside_the_ceiling(tmp_path: Path) -> None:
    """evaluate.reference: the `empty_*` metrics are what empty masks on every frame score (an oracle from the
    definitions), whatever the model answered; the report shows the model, the ceiling and the empty answer."""
    specs = [EMPTY_SPEC, simple_video("SRC/train/t")]
    root = write_root(tmp_path / "root", specs)
    table = eval_table(tmp_path, root, specs)
    expected = empty_answer_oracle(EMPTY_SPEC)
    assert expected["J_referring"] == 40.0 and expected["F_referring"] == 50.0  # (2/5 and 2/5; 2/5 and 3/5)
    assert expected["J_reasoning"] == 20.0 and expected["F_reasoning"] == 40.0

    def boxes_everywhere(queries):  # a model that always answers the whole frame on the first frame shown
        text = '<answer>{"keyframe_timestamp": 0, "bbox_2d_list": [[0, 0, 56, 56]]}</answer>'
        return [I.Reply(text, parse_answer(text), [0]) for _ in queries]

    report = evaluate(EvaluateParams(n_frames=3, segmenter="box"), ModelParams(), Sam2Params(), 56, root, table,
                      tmp_path / "out", tmp_path / "eval.md", policy=boxes_everywhere)
    empty = {k.removeprefix("empty_"): v for k, v in report.metrics.items() if k.startswith("empty_")}
    assert set(empty) == set(expected)
    for key, value in expected.items():
        assert empty[key] == pytest.approx(value), key
    assert report.metrics["JF_overall"] != pytest.approx(empty["JF_overall"])  # the model's own row differs
    pngs = list((tmp_path / "out" / "reference" / "empty").rglob("*.png"))
    assert len(pngs) == 4 * EMPTY_SPEC.n_frames and not any(np.asarray(Image.open(p)).any() for p in pngs)
    text = (tmp_path / "eval.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "J&F" not in line and "---" not in line]
    assert [row.split(" | ")[0] for row in rows[:3]] == [f"| {EvaluateParams().model_path}",
                                                         "| ground-truth answers (the ceiling)",
                                                         "| empty answer (no boxes: empty masks)"]
    assert "empty_" not in text and "what answering nothing scores" in text
    off = evaluate(EvaluateParams(n_frames=3, segmenter="box", reference=False), ModelParams(), Sam2Params(), 56,
                   root, table, tmp_path / "out", tmp_path / "off.md", policy=boxes_everywhere)
    assert not any(k.startswith("empty_") for k in off.metrics)
    assert "empty answer" not in (tmp_path / "off.md").read_text()


def test_the_empty_answer_makes_empty_masks_without_running_sam2(tmp_path: Path) -> None:
    """`empty_policy`'s answers parse with no boxes; through the SAM2 segmenter's path (`predict_masks`, streaming
    and not) they make empty masks on every frame without SAM2 being touched, not even to encode the frames."""
    from stages.evaluate import empty_policy, evaluate_video

    class NoSam2:
        def __getattr__(self, name: str):
            raise AssertionError(f"SAM2 was used ({name})")

    def segment(frames, prompts, sink=None, spill_dir=None):
        return predict_masks(NoSam2(), frames, prompts, sink=sink, spill_dir=spill_dir)

    segment.streams = True
    root = write_root(tmp_path / "root", [EMPTY_SPEC])
    gt = load_ground_truth(root, "valid")
    rows = [{"sample_id": f"{EMPTY_SPEC.key}#{i}", "expression_id": f"{EMPTY_SPEC.key}#{i}", "exp_id": str(i),
             "text": e["exp"]} for i, e in enumerate(EMPTY_SPEC.expressions)]
    answers = evaluate_video(EvaluateParams(n_frames=3), 56, empty_policy(), segment, root, gt, EMPTY_SPEC.key, rows,
                             tmp_path / "pred")
    assert [a["status"] for a in answers] == ["no_boxes"] * 4 and {a["keyframe_idx"] for a in answers} == {0.0}
    pngs = sorted((tmp_path / "pred").rglob("*.png"))
    assert len(pngs) == 4 * EMPTY_SPEC.n_frames and not any(np.asarray(Image.open(p)).any() for p in pngs)
    frames = [np.zeros((24, 32, 3), np.uint8)] * 5
    masks = predict_masks(NoSam2(), frames, [(0, []), (3, [])])
    assert [m.shape for m in masks] == [(5, 24, 32)] * 2 and not any(m.any() for m in masks)


def test_a_benchmark_stage_scores_the_empty_answer_row(tiny_models, tmp_path: Path) -> None:
    """`bench@revos` with benchmarks.reference: a `ground_truth` and an `empty_answer` row beside the models; the
    empty answer's row is what empty masks score (the oracle above), every answer parsed with no boxes."""
    from stages.bench import run_benchmark
    from stages.params.benchmarks import BenchmarksParams

    root = write_root(tmp_path / "root", [EMPTY_SPEC])
    params = BenchmarksParams(names=("revos",), models={"tiny": str(tiny_models[0])}, videos=0, expressions=0)
    report = run_benchmark("revos", params, EvaluateParams(n_frames=3, segmenter="box", max_new_tokens=8),
                           ModelParams(), Sam2Params(), 56, root, tmp_path / "bench")
    assert {k.partition(".")[0] for k in report.metrics} == {"tiny", "ground_truth", "empty_answer"}
    expected = empty_answer_oracle(EMPTY_SPEC)
    for key, name in (("JF", "JF_overall"), ("J", "J_overall"), ("F", "F_overall"), ("R_visa_overall",) * 2):
        assert report.metrics[f"empty_answer.{key}"] == pytest.approx(expected[name]), key
    assert report.metrics["empty_answer.n_answer_no_boxes"] == 4
    assert report.metrics["empty_answer.parse_failure_rate"] == 0


def test_the_box_segmenter_warns_when_a_sam2_checkpoint_was_named(caplog: pytest.LogCaptureFixture) -> None:
    from stages.evaluate import box_masks, segmenter

    with caplog.at_level("WARNING", logger="stages.evaluate"):
        assert segmenter(EvaluateParams(segmenter="box"), Sam2Params()) is box_masks  # the tiny default: quiet
        assert not caplog.records
        assert segmenter(EvaluateParams(segmenter="box"), Sam2Params(checkpoint="/ckpt/sam2.pt")) is box_masks
    assert [r.getMessage() for r in caplog.records] == [
        "evaluate.segmenter is box: the masks are the answered boxes on every frame, and sam2.checkpoint "
        "/ckpt/sam2.pt does not make them (set evaluate.segmenter=sam2 for SAM2's tracking)"]


# --- end-to-end oracle of coordinates (train size ↔ original size ↔ SAM2 frames) ------------------------------

ORACLE_H, ORACLE_W, ORACLE_SIZE = 40, 80, 160  # shown at 160 × 160: x × 2, y × 4 (exact both ways)
ORACLE_RECTS = {31: (6, 4, 30, 20), 32: (44, 22, 70, 37), 41: (10, 10, 26, 30), 42: (50, 5, 75, 15)}


def oracle_specs() -> list[VideoSpec]:
    """Static axis-aligned rectangles, present on every frame: the keyframe box is the mask everywhere."""
    def video(key: str, annos: tuple[int, int], n: int) -> VideoSpec:
        a, b = annos
        return VideoSpec(key=key, split="valid", height=ORACLE_H, width=ORACLE_W, n_frames=n,
                         objects={x: [ORACLE_RECTS[x]] * n for x in annos},
                         expressions=[{"exp": "the left box", "obj_id": [0], "anno_id": [a], "type_id": 0},
                                      {"exp": "both boxes", "obj_id": [0, 1], "anno_id": [a, b], "type_id": 1},
                                      {"exp": "the right box", "obj_id": [1], "anno_id": [b], "type_id": 1}])
    return [video("SRC/valid/o1", (31, 32), 7), video("SRC/valid/o2", (41, 42), 5)]


def oracle_policy(specs: list[VideoSpec]):
    """Answers every query with a ground-truth keyframe (the middle shown frame) and the targets' boxes at the
    shown size, computed here from the rectangles (no project code)."""
    from stages.evaluate.infer import Reply

    targets = {f"{s.key}#{i}": e["anno_id"] for s in specs for i, e in enumerate(s.expressions)}

    def policy(queries):
        out = []
        for q in queries:
            key = q.timestamps[len(q.timestamps) // 2]
            boxes = [[x1 * ORACLE_SIZE // ORACLE_W, y1 * ORACLE_SIZE // ORACLE_H, x2 * ORACLE_SIZE // ORACLE_W,
                      y2 * ORACLE_SIZE // ORACLE_H] for x1, y1, x2, y2 in (ORACLE_RECTS[a] for a in targets[q.key])]
            text = f'<think>oracle</think><answer>{{"keyframe_timestamp": {key}, "bbox_2d_list": {boxes}}}</answer>'
            out.append(Reply(text, parse_answer(text), [key]))
        return out
    return policy


def test_oracle_policy_with_box_segmenter_scores_full_marks(tmp_path: Path) -> None:
    from stages.bench import evaluate_benchmark
    from stages.evaluate import box_masks

    specs = oracle_specs()
    root = write_root(tmp_path / "root", specs)
    params = EvaluateParams(n_frames=3, segmenter="box")
    summary, answers = evaluate_benchmark(params, "revos", root, "valid", tmp_path / "out", ORACLE_SIZE,
                                          oracle_policy(specs), box_masks)
    assert (answers["status"] == "ok").all() and len(answers) == 6
    assert summary["J"] >= 95 and summary["J"] == pytest.approx(100.0)
    assert summary["F"] == pytest.approx(100.0) and summary["keyframe_box_iou"] == pytest.approx(1.0)


def test_reference_policy_answers_the_ground_truth_and_the_box_segmenter_scores_full_marks(tmp_path: Path) -> None:
    from stages.bench import evaluate_benchmark
    from stages.evaluate import box_masks

    root = write_root(tmp_path / "root", oracle_specs())
    params = EvaluateParams(n_frames=3, segmenter="box")
    summary, answers = evaluate_benchmark(params, "revos", root, "valid", tmp_path / "out", ORACLE_SIZE, None,
                                          box_masks)
    assert (answers["status"] == "ok").all() and len(answers) == 6
    assert summary["J"] == pytest.approx(100.0) and summary["F"] == pytest.approx(100.0)
    # the boxes written are the rectangles at the shown size (x × 2, y × 4), on the first shown frame (all equal)
    by_text = {(row.video, row.text): [list(b) for b in row.boxes] for row in answers.itertuples()}
    assert by_text[("SRC/valid/o1", "both boxes")] == [[12.0, 16.0, 60.0, 80.0], [88.0, 88.0, 140.0, 148.0]]
    assert set(answers["keyframe_timestamp"]) == {0.0}


def test_reference_row_falls_when_the_parsed_boxes_swap_x_and_y(tmp_path: Path, monkeypatch) -> None:
    """The ground-truth answers go through the parser a model's answer goes through: a parser that swaps x and y
    drops the ceiling row, so a broken text → box path shows in the benchmark table."""
    import schemas.answer as A
    from stages.bench import evaluate_benchmark
    from stages.evaluate import box_masks

    parse = A.parse_answer_fields

    def swapped(payload, *args, **kwargs):
        fields = parse(payload, *args, **kwargs)
        if fields and "boxes" in fields:
            fields["boxes"] = tuple((y1, x1, y2, x2) for x1, y1, x2, y2 in fields["boxes"])
        return fields

    monkeypatch.setattr(A, "parse_answer_fields", swapped)
    root = write_root(tmp_path / "root", oracle_specs())
    summary, _ = evaluate_benchmark(EvaluateParams(n_frames=3, segmenter="box"), "revos", root, "valid",
                                    tmp_path / "out", ORACLE_SIZE, None, box_masks)
    assert summary["J"] < 50  # 100 with the parser as it is (the test above)


def test_oracle_prompts_reach_sam2_at_the_original_resolution_and_frame(tiny_models, tmp_path: Path) -> None:
    from stages.bench import evaluate_benchmark
    from stages.sam2_wrapper import load_video_predictor

    _, checkpoint, config = tiny_models
    predictor = load_video_predictor(str(checkpoint), str(config), device="cpu")
    received = []  # (frames in the state, prompted frame, box in video pixels) of every box SAM2 receives
    scale = np.array([ORACLE_W, ORACLE_H], dtype=np.float64) / predictor.image_size
    original_add, original_step = predictor.add_new_points_or_box, predictor._run_single_frame_inference

    def add(state, frame_idx, obj_id, box=None, **kw):  # SAM2's public path: box in video pixels
        received.append((state["num_frames"], frame_idx, [float(v) for v in box]))
        return original_add(state, frame_idx=frame_idx, obj_id=obj_id, box=box, **kw)

    def step(**kw):  # the batched path: corner points (labels 2, 3) at SAM2's input resolution
        if kw.get("point_inputs") is not None:
            assert kw["point_inputs"]["point_labels"].tolist() == [[2, 3]] * kw["batch_size"]
            for corners in kw["point_inputs"]["point_coords"].cpu().numpy().astype(np.float64):
                received.append((kw["inference_state"]["num_frames"], kw["frame_idx"],
                                 [round(float(v), 4) for v in (corners * scale).ravel()]))
        return original_step(**kw)

    predictor.add_new_points_or_box, predictor._run_single_frame_inference = add, step
    specs = oracle_specs()[:1]
    root = write_root(tmp_path / "root", specs)
    evaluate_benchmark(EvaluateParams(n_frames=3), "revos", root, "valid", tmp_path / "out", ORACLE_SIZE,
                       oracle_policy(specs), lambda frames, prompts: predict_masks(predictor, frames, prompts))
    # shown frames of a 7-frame video: 0, 3, 6 → the oracle's keyframe is video frame 3; boxes in video pixels;
    # "both boxes" asks for the same two boxes at the same frame as the other two expressions: tracked once each
    expected = sorted([(7, 3, [float(v) for v in ORACLE_RECTS[a]]) for a in (31, 32)])
    assert sorted(received) == expected


def test_a_videos_expressions_are_encoded_once_and_match_per_expression_tracking(
        tiny_models, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three expressions of one video, each answered on a different keyframe: `evaluate_video` runs SAM2's image
    encoder once per frame for all of them, and its masks equal SAM2 run afresh for each expression alone."""
    from stages.evaluate import evaluate_video
    from stages.evaluate.infer import Reply
    from stages.sam2_wrapper import BoxGroup, load_video_predictor, propagate_groups

    _, checkpoint, config = tiny_models
    predictor = load_video_predictor(str(checkpoint), str(config), device="cpu")
    spec = oracle_specs()[0]  # 7 frames, 3 expressions; shown frames 0, 3, 6
    root = write_root(tmp_path / "root", [spec])
    gt = load_ground_truth(root, "valid")
    prompts: dict[str, tuple[int, list[list[float]]]] = {}  # exp_id → (keyframe, boxes in video pixels)

    def policy(queries):  # expression i answers on shown frame i: three keyframe groups
        out = []
        for i, q in enumerate(queries):
            exp_id = q.key.rsplit("#", 1)[1]
            rects = [ORACLE_RECTS[a] for a in spec.expressions[int(exp_id)]["anno_id"]]
            key = q.timestamps[i]
            prompts[exp_id] = (key, [[float(v) for v in r] for r in rects])
            boxes = [[x1 * ORACLE_SIZE // ORACLE_W, y1 * ORACLE_SIZE // ORACLE_H, x2 * ORACLE_SIZE // ORACLE_W,
                      y2 * ORACLE_SIZE // ORACLE_H] for x1, y1, x2, y2 in rects]
            text = f'<answer>{{"keyframe_timestamp": {key}, "bbox_2d_list": {boxes}}}</answer>'
            out.append(Reply(text, parse_answer(text), [key]))
        return out

    encoded = count_encoded_frames(predictor, monkeypatch)
    rows = [{"sample_id": f"{spec.key}#{i}", "expression_id": f"{spec.key}#{i}", "exp_id": str(i), "text": e["exp"]}
            for i, e in enumerate(spec.expressions)]
    answers = evaluate_video(EvaluateParams(n_frames=3), ORACLE_SIZE, policy,
                             lambda frames, p: predict_masks(predictor, frames, p), root, gt, spec.key, rows,
                             tmp_path / "pred")
    assert [a["status"] for a in answers] == ["ok"] * 3
    assert sorted(k for k, _ in prompts.values()) == [0, 3, 6]
    assert sum(encoded) == spec.n_frames  # each of the 7 frames once, for all three expressions
    names = spec.frame_names()
    frames = [np.asarray(Image.open(root / "JPEGImages" / spec.key / f"{n}.jpg").convert("RGB")) for n in names]
    encoded.clear()
    for exp_id, (key, boxes) in prompts.items():  # the per-expression way: a fresh SAM2 state each
        alone = propagate_groups(predictor, frames, [BoxGroup(key, boxes)], share_encoding=False)[0].any(axis=0)
        assert alone.any()
        written = np.stack([np.asarray(Image.open(tmp_path / "pred" / spec.key / exp_id / f"{n}.png")) for n in names])
        assert set(np.unique(written)) <= {0, 255}
        assert np.array_equal(written == 255, alone), exp_id
    assert sum(encoded) == sum(spec.n_frames + (k != 0) for k, _ in prompts.values())  # re-encoded per expression
