"""Benchmark protocol rules the mutation run (scripts/mutation.sh benchmarks, docs/testing.md) found unpinned:
`vrsflow evaluate --benchmark` (evaluate_folder) on a scored split, a server split and ReVOS, and ReVOS through
score_benchmark (its evaluator is VISA's, tested in tests/stages/test_evaluate.py; here: what this module adds)."""

from __future__ import annotations

import logging
import shutil
import zipfile
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from stages.bench import benchmarks as B
from stages.bench.benchmarks import (
    PredictionsError,
    evaluate_folder,
    make_submission,
    merge_annotator,
    score_benchmark,
)
from stages.evaluate.scorer import load_ground_truth
from stages.ingest.benchmarks import read_benchmark
from tests.revos_factory import edit_json
from tests.stages.test_benchmarks import layouts, revos_root, write_preds  # noqa: F401 (fixtures)


def test_a_server_split_is_zipped_next_to_the_predictions(layouts: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    bench = read_benchmark("refytvos", layouts["refytvos"])
    pred = write_preds(bench, tmp_path / "p", lambda n, t: "empty")
    counts, table = evaluate_folder("refytvos", pred, layouts["refytvos"])
    assert table is None
    assert counts == {"videos": 2, "expressions": 4, "pngs": 18, "submission": str(tmp_path / "p.zip")}
    names = zipfile.ZipFile(tmp_path / "p.zip").namelist()
    expected = sorted(f"Annotations/{v}/{e}/{f}.png" for v, video in bench.videos.items()
                      for e in video.expressions for f in video.frames)
    assert sorted(names) == expected


def test_a_mevis_server_archive_has_the_videos_at_its_root(layouts: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    bench = read_benchmark("mevis", layouts["mevis_server"], "valid")
    pred = write_preds(bench, tmp_path / "p", lambda n, t: "empty")
    out = tmp_path / "deep" / "er" / "mevis.zip"  # its folders are made
    counts, _ = evaluate_folder("mevis", pred, layouts["mevis_server"], "valid", submission=out)
    assert counts["submission"] == str(out)
    names = zipfile.ZipFile(out).namelist()
    assert names and all(n.startswith("SRC-valid-") and n.count("/") == 2 for n in names)


def test_a_scored_split_uses_the_authors_missing_rule_by_default(layouts: dict[str, Path],  # noqa: F811
                                                                 tmp_path: Path) -> None:
    bench = read_benchmark("mevis", layouts["mevis"], "valid_u")
    pred = write_preds(bench, tmp_path / "p")
    shutil.rmtree(pred / "SRC-valid-b")
    authors, table = evaluate_folder("mevis", pred, layouts["mevis"], "valid_u")
    assert (authors["n_scored"], authors["n_zeroed"], authors["n_skipped"]) == (5, 2, 0)
    assert authors["J"] == pytest.approx(100 * 3 / 5) and len(table) == 5
    skipped, _ = evaluate_folder("mevis", pred, layouts["mevis"], "valid_u", missing="skip")
    assert (skipped["n_scored"], skipped["J"]) == (3, 100.0)


def test_revos_through_the_benchmark_entry_points(revos_root: Path, tmp_path: Path) -> None:  # noqa: F811
    bench = read_benchmark("revos", revos_root)
    pred = write_preds(bench, tmp_path / "p")
    summary, table = evaluate_folder("revos", pred, revos_root)
    assert (summary["J"], summary["F"], summary["JF"]) == (100.0, 100.0, 100.0)
    assert summary["J"] == summary["J_overall"] and summary["JF"] == summary["JF_overall"]
    # a subset of (video, expression) pairs scores only those
    pairs = {(v, e) for v, video in bench.videos.items() for e in list(video.expressions)[:1]}
    subset, table = score_benchmark("revos", pred, revos_root, expressions=pairs)
    assert len(table) == len(pairs) and (table["JF"] == 1.0).all()
    assert sorted(zip(table["video"], table["exp_id"], strict=True)) == sorted(pairs)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PredictionsError) as refused:
        score_benchmark("revos", empty, revos_root)
    first = table.sort_values("expression_id").iloc[0]
    assert str(refused.value) == (f"{empty}: no prediction folder matches any revos valid expression (expected e.g. "
                                  f"{first['video']}/{first['exp_id']}/<frame>.png)")


# --- second part: messages, statuses, the ReVOS pass-throughs, Ref-DAVIS17 --------------------------------
# (the survivors of the first complete run: docs/testing.md)

WIDE = 3.0  # a boundary tolerance of 3 whole pixels: beyond the 2-px shift of `perturb`


def test_score_benchmark_names_what_is_wrong(layouts: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    root = layouts["mevis"]
    with pytest.raises(ValueError) as rule:
        score_benchmark("mevis", tmp_path, root, "valid_u", missing="never")
    assert str(rule.value) == "missing-prediction rule 'never': expected one of authors, zero, skip"
    with pytest.raises(PredictionsError) as gone:
        score_benchmark("mevis", tmp_path / "nope", root, "valid_u")
    assert str(gone.value) == f"predictions folder {tmp_path / 'nope'} does not exist"
    with pytest.raises(ValueError) as server:
        score_benchmark("mevis", tmp_path, layouts["mevis_server"], "valid")
    assert str(server.value) == "mevis valid has no public masks: build the submission archive instead"
    with pytest.raises(PredictionsError) as nothing:
        score_benchmark("mevis", tmp_path, root, "valid_u")
    assert str(nothing.value) == (f"{tmp_path}: no prediction folder matches any mevis valid_u expression "
                                  "(expected e.g. SRC-valid-a/0/<frame>.png)")
    with pytest.raises(PredictionsError) as no_pair:
        score_benchmark("mevis", tmp_path, root, "valid_u", expressions={("SRC-valid-z", "9")})
    assert str(no_pair.value).endswith("(expected e.g. <video>/<exp_id>/<frame>.png)")
    with pytest.raises(PredictionsError) as two_videos:  # the example is the first pair, video and expression
        score_benchmark("mevis", tmp_path, root, "valid_u", expressions={("SRC-valid-b", "0"), ("SRC-valid-a", "2")})
    assert str(two_videos.value).endswith("(expected e.g. SRC-valid-a/2/<frame>.png)")


def test_each_unscored_expression_has_its_status_and_the_warning_names_them(
        layouts: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    bench = read_benchmark("mevis", layouts["mevis"], "valid_u")
    pred = write_preds(bench, tmp_path / "p", lambda n, t: "shift" if n == 2 else "same")
    (pred / "SRC-valid-a/0/00002.png").unlink()  # a frame missing
    cv2.imwrite(str(pred / "SRC-valid-a/1/00001.png"), np.zeros((5, 5), np.uint8))  # a mis-sized frame
    with caplog.at_level(logging.WARNING, logger=B.__name__):
        summary, table = score_benchmark("mevis", pred, layouts["mevis"], "valid_u")
    # every row has the same columns, in the same order, whether or not it was scored (the first was not)
    assert table.columns.tolist() == ["video", "exp_id", "status", "n_frames", "J", "F", "JF"]
    rows = table.set_index(["video", "exp_id"])
    assert rows.loc[("SRC-valid-a", "0"), "status"] == "missing_frame"
    assert rows.loc[("SRC-valid-a", "1"), "status"] == "bad_shape"
    for key in (("SRC-valid-a", "0"), ("SRC-valid-a", "1")):  # unscored rows: no frames, no J, F, J&F
        assert rows.loc[key, "n_frames"] == 0 and rows.loc[key, ["J", "F", "JF"]].isna().all()
    shifted = rows.loc[("SRC-valid-a", "2")]
    assert shifted["n_frames"] == 5 and shifted["J"] < shifted["F"] < 1.0
    assert shifted["JF"] == pytest.approx((shifted["J"] + shifted["F"]) / 2)
    assert summary == pytest.approx({
        "J": 100 * (shifted["J"] + 2) / 3, "F": 100 * (shifted["F"] + 2) / 3,
        "JF": 100 * (shifted["J"] + shifted["F"] + 4) / 6, "n_expressions": 5, "n_scored": 3, "n_skipped": 2,
        "n_zeroed": 0, "missing_zero": 1.0})
    message = caplog.records[0].getMessage()
    assert message.startswith("2 of 5 expressions skipped, as the official script skips them ({")
    assert "'missing_frame': 1" in message and "'bad_shape': 1" in message
    assert message.endswith("), e.g. SRC-valid-a/0")
    # a wider boundary tolerance reaches F (not J): the 2-px shift is then within it
    wide, table = score_benchmark("mevis", pred, layouts["mevis"], "valid_u", bound_th=WIDE)
    assert table.set_index(["video", "exp_id"]).loc[("SRC-valid-a", "2"), "F"] > shifted["F"]
    assert wide["F"] > summary["F"] and wide["J"] == summary["J"]
    # a missing video under the "zero" rule: counted, scored 0, and said so
    shutil.rmtree(pred / "SRC-valid-b")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=B.__name__):
        zero, _ = score_benchmark("mevis", pred, layouts["mevis"], "valid_u", missing="zero")
        skip, _ = score_benchmark("mevis", pred, layouts["mevis"], "valid_u", missing="skip")
    assert (zero["n_zeroed"], zero["missing_zero"], skip["n_zeroed"], skip["missing_zero"]) == (2, 1.0, 0, 0.0)
    assert ("2 of 5 expressions have no prediction video folder: scored 0 (missing rule 'zero')"
            in [r.getMessage() for r in caplog.records])


def test_an_expression_without_an_annotated_frame_and_a_split_of_no_scored_expression(
        layouts: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    root = tmp_path / "reasonvos"
    shutil.copytree(layouts["reasonvos"], root)
    bench = read_benchmark("reasonvos", root)
    pred = write_preds(bench, tmp_path / "p")
    for png in (root / "Annotations/SRC_valid-b_1").glob("*.png"):
        png.unlink()  # no frame of that target is annotated
    summary, table = score_benchmark("reasonvos", pred, root)
    row = table.set_index("video").loc["SRC_valid-b_1"]
    assert row["status"] == "no_annotated_frame" and row["n_frames"] == 0
    assert (summary["n_scored"], summary["n_skipped"], summary["J"]) == (4, 1, 100.0)
    # every expression unscored: the summary has no number rather than a made-up one
    for folder in pred.glob("*/*"):
        for png in sorted(folder.glob("*.png"))[:1]:
            png.unlink()
    summary, table = score_benchmark("reasonvos", pred, root, expressions={("SRC_valid-a_0", "0")})
    assert (summary["n_expressions"], summary["n_scored"]) == (1, 0) and np.isnan(summary["JF"])
    assert table["status"].tolist() == ["missing_frame"]


def test_revos_takes_the_loaded_ground_truth_the_tolerance_and_the_split(
        revos_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    bench = read_benchmark("revos", revos_root)
    pred = write_preds(bench, tmp_path / "p", lambda n, t: "shift")
    nowhere = tmp_path / "no-root"
    nowhere.mkdir()  # nothing to read there: the ground truth handed in is the one scored
    truth = load_ground_truth(revos_root, "valid")
    handed, _ = score_benchmark("revos", pred, nowhere, ground_truth=truth)
    read, _ = score_benchmark("revos", pred, revos_root)
    assert handed["JF"] == read["JF"] and 0 < read["JF"] < 100
    wide, _ = score_benchmark("revos", pred, revos_root, bound_th=WIDE)
    assert wide["J"] == read["J"] and wide["F"] > read["F"]
    # the first missing expression is the example, here of the second video of the subset
    empty = tmp_path / "empty"
    empty.mkdir()
    pairs = {("SRC/valid/a", "0"), ("SRC/valid/b", "0")}
    subset, table = score_benchmark("revos", pred, revos_root, expressions=pairs)
    with pytest.raises(PredictionsError, match=r"\(expected e\.g\. (.+)/0/<frame>\.png\)") as refused:
        score_benchmark("revos", empty, revos_root, expressions=pairs)
    assert f"e.g. {table['video'].iloc[0]}/0/" in str(refused.value) and table["video"].iloc[0] != table[
        "video"].iloc[1]
    # `vrsflow evaluate --benchmark revos` parses ReVOS once (score_benchmark's), on the split it is given
    train = write_preds(read_benchmark("revos", revos_root, "train"), tmp_path / "train")
    monkeypatch.setattr(B, "read_benchmark", lambda *a, **k: pytest.fail("evaluate_folder read ReVOS itself"))
    summary, table = evaluate_folder("revos", train, revos_root, "train")
    assert summary["n_expressions"] == 2 and summary["JF"] == 100.0 and set(table["video"]) == {"SRC/train/c"}


def test_a_scored_split_other_than_the_default_is_the_one_scored(
        layouts: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    root = layouts["refytvos_train"]  # refytvos: "valid" (the default) is a server split, "train" has masks
    bench = read_benchmark("refytvos", root, "train")
    pred = write_preds(bench, tmp_path / "p", lambda n, t: ("same", "empty")[n])
    reads = []
    monkeypatch.setattr(B, "read_benchmark", lambda *a, **k: reads.append(a) or read_benchmark(*a, **k))
    summary, table = evaluate_folder("refytvos", pred, root, "train")
    assert reads == [("refytvos", root, "train")]  # read once: score_benchmark is handed the same Benchmark
    assert (summary["n_scored"], summary["J"]) == (2, pytest.approx(100 * (1 + table["J"].iloc[1]) / 2))
    direct, _ = score_benchmark("refytvos", pred, root, "train")
    assert direct == summary


def test_server_archive_members_in_numeric_expression_order(layouts: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    root = tmp_path / "mevis"
    shutil.copytree(layouts["mevis_server"], root)
    meta = next(root.rglob("meta_expressions.json"))
    edit_json(meta, lambda d: d["videos"]["SRC-valid-b"]["expressions"].update(
        {"10": d["videos"]["SRC-valid-b"]["expressions"].pop("0"),
         "9": d["videos"]["SRC-valid-b"]["expressions"].pop("1")}))
    bench = read_benchmark("mevis", root, "valid")
    pred = write_preds(bench, tmp_path / "p", lambda n, t: "empty")
    make_submission("mevis", pred, root, tmp_path / "s.zip", "valid")
    names = [n for n in zipfile.ZipFile(tmp_path / "s.zip").namelist() if n.startswith("SRC-valid-b/")]
    assert [n.split("/")[1] for n in names[::4]] == ["9", "10"]  # 4 frames each; "9" < "10" as the server lists


# --- Ref-DAVIS17 -------------------------------------------------------------------------------------------


def write_label(path: Path, labels: np.ndarray) -> None:
    """A DAVIS palette PNG (index 0 background, 1… objects, 255 void)."""
    img = Image.fromarray(labels.astype(np.uint8), mode="P")
    img.putpalette([0, 0, 0, 128, 0, 0, 0, 128, 0] + [200, 200, 200] * 253)
    img.save(path)


def test_merge_annotator_thresholds_values_at_half_and_names_bad_folders(layouts: dict[str, Path],  # noqa: F811
                                                                         tmp_path: Path) -> None:
    bench = read_benchmark("refdavis", layouts["refdavis"])
    pred = write_preds(bench, tmp_path / "p", lambda n, t: "empty")
    value = np.zeros((20, 30), np.uint8)
    value[0, :4] = (49, 50, 100, 255)  # 0.49 is dropped; 0.5, 1.0 and 2.55 beat the background's 0.1
    for frame in bench.videos["SRC-valid-b"].frames:
        cv2.imwrite(str(pred / "SRC-valid-b/0" / f"{frame}.png"), value)  # object 1 of annotator 0
    labels = merge_annotator(bench, pred, "SRC-valid-b", 0)
    assert labels.dtype == np.uint8 and labels.shape == (4, 20, 30)
    assert labels[:, 0, :4].tolist() == [[0, 1, 1, 1]] * 4 and labels[:, 1:].max() == 0
    (pred / "SRC-valid-b/4/00003.png").unlink()
    with pytest.raises(PredictionsError) as short:
        merge_annotator(bench, pred, "SRC-valid-b", 0)
    assert str(short.value) == f"{pred / 'SRC-valid-b/4'}: 3 PNGs, video SRC-valid-b has 4 frames"
    shutil.rmtree(pred / "SRC-valid-b/5")
    with pytest.raises(PredictionsError) as gone:
        merge_annotator(bench, pred, "SRC-valid-b", 1)
    assert str(gone.value) == f"{pred / 'SRC-valid-b/5'}: 0 PNGs, video SRC-valid-b has 4 frames"
    (pred / "SRC-valid-b/2/00001.png").write_bytes(b"not a png")
    with pytest.raises(PredictionsError) as broken:
        merge_annotator(bench, pred, "SRC-valid-b", 2)
    assert str(broken.value) == f"{pred / 'SRC-valid-b/2/00001.png'}: unreadable PNG"


def test_refdavis_table_summary_subset_and_tolerance(layouts: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    root = layouts["refdavis"]
    bench = read_benchmark("refdavis", root)
    # annotator 2 shifted in video a only: its F differs between the videos, and J from F
    pred = write_preds(bench, tmp_path / "p", lambda n, t: "same")
    shifted = write_preds(read_benchmark("refdavis", root), tmp_path / "s", lambda n, t: "shift")
    for e in ("2", "6"):
        shutil.rmtree(pred / "SRC-valid-a" / e)
        shutil.copytree(shifted / "SRC-valid-a" / e, pred / "SRC-valid-a" / e)
    summary, table = score_benchmark("refdavis", pred, root)
    assert table.columns.tolist() == ["video", "exp_id", "status", "n_frames", "J", "F", "JF"]
    assert table["exp_id"].tolist() == [f"anno_{a}/{k}" for a in range(4) for k in (1, 2, 1, 2)]
    assert table["video"].tolist() == ["SRC-valid-a", "SRC-valid-a", "SRC-valid-b", "SRC-valid-b"] * 4
    assert table["n_frames"].tolist() == [5, 5, 4, 4] * 4 and set(table["status"]) == {"ok"}
    assert (table["JF"] == (table["J"] + table["F"]) / 2).all()
    two = table[table["exp_id"].str.startswith("anno_2/")]
    assert two["F"].iloc[0] < 1.0 and two["F"].iloc[2] == 1.0 and two["J"].iloc[0] != two["F"].iloc[0]
    assert summary["J_anno2"] == pytest.approx(100 * two["J"].mean())
    assert summary["F_anno2"] == pytest.approx(100 * two["F"].mean())
    assert summary["J"] == pytest.approx((300 + summary["J_anno2"]) / 4)
    assert summary["F"] == pytest.approx((300 + summary["F_anno2"]) / 4)
    assert summary["JF"] == pytest.approx((summary["J"] + summary["F"]) / 2)
    assert (summary["n_expressions"], summary["n_scored"], summary["n_skipped"]) == (16, 16, 0)
    wide, _ = score_benchmark("refdavis", pred, root, bound_th=WIDE)
    assert wide["F_anno2"] > summary["F_anno2"] and wide["J_anno2"] == summary["J_anno2"]
    only_b, table = score_benchmark("refdavis", pred, root, expressions={("SRC-valid-b", str(e)) for e in range(8)})
    assert set(table["video"]) == {"SRC-valid-b"} and only_b["JF"] == 100.0


def test_refdavis_objects_are_those_of_the_first_frame_void_excluded(layouts: dict[str, Path],  # noqa: F811
                                                                     tmp_path: Path) -> None:
    root = tmp_path / "refdavis"
    shutil.copytree(layouts["refdavis"], root)
    gt_dir = root / "valid/Annotations/SRC-valid-b"
    first = np.zeros((20, 30), np.uint8)
    first[10:, :] = B.VOID  # video b's first frame: void and background, no object
    write_label(gt_dir / "00000.png", first)
    bench = read_benchmark("refdavis", root)
    pred = write_preds(bench, tmp_path / "p")
    summary, table = score_benchmark("refdavis", pred, root)
    assert set(table["video"]) == {"SRC-valid-a"} and len(table) == 8 and summary["JF"] == 100.0
    # object 2 absent from the first frame of video a: one object there, whatever the later frames hold
    labels = [np.asarray(Image.open(p)) for p in sorted((root / "valid/Annotations/SRC-valid-a").glob("*.png"))]
    write_label(root / "valid/Annotations/SRC-valid-a/00000.png", np.where(labels[0] == 2, 0, labels[0]))
    summary, table = score_benchmark("refdavis", write_preds(read_benchmark("refdavis", root), tmp_path / "q"), root)
    assert table["exp_id"].tolist() == [f"anno_{a}/1" for a in range(4)] and summary["JF"] == 100.0


def test_davis_matching_pads_with_empty_proposals_only_when_short_and_caps_them() -> None:
    # one object, present on the first of 5 frames; one proposal, wrong place, on every frame: J = 0 on all
    # five (an unused empty proposal would have scored the 4 empty frames 1)
    gt = np.zeros((1, 5, 8, 8), bool)
    gt[0, 0, :3, :3] = True
    labels = np.zeros((5, 8, 8), np.uint8)
    labels[:, 5:, 5:] = 1
    void = np.zeros((5, 8, 8), bool)
    j, f = B._davis_video(gt, void, labels, 0.008)
    assert (j, f) == ([0.0], [0.0])
    # two objects, one proposal (on object 2): object 1 gets the empty pad, J = 4/5 (its 4 empty frames); the
    # pairs are reported in object order
    gt2 = np.concatenate([gt, np.zeros((1, 5, 8, 8), bool)])
    gt2[1, :, 5:, 5:] = True
    j, _ = B._davis_video(gt2, void, labels, 0.008)
    assert j == [pytest.approx(0.8), 1.0]
    many = np.zeros((1, 4, 6), np.uint8)
    many.flat[:20] = np.arange(1, 21)
    assert len(B._davis_video(np.zeros((1, 1, 4, 6), bool), np.zeros((1, 4, 6), bool), many, 0.008)[0]) == 1
    many.flat[20] = 21
    with pytest.raises(PredictionsError) as refused:
        B._davis_video(np.zeros((1, 1, 4, 6), bool), np.zeros((1, 4, 6), bool), many, 0.008)
    assert str(refused.value) == "a prediction holds 21 objects, more than DAVIS allows (20)"


def box_labels(*boxes: tuple[int, int, int, int]) -> np.ndarray:
    """A (1, 10, 10) label map: label k + 1 on boxes[k] = (y0, y1, x0, x1), half-open."""
    labels = np.zeros((1, 10, 10), np.uint8)
    for k, (y0, y1, x0, x1) in enumerate(boxes, start=1):
        labels[0, y0:y1, x0:x1] = k
    return labels


@pytest.mark.parametrize(("gt_boxes", "pred_boxes", "j_expected"), [
    # by J alone proposal 1 would go to object 1 (IoU 2/26); J + F pairs it with object 2 (F 0.16 + 0.40 there)
    (((2, 6, 1, 5), (5, 9, 7, 10)), ((1, 4, 4, 8), (2, 3, 0, 1)), [0.0, 0.0]),
    # by F alone proposal 2 would go to object 2; J + F gives it object 1 (IoU 2/18)
    (((3, 5, 1, 2), (3, 7, 4, 5)), ((2, 7, 7, 8), (2, 8, 1, 4)), [pytest.approx(1 / 9), 0.0]),
])
def test_davis_matching_maximises_j_plus_f(gt_boxes, pred_boxes, j_expected) -> None:
    labels = box_labels(*gt_boxes)
    gt = np.stack([labels == k for k in (1, 2)])
    j, _ = B._davis_video(gt, np.zeros_like(labels, bool), box_labels(*pred_boxes), 0.008)
    assert j == j_expected
