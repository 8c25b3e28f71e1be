"""reports/eval.md: legend, visible boxes at the right pixels, large tiles, examples chosen among expressions
with a target (the best also with an answer), the model comparison, and pictures embedded for Prefect."""

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
# (video, exp_id) → J&F, and the boxes answered at frame_size 56 on keyframe 0 ([] = no answer)
PRED_BOX = [21.0, 28 / 3, 35.0, 28.0]  # = (12, 4, 20, 12) in the 32×24 frame
CASES = {("SRC/valid/a", "0"): (0.9, [PRED_BOX]), ("SRC/valid/a", "1"): (1.0, []), ("SRC/valid/a", "2"): (1.0, []),
         ("SRC/valid/b", "0"): (0.1, []), ("SRC/valid/b", "1"): (0.5, [PRED_BOX]), ("SRC/valid/b", "2"): (0.0, [])}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    base = tmp_path_factory.mktemp("report")
    root = write_root(base / "root", VIDEOS)
    gt = load_ground_truth(root, "valid")
    scores, answers = [], []
    for (video, exp_id), (jf, boxes) in CASES.items():
        entry = gt.videos[video]["expressions"][exp_id]
        common = {"video": video, "exp_id": exp_id, "expression_id": f"{video}#{exp_id}",
                  "type_id": int(entry["type_id"]), "text": entry["exp"]}
        scores.append({**common, "n_frames": len(gt.videos[video]["frames"]), "status": "ok", "J": jf, "F": jf,
                       "R_visa": 0.0, "R_binary": 0.0, "JF": jf})
        answers.append({**common, "frame_indices": [0, 1, 2], "keyframe_idx": 0.0, "frame_size": 56,
                        "boxes": boxes, "status": "ok" if boxes else "parse_failure", "n_rounds": 1})
    comparison = pd.DataFrame([{"method": m, "overall J&F": v} for m, v in (("base", 1.5), ("sft", 20.0),
                                                                          ("grpo", 31.2))])
    metrics = {"J_overall": 50.0, "F_overall": 50.0, "JF_overall": 50.0, "n_expressions": 6,
               "seconds_per_video": 1.234}
    embedded = R.write_report(base / "reports" / "eval.md", metrics, pd.DataFrame(scores), pd.DataFrame(answers),
                              root, base / "pred", gt, 1, "grpo", comparison=comparison)
    return base / "reports", embedded


def test_examples_have_a_target_and_the_best_an_answer(written: tuple[Path, str]) -> None:
    text = (written[0] / "eval.md").read_text()
    headings = re.findall(r"^### (Best|Worst): `([^`]+)`", text, flags=re.M)
    # a#1 scores 1.0 with no boxes (empty prediction on target-absent frames); a#2 and b#2 have no target
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
    # b#0 scores 0.1 without boxes: labelled as scoring from target-absent frames; the best (boxes answered) is not
    assert R.EMPTY_MATCH_MD in worst and R.EMPTY_MATCH_MD not in best
    gt = load_ground_truth(written[0].parent / "root", "valid")
    R.write_report(tmp_path / "eval.md", {"JF_overall": 1.0}, pd.DataFrame(columns=["expression_id", "type_id", "JF"]),
                   pd.DataFrame(columns=["expression_id", "boxes"]), written[0].parent / "root", tmp_path, gt, 1, "m",
                   segmenter="box")
    assert f"Masks: {R.SEGMENTERS['box']}." in (tmp_path / "eval.md").read_text()
