"""reports/eval.md: legend, visible boxes at the right pixels, large tiles, examples chosen among expressions
with a target (the best only where the answered boxes made a mask on the keyframe), the answer statuses told
apart, the model comparison, and pictures embedded for Prefect."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from stages.evaluate import report as R
from stages.evaluate.scorer import load_ground_truth
from tests.revos_factory import simple_video, write_root

VIDEOS = [simple_video("SRC/valid/a", split="valid", n_frames=4),
          simple_video("SRC/valid/b", split="valid", n_frames=5)]
# (video, exp_id) → J&F, the boxes answered at frame_size 56 on keyframe 0, and the answer's status
PRED_BOX = [21.0, 28 / 3, 35.0, 28.0]  # = (12, 4, 20, 12) in the 32×24 frame
INVERTED_BOX = [35.0, 28 / 3, 21.0, 28.0]  # x2 < x1: no area, an empty mask (what the tiny model writes)
CASES = {("SRC/valid/a", "0"): (0.9, [PRED_BOX], "ok"),
         # the highest J&F with a visible target, and boxes: but they are degenerate, so its mask is empty
         ("SRC/valid/a", "1"): (1.0, [INVERTED_BOX], "degenerate_boxes"),
         ("SRC/valid/a", "2"): (1.0, [], "parse_failure"),
         ("SRC/valid/b", "0"): (0.1, [], "no_boxes"), ("SRC/valid/b", "1"): (0.5, [PRED_BOX], "ok"),
         ("SRC/valid/b", "2"): (0.0, [], "parse_failure")}
MASK_ON_KEYFRAME = {("SRC/valid/a", "0")}  # predictions written non-empty on the keyframe (frame 0)


def write_predictions(pred: Path, gt, masked: set[tuple[str, str]]) -> None:
    """VISA-layout PNGs: the answered box (12, 4, 20, 12) on every frame for `masked`, empty for the others."""
    for video, exp_id in CASES:
        names = gt.videos[video]["frames"]
        (pred / video / exp_id).mkdir(parents=True, exist_ok=True)
        for name in names:
            mask = np.zeros((24, 32), dtype=np.uint8)
            if (video, exp_id) in masked:
                mask[4:12, 12:20] = 255
            Image.fromarray(mask, mode="L").save(pred / video / exp_id / f"{name}.png")


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    base = tmp_path_factory.mktemp("report")
    root = write_root(base / "root", VIDEOS)
    gt = load_ground_truth(root, "valid")
    scores, answers = [], []
    for (video, exp_id), (jf, boxes, status) in CASES.items():
        entry = gt.videos[video]["expressions"][exp_id]
        common = {"video": video, "exp_id": exp_id, "expression_id": f"{video}#{exp_id}",
                  "type_id": int(entry["type_id"]), "text": entry["exp"]}
        scores.append({**common, "n_frames": len(gt.videos[video]["frames"]), "status": "ok", "J": jf, "F": jf,
                       "R_visa": 0.0, "R_binary": 0.0, "JF": jf})
        answers.append({**common, "frame_indices": [0, 1, 2], "keyframe_idx": 0.0, "frame_size": 56,
                        "boxes": boxes, "status": status, "n_rounds": 1})
    comparison = pd.DataFrame([{"method": m, "overall J&F": v} for m, v in (("base", 1.5), ("sft", 20.0),
                                                                          ("grpo", 31.2))])
    metrics = {"J_overall": 50.0, "F_overall": 50.0, "JF_overall": 50.0, "n_expressions": 6,
               "seconds_per_video": 1.234}
    write_predictions(base / "pred", gt, MASK_ON_KEYFRAME)
    embedded = R.write_report(base / "reports" / "eval.md", metrics, pd.DataFrame(scores), pd.DataFrame(answers),
                              root, base / "pred", gt, 1, "grpo", comparison=comparison)
    return base / "reports", embedded


def test_examples_have_a_target_and_the_best_a_mask_on_its_keyframe(written: tuple[Path, str]) -> None:
    text = (written[0] / "eval.md").read_text()
    headings = re.findall(r"^### (Best|Worst): `([^`]+)`", text, flags=re.M)
    # a#1 scores 1.0 with degenerate boxes (an empty prediction on target-absent frames), ranked first by J&F and
    # holding boxes, yet not the best; a#2 and b#2 have no target
    assert headings == [("Best", "SRC/valid/a#0"), ("Worst", "SRC/valid/b#0")]
    assert R.LEGEND_MD in text
    assert "| n_expressions | 6 |" in text and "seconds_per_video" not in text  # timings: metrics file only
    assert "| base | 1.5 |" in text and "| grpo | 31.2 |" in text
    assert text.index("## Models compared") < text.index("## This model")


def test_boxes_are_drawn_thick_at_the_right_pixels(written: tuple[Path, str]) -> None:
    picture = np.asarray(Image.open(written[0] / "eval" / "00_boxes.png").convert("RGB"))
    tile = R.THUMB  # 32×24 frames → 320×240 tiles (scale 10)
    legend_height = R.legend_strip(3 * tile + 2 * R.GAP).height
    assert picture.shape == (240 + R.GAP + legend_height, 3 * tile + 2 * R.GAP, 3)
    gt, pred = np.array(R.GT_COLOUR), np.array(R.PRED_COLOUR)
    # ground truth of a#0 on frame 1 (no keyframe there): box (3, 2, 11, 8) → tile x 30..109, y 20..79
    x0 = tile + R.GAP
    assert all((picture[50, x0 + 30 + d] == gt).all() for d in range(3))  # left edge, 3 px
    assert not (picture[50, x0 + 30 + 3] == gt).all()
    assert all((picture[20 + d, x0 + 60] == gt).all() for d in range(3))  # top edge
    # prediction on keyframe 0: (12, 4, 20, 12) → x 120..199, y 40..119
    assert all((picture[80, 120 + d] == pred).all() for d in range(3))
    assert (picture[40, 160] == pred).all() and (picture[119, 160] == pred).all()
    assert not (picture[80, 124] == pred).all()
    # the legend band shows both colours
    band = picture[-legend_height:]
    assert (band == gt).all(axis=2).sum() > 20 and (band == pred).all(axis=2).sum() > 20


def test_masks_strip_is_large(written: tuple[Path, str]) -> None:
    with Image.open(written[0] / "eval" / "00_masks.png") as image:
        assert image.width == 4 * R.THUMB + 3 * R.GAP  # a has 4 frames: all shown


def test_returned_markdown_embeds_the_pictures(written: tuple[Path, str]) -> None:
    folder, embedded = written
    uris = re.findall(r"!\[[^\]]*\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", embedded)
    assert len(uris) == 4
    assert base64.b64decode(uris[0]) == (folder / "eval" / "00_boxes.png").read_bytes()
    assert "](eval/00_boxes.png)" in (folder / "eval.md").read_text()


def test_report_names_the_segmenter_and_labels_empty_matches(written: tuple[Path, str], tmp_path: Path) -> None:
    text = (written[0] / "eval.md").read_text()
    assert f"Masks: {R.SEGMENTERS['sam2']}." in text and R.EXAMPLES_MD in text
    best, worst = text.split("### Worst")
    # b#0 scores 0.1 without boxes: labelled as scoring from target-absent frames; the best (a mask) is not
    assert R.EMPTY_MATCH_MD["no_boxes"] in worst and R.EMPTY_MATCH_TAIL not in best
    gt = load_ground_truth(written[0].parent / "root", "valid")
    R.write_report(tmp_path / "eval.md", {"JF_overall": 1.0}, pd.DataFrame(columns=["expression_id", "type_id", "JF"]),
                   pd.DataFrame(columns=["expression_id", "boxes"]), written[0].parent / "root", tmp_path, gt, 1, "m",
                   segmenter="box")
    assert f"Masks: {R.SEGMENTERS['box']}." in (tmp_path / "eval.md").read_text()


def test_this_model_table_shows_the_model_the_ceiling_and_the_empty_answer(written: tuple[Path, str],
                                                                        tmp_path: Path) -> None:
    """evaluate.reference: three rows (the model, the ground-truth answers, the empty answer), each explained; the
    reference metrics are rows of that table, not counts of the answers table."""
    gt = load_ground_truth(written[0].parent / "root", "valid")
    metrics = {"JF_overall": 20.0, "J_overall": 18.0, "ceiling_JF_overall": 61.25, "ceiling_J_overall": 60.0,
               "empty_JF_overall": 6.72, "empty_J_overall": 5.5, "empty_R_visa_overall": 100.0, "n_expressions": 6}
    R.write_report(tmp_path / "eval.md", metrics, pd.DataFrame(columns=["expression_id", "type_id", "JF"]),
                   pd.DataFrame(columns=["expression_id", "boxes"]), written[0].parent / "root", tmp_path, gt, 1, "m")
    text = (tmp_path / "eval.md").read_text()
    table = text.split("## This model")[1].split("\n\n")[1].splitlines()
    assert [row.split(" | ")[0] for row in table[2:]] == ["| m", f"| {R.CEILING_LABEL}", f"| {R.EMPTY_LABEL}"]
    assert "| 60 | nan | 61.2 |" in table[3] and "| 5.5 | nan | 6.7 | 100 |" in table[4]  # overall J, F, J&F, R
    assert R.CEILING_MD in text and R.EMPTY_MD in text and "empty_" not in text and "ceiling_" not in text
    no_scores = pd.DataFrame(columns=["expression_id", "type_id", "JF"])
    R.write_report(tmp_path / "alone.md", {"JF_overall": 20.0}, no_scores,
                   pd.DataFrame(columns=["expression_id", "boxes"]), written[0].parent / "root", tmp_path, gt, 1, "m")
    alone = (tmp_path / "alone.md").read_text()
    assert R.EMPTY_LABEL not in alone and R.EMPTY_MD not in alone


def test_answer_table_tells_no_boxes_from_degenerate_boxes(written: tuple[Path, str], tmp_path: Path) -> None:
    gt = load_ground_truth(written[0].parent / "root", "valid")
    metrics = {"JF_overall": 1.0, "n_answer_no_boxes": 20, "n_answer_degenerate_boxes": 42}
    R.write_report(tmp_path / "eval.md", metrics, pd.DataFrame(columns=["expression_id", "type_id", "JF"]),
                   pd.DataFrame(columns=["expression_id", "boxes"]), written[0].parent / "root", tmp_path, gt, 1, "m")
    text = (tmp_path / "eval.md").read_text()
    assert "| n_answer_no_boxes | 20 |" in text and "| n_answer_degenerate_boxes | 42 |" in text
    assert R.STATUSES_MD in text


def test_best_examples_need_a_mask_on_the_answered_keyframe(written: tuple[Path, str], tmp_path: Path) -> None:
    """Ranked by J&F: a#1 (1.0, degenerate boxes), a#0 (0.9), b#1 (0.5, boxes whose prediction is empty on its
    keyframe, as a SAM2 that loses the target makes), b#0 (0.1, no boxes). Only predictions decide."""
    folder = written[0].parent
    gt = load_ground_truth(folder / "root", "valid")
    scores = pd.DataFrame([{"video": v, "exp_id": e, "expression_id": f"{v}#{e}", "JF": jf,
                            "type_id": int(gt.videos[v]["expressions"][e]["type_id"])}
                           for (v, e), (jf, _, _) in CASES.items()])
    answers = pd.DataFrame([{"video": v, "exp_id": e, "expression_id": f"{v}#{e}", "keyframe_idx": 0.0,
                             "boxes": boxes, "status": status} for (v, e), (_, boxes, status) in CASES.items()])
    best, worst = R.pick_examples(scores, answers, gt, 2, folder / "pred")
    assert best == ["SRC/valid/a#0"] and worst == ["SRC/valid/b#0", "SRC/valid/b#1"]
    write_predictions(tmp_path / "pred", gt, {("SRC/valid/a", "0"), ("SRC/valid/b", "1")})
    assert R.pick_examples(scores, answers, gt, 2, tmp_path / "pred")[0] == ["SRC/valid/a#0", "SRC/valid/b#1"]
    write_predictions(tmp_path / "none", gt, set())  # no answer made a mask: no best, and the report says so
    assert R.pick_examples(scores, answers, gt, 2, tmp_path / "none")[0] == []
    R.write_report(tmp_path / "eval.md", {"JF_overall": 1.0}, scores.assign(n_frames=4, J=0.0, F=0.0), answers.assign(
        frame_indices=[[0, 1, 2]] * len(answers), frame_size=56, text="t", n_rounds=1), folder / "root",
        tmp_path / "none", gt, 1, "m")
    text = (tmp_path / "eval.md").read_text()
    assert R.NO_BEST_MD in text and "### Best" not in text and "### Worst: `SRC/valid/b#0`" in text
