"""The other benchmarks: synth writes each published layout, the readers index it like ReVOS, and each
benchmark's protocol scores hand-computed fixtures (docs/benchmarks.md has the side-by-side with the
official scripts on the same fixtures)."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import cv2
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from flows.cli import main as cli_main
from stages.bench.benchmarks import PredictionsError, make_submission, merge_annotator, score_benchmark
from stages.evaluate.scorer import load_ground_truth, score_predictions
from stages.ingest.benchmarks import BenchmarkFormatError, ingest_benchmark, read_benchmark
from stages.ingest.checks import IngestError
from stages.params.ingest import IngestParams
from stages.synth.layouts import write_layout
from tests.revos_factory import benchmark_videos, edit_json, perturb, rect_mask, write_root

BOX_A = (2, 2, 10, 8)  # video a, object 11: 8 × 6 px on every frame


@pytest.fixture(scope="module")
def revos_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_root(tmp_path_factory.mktemp("bench") / "revos", benchmark_videos())


@pytest.fixture(scope="module")
def layouts(revos_root: Path) -> dict[str, Path]:
    base = revos_root.parent
    return {"mevis": write_layout("mevis", revos_root, base / "mevis", "valid_u"),
            "mevis_server": write_layout("mevis", revos_root, base / "mevis_s", "valid", with_masks=False),
            "reasonvos": write_layout("reasonvos", revos_root, base / "reasonvos", "valid"),
            "refytvos": write_layout("refytvos", revos_root, base / "refytvos", "valid", with_masks=False),
            "refytvos_train": write_layout("refytvos", revos_root, base / "refytvos", "train"),
            "refdavis": write_layout("refdavis", revos_root, base / "refdavis", "valid")}


def write_preds(bench, out: Path, kind=lambda n, t: "same") -> Path:
    """Predictions made from the benchmark's own ground truth (`perturb` kinds per expression n, frame t)."""
    for video, v in bench.videos.items():
        for n, exp_id in enumerate(v.expressions):
            track = bench.track(video, exp_id)
            shape = next(m.shape for m in track if m is not None) if any(m is not None for m in track) else (24, 32)
            folder = out / video / exp_id
            folder.mkdir(parents=True, exist_ok=True)
            for t, (frame, m) in enumerate(zip(v.frames, track, strict=True)):
                m = np.zeros(shape, bool) if m is None else m
                cv2.imwrite(str(folder / f"{frame}.png"), perturb(m, kind(n, t)))
    return out


# --- layouts and readers -------------------------------------------------------------------------------


def test_each_layout_on_disk_exactly(layouts: dict[str, Path]) -> None:
    mevis = json.loads((layouts["mevis"] / "valid_u/meta_expressions.json").read_text())["videos"]
    assert mevis["SRC-valid-a"]["frames"] == ["00000", "00001", "00002", "00003", "00004"]  # renumbered
    assert mevis["SRC-valid-a"]["expressions"]["2"] == {"exp": "everything that is red", "obj_id": [0, 1],
                                                         "anno_id": [11, 12]}
    assert "2" not in mevis["SRC-valid-b"]["expressions"]  # no-target expressions are ReVOS-only
    assert not (layouts["mevis_server"] / "valid/mask_dict.json").exists()
    reason = json.loads((layouts["reasonvos"] / "meta_expressions.json").read_text())["videos"]
    assert reason["valid-a"]["source"] == "SRC"
    assert reason["valid-a"]["expressions"][2] == {"obj_id": 2, "exp_id": 2, "exp_text": "everything that is red",
                                                   "is_sent": True}
    png = cv2.imread(str(layouts["reasonvos"] / "Annotations/SRC_valid-a_0/00000.png"), cv2.IMREAD_GRAYSCALE)
    assert png.sum() == 48 * 255 and set(np.unique(png)) == {0, 255}
    davis = json.loads((layouts["refdavis"] / "meta_expressions/valid/meta_expressions.json").read_text())["videos"]
    assert [davis["SRC-valid-a"]["expressions"][str(i)]["obj_id"] for i in range(8)] == ["1"] * 4 + ["2"] * 4
    with Image.open(layouts["refdavis"] / "valid/Annotations/SRC-valid-a/00002.png") as img:
        assert img.mode == "P" and sorted(np.unique(np.asarray(img))) == [0, 1]  # object 2 absent at frame 2
    assert not (layouts["refytvos"] / "valid/Annotations").exists()


@pytest.mark.parametrize(("name", "split"), [("mevis", "valid_u"), ("reasonvos", "valid"), ("refdavis", "valid"),
                                           ("refytvos", "train")])
def test_readers_index_like_revos(name: str, split: str, layouts: dict[str, Path], tmp_path: Path) -> None:
    root = layouts["refytvos_train" if name == "refytvos" else name]
    report = ingest_benchmark(IngestParams(), name, root, split, tmp_path / "index", tmp_path / "canon")
    expressions = pd.read_parquet(tmp_path / "index/expressions.parquet")
    tracks = pd.read_parquet(tmp_path / "index/tracks.parquet")
    n = {"mevis": 5, "reasonvos": 5, "refdavis": 16, "refytvos": 2}[name]
    assert len(expressions) == n and report.metrics["quarantined"] == 0
    if name == "refytvos":  # palette PNGs: the 8 × 8 box on every frame; the other object absent from frame 1
        assert sorted(tracks["area"]) == [0, 64, 64, 64, 128, 144]  # 18 × 8, absent, 16 × 8
        assert (expressions["split"] == "train").all()
    else:  # the static box of video a keeps its 48 px area on every frame, whatever layout it came through
        assert 48 in set(tracks["area"])


def test_reader_problems_are_named_or_quarantined(layouts: dict[str, Path], tmp_path: Path) -> None:
    root = tmp_path / "reasonvos"
    shutil.copytree(layouts["reasonvos"], root)
    shutil.rmtree(root / "Annotations/SRC_valid-b_1")
    with pytest.raises(IngestError, match="annotation folder Annotations/SRC_valid-b_1 missing"):
        read_benchmark("reasonvos", root)
    report = ingest_benchmark(IngestParams(strict=False), "reasonvos", root, "valid", tmp_path / "i", tmp_path / "c")
    quarantine = pd.read_parquet(tmp_path / "i/quarantine.parquet")
    assert quarantine["item"].tolist() == ["SRC_valid-b_1#1"] and report.metrics["quarantined"] == 1
    (root / "meta_expressions.json").write_text("{not json")
    with pytest.raises(BenchmarkFormatError, match="meta_expressions.json: malformed JSON"):
        read_benchmark("reasonvos", root)
    with pytest.raises(BenchmarkFormatError, match="unknown split 'valid_u'"):
        read_benchmark("refdavis", layouts["refdavis"], "valid_u")


# --- protocols on hand-computed fixtures -------------------------------------------------------------------


def test_mevis_protocol_hand_values(layouts: dict[str, Path], tmp_path: Path) -> None:
    bench = read_benchmark("mevis", layouts["mevis"], "valid_u")
    summary, _ = score_benchmark("mevis", write_preds(bench, tmp_path / "same"), layouts["mevis"], "valid_u")
    assert (summary["J"], summary["F"], summary["n_scored"]) == (100.0, 100.0, 5)
    # a#0 shifted 2 px on every frame: IoU 6·6 / 6·10; the other expressions perfect; a missing video scores 0
    # (the dataset authors' eval_mevis.py) or, with missing="skip" (VideoLISA's copy), is left out
    pred = write_preds(bench, tmp_path / "p", lambda n, t: "same")
    cv2.imwrite(str(pred / "SRC-valid-a/0/00003.png"), perturb(rect_mask(BOX_A, 24, 32), "shift"))
    shutil.rmtree(pred / "SRC-valid-b")
    summary, table = score_benchmark("mevis", pred, layouts["mevis"], "valid_u", missing="skip")
    assert summary["n_scored"] == 3 and summary["n_skipped"] == 2
    assert table.set_index(["video", "exp_id"]).loc[("SRC-valid-a", "0"), "J"] == pytest.approx((4 + 0.6) / 5)
    assert summary["J"] == pytest.approx(100 * (0.92 + 1 + 1) / 3)
    authors, table = score_benchmark("mevis", pred, layouts["mevis"], "valid_u")  # default: the authors' rule
    assert (authors["n_scored"], authors["n_zeroed"], authors["n_skipped"]) == (5, 2, 0)
    assert authors["J"] == pytest.approx(100 * (0.92 + 1 + 1 + 0 + 0) / 5)
    assert authors["JF"] < summary["JF"]  # a partial submission never beats the complete one it is part of
    assert (table.set_index("video").loc["SRC-valid-b", ["J", "F"]] == 0).all(axis=None)
    # an expression folder missing inside a present video crashes the official worker: left out by both rules
    shutil.rmtree(pred / "SRC-valid-a/1")
    authors, table = score_benchmark("mevis", pred, layouts["mevis"], "valid_u", missing="zero")
    assert (authors["n_scored"], authors["n_skipped"]) == (4, 1)
    assert table.set_index(["video", "exp_id"]).loc[("SRC-valid-a", "1"), "status"] == "missing_expression"


def test_reasonvos_missing_prediction_follows_its_authors_script(layouts: dict[str, Path], tmp_path: Path) -> None:
    # VideoLISA's eval_reason_vos.py (ReasonVOS's authors) `continue`s past a missing prediction folder
    bench = read_benchmark("reasonvos", layouts["reasonvos"])
    pred = write_preds(bench, tmp_path / "p", lambda n, t: "same")
    gone = sorted(bench.videos)[0]
    shutil.rmtree(pred / gone)
    authors, _ = score_benchmark("reasonvos", pred, layouts["reasonvos"])
    zero, _ = score_benchmark("reasonvos", pred, layouts["reasonvos"], missing="zero")
    n_gone = len(bench.videos[gone].expressions)
    assert authors["n_skipped"] == n_gone and authors["J"] == pytest.approx(100.0)
    assert zero["n_zeroed"] == n_gone and zero["J"] == pytest.approx(100 * (zero["n_scored"] - n_gone)
                                                                       / zero["n_scored"])
    with pytest.raises(ValueError, match="missing-prediction rule 'never'"):
        score_benchmark("reasonvos", pred, layouts["reasonvos"], missing="never")


def test_mevis_reads_nonzero_as_target(layouts: dict[str, Path], tmp_path: Path) -> None:
    bench = read_benchmark("mevis", layouts["mevis"], "valid_u")
    summary, _ = score_benchmark("mevis", write_preds(bench, tmp_path / "p", lambda n, t: "low_value"),
                                 layouts["mevis"], "valid_u")
    assert summary["JF"] == 100.0  # 0/1 PNGs, as OpenCV reads them: 1 is foreground


def test_reasonvos_scores_annotated_frames_only(layouts: dict[str, Path], tmp_path: Path) -> None:
    root = tmp_path / "reasonvos"
    shutil.copytree(layouts["reasonvos"], root)
    (root / "Annotations/SRC_valid-a_0/00004.png").unlink()  # frame 00004 of that target is not annotated
    bench = read_benchmark("reasonvos", root)
    pred = write_preds(bench, tmp_path / "p")
    cv2.imwrite(str(pred / "SRC_valid-a_0/0/00004.png"), np.zeros((24, 32), np.uint8))  # wrong, but unscored
    summary, table = score_benchmark("reasonvos", pred, root)
    assert summary["JF"] == 100.0
    assert table.set_index(["video", "exp_id"]).loc[("SRC_valid-a_0", "0"), "n_frames"] == 4


def test_refdavis_merges_annotators_and_matches_objects(layouts: dict[str, Path], tmp_path: Path) -> None:
    root = layouts["refdavis"]
    bench = read_benchmark("refdavis", root)
    # annotator 0 perfect, 1 empty, 2 shifted, 3 perfect but with the objects of video a swapped
    pred = write_preds(bench, tmp_path / "p", lambda n, t: ("same", "empty", "same", "same")[n % 4])
    for frame in bench.videos["SRC-valid-a"].frames:
        one, two = pred / "SRC-valid-a/3" / f"{frame}.png", pred / "SRC-valid-a/7" / f"{frame}.png"
        x, y = one.read_bytes(), two.read_bytes()
        one.write_bytes(y)
        two.write_bytes(x)
    labels = merge_annotator(bench, pred, "SRC-valid-a", 3)
    assert labels[0, 3, 3] == 2  # object 1's expression now marks the pixels of object 2's label
    summary, _ = score_benchmark("refdavis", pred, root)
    assert summary["JF_anno0"] == 100.0 and summary["JF_anno3"] == 100.0  # unsupervised matching undoes the swap
    # empty: every object scores 0 on frames where it is present, 1 where both are empty (object 2, frame 2)
    assert summary["J_anno1"] == pytest.approx(100 * (0 + 1 / 5 + 0 + 0) / 4)
    assert summary["J"] == pytest.approx((100 + summary["J_anno1"] + 100 + 100) / 4)


def test_refdavis_overlap_goes_to_the_lower_object(layouts: dict[str, Path], tmp_path: Path) -> None:
    bench = read_benchmark("refdavis", layouts["refdavis"])
    pred = write_preds(bench, tmp_path / "p", lambda n, t: "full")
    labels = merge_annotator(bench, pred, "SRC-valid-b", 0)
    assert (labels == 1).all()  # both objects claim every pixel at 255/100: argmax keeps the first


# --- bad input, server splits, CLI -----------------------------------------------------------------------


def test_type_id_outside_range_is_a_named_error(revos_root: Path, tmp_path: Path) -> None:
    root = tmp_path / "r"
    shutil.copytree(revos_root, root)
    edit_json(root / "meta_expressions_valid_.json",
              lambda d: d["videos"]["SRC/valid/a"]["expressions"]["0"].update(type_id=7))
    with pytest.raises(ValueError, match=r"expression SRC/valid/a#0: type_id 7 outside 0–2"):
        load_ground_truth(root, "valid")


def test_missing_anno_id_scores_zero_with_a_warning(revos_root: Path, tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "r"
    shutil.copytree(revos_root, root)
    edit_json(root / "mask_dict.json", lambda d: d.pop("12"))
    bench = read_benchmark("revos", revos_root)
    pred = write_preds(bench, tmp_path / "p")
    summary, table = score_predictions(pred, root)
    rows = table.set_index("expression_id")
    assert rows.loc["SRC/valid/a#1", "status"] == "missing_anno" and rows.loc["SRC/valid/a#1", "J"] == 0.0
    assert rows.loc["SRC/valid/a#0", "J"] == 1.0 and summary["n_missing_anno"] == 2
    assert "anno_ids missing" in caplog.text


def test_server_split_gives_the_submission_archive(layouts: dict[str, Path], tmp_path: Path) -> None:
    bench = read_benchmark("refytvos", layouts["refytvos"])
    pred = write_preds(bench, tmp_path / "p", lambda n, t: "empty")
    counts = make_submission("refytvos", pred, layouts["refytvos"], tmp_path / "sub.zip")
    names = zipfile.ZipFile(tmp_path / "sub.zip").namelist()
    assert counts == {"videos": 2, "expressions": 4, "pngs": 18}
    assert names[0] == "Annotations/SRC-valid-a/0/00000.png" and len(names) == 18
    bench = read_benchmark("mevis", layouts["mevis_server"], "valid")
    pred = write_preds(bench, tmp_path / "m", lambda n, t: "empty")
    (pred / "SRC-valid-b/1/00003.png").unlink()
    with pytest.raises(PredictionsError, match=r"1 prediction PNGs missing .* e.g. SRC-valid-b/1/00003.png"):
        make_submission("mevis", pred, layouts["mevis_server"], tmp_path / "m.zip", "valid")


def test_cli_benchmark_and_a_folder_matching_nothing(layouts: dict[str, Path], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    bench = read_benchmark("reasonvos", layouts["reasonvos"])
    pred = write_preds(bench, tmp_path / "p")
    assert cli_main(["evaluate", "--benchmark", "reasonvos", "--pred", str(pred), "--data",
                     str(layouts["reasonvos"])]) == 0
    assert json.loads(capsys.readouterr().out)["JF"] == 100.0
    (tmp_path / "other/x/0").mkdir(parents=True)
    assert cli_main(["evaluate", "--benchmark", "reasonvos", "--pred", str(tmp_path / "other"), "--data",
                     str(layouts["reasonvos"])]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no prediction folder matches any reasonvos valid expression" in err[0]


# --- synth.layout, the table ------------------------------------------------------------------------------


@pytest.mark.parametrize(("layout", "split", "n_files"), [
    ("mevis", "valid_u", 3), ("refdavis", "valid", 3),  # the train split of every layout too (issue 26)
    ("mevis", "train", 3), ("refytvos", "train", 3), ("refdavis", "train", 3)])
def test_synth_writes_a_benchmark_layout_its_reader_reads(layout: str, split: str, n_files: int,
                                                          tmp_path: Path) -> None:
    from stages.params.synth import SynthParams, SynthScale
    from stages.synth import generate_synthetic

    scale = SynthScale(n_videos_train=2, n_videos_valid=2, min_frames=5, max_frames=6, height=32, width=48)
    generate_synthetic(SynthParams(seed=1, default=scale, layout=layout), tmp_path / "r")
    assert not list((tmp_path / "r").glob("meta_expressions_*_.json"))  # no ReVOS files left
    assert len([p for p in (tmp_path / "r").iterdir() if p.name != "lineage.json"]) == n_files
    bench = read_benchmark(layout, tmp_path / "r", split)
    assert len(bench.videos) == 2 and all(v.expressions for v in bench.videos.values())
    video = sorted(bench.videos)[0]
    track = bench.track(video, next(iter(bench.videos[video].expressions)))
    assert all(m is not None for m in track) and any(m.any() for m in track)


def test_table_rows_models_columns_benchmarks_and_the_gain_line() -> None:
    from stages.bench import benchmark_table, gain_line

    results = {"revos": {"sft": {"JF": 40.04, "R_visa_overall": 10.0}, "grpo": {"JF": 45.06, "R_visa_overall": 12.0}},
               "mevis": {"sft": {"JF": 30.0}, "grpo": {"JF": 29.0}},
               "refytvos": {"sft": {"pngs": 9.0}, "grpo": {"pngs": 9.0}}}
    table = benchmark_table(results, ["sft", "grpo"])
    assert table.to_dict("records") == [
        {"model": "sft", "revos J&F": 40.0, "revos R": 10.0, "mevis J&F": 30.0, "refytvos J&F": "server"},
        {"model": "grpo", "revos J&F": 45.1, "revos R": 12.0, "mevis J&F": 29.0, "refytvos J&F": "server"}]
    assert gain_line(results) == "grpo vs sft: +2.0 J&F on average (revos +5.0, mevis -1.0)."


def test_subset_keeps_whole_refdavis_objects_and_scores_only_them() -> None:
    from stages.bench import _first

    exps = {"a": [str(i) for i in range(8)], "b": [str(i) for i in range(8)]}
    assert _first("mevis", exps, 3) == {"a": ["0", "1", "2"]}
    assert _first("refdavis", exps, 2) == {"a": ["0", "1", "2", "3"]}  # one whole object: its 4 annotators
    assert _first("refdavis", exps, 10) == {"a": exps["a"], "b": ["0", "1", "2", "3"]}
    assert _first("reasonvos", exps, 0) is exps


def test_refdavis_subset_run_scores_the_kept_objects(layouts: dict[str, Path], tmp_path: Path) -> None:
    import dataclasses

    bench = read_benchmark("refdavis", layouts["refdavis"])
    video = bench.videos["SRC-valid-a"]
    kept = dataclasses.replace(video, expressions={e: video.expressions[e] for e in ["0", "1", "2", "3"]})
    bench = dataclasses.replace(bench, videos={"SRC-valid-a": kept})
    pred = write_preds(bench, tmp_path / "p")
    summary, table = score_benchmark("refdavis", pred, layouts["refdavis"], bench=bench,
                                     expressions={("SRC-valid-a", e) for e in "0123"})
    assert summary["JF"] == 100.0 and len(table) == 4  # object 2 (no expressions kept) is not scored


def test_revos_subset_interleaves_referring_and_reasoning(revos_root: Path) -> None:
    from stages.bench import _revos_videos

    # video a: 0 referring, 1 referring, 2 reasoning → referring 0, reasoning 2, referring 1
    assert _revos_videos(revos_root, "valid")["SRC/valid/a"] == ["0", "2", "1"]
    assert _revos_videos(revos_root, "valid")["SRC/valid/b"] == ["0", "1", "2"]  # no-target last


def test_partial_submission_of_the_expressions_run(layouts: dict[str, Path], tmp_path: Path) -> None:
    bench = read_benchmark("refytvos", layouts["refytvos"])
    pred = write_preds(bench, tmp_path / "p", lambda n, t: "empty")
    shutil.rmtree(pred / "SRC-valid-b")
    counts = make_submission("refytvos", pred, layouts["refytvos"], tmp_path / "sub.zip",
                             expressions={("SRC-valid-a", "0"), ("SRC-valid-a", "1")})
    assert counts == {"videos": 1, "expressions": 2, "pngs": 10}


def test_bench_table_stage_writes_report_and_metrics(tmp_path: Path) -> None:
    from stages.bench import write_benchmark_table
    from stages.params.benchmarks import BenchmarksParams

    (tmp_path / "m").mkdir()
    counts = {f"{m}.{k}": v for m, (no, degenerate) in {"sft": (2, 5), "grpo": (0, 1), "base": (9, 0),
                                                        "ground_truth": (0, 0), "empty_answer": (1, 0)}.items()
              for k, v in (("n_answer_no_boxes", no), ("n_answer_degenerate_boxes", degenerate))}
    (tmp_path / "m/revos.json").write_text(json.dumps({"sft.JF": 10.0, "sft.R_visa_overall": 5.0, "grpo.JF": 12.5,
                                                       "grpo.R_visa_overall": 6.0, "base.JF": 0.0,
                                                       "ground_truth.JF": 61.25, "ground_truth.R_visa_overall": 30.0,
                                                       "empty_answer.JF": 6.5, "empty_answer.R_visa_overall": 100.0,
                                                       **counts}))
    (tmp_path / "m/refdavis.json").write_text(json.dumps({"sft.JF": 20.0, "grpo.JF": 19.0, "base.JF": 1.0,
                                                          "ground_truth.JF": 70.0, "empty_answer.JF": 0.0, **counts,
                                                          "sft.n_answer_no_boxes": 3}))
    report = write_benchmark_table(BenchmarksParams(names=("revos", "refdavis")), tmp_path / "m",
                                   tmp_path / "benchmarks.md")
    assert report.metrics["grpo.revos.JF"] == 12.5 and report.metrics["sft.revos.R"] == 5.0
    assert report.metrics["gain_grpo_over_sft"] == pytest.approx(0.75)
    text = (tmp_path / "benchmarks.md").read_text()
    assert "| model | revos J&F | revos R | refdavis J&F |" in text
    assert "| base | 0 | — | 1 |" in text and "| grpo | 12.5 | 6 | 19 |" in text
    assert "grpo vs sft: +0.8 J&F on average (revos +2.5, refdavis -1.0)." in text
    # the reference row (benchmarks.reference, on by default) last, with what it is
    assert text.index("| grpo | 12.5 |") < text.index("| ground_truth | 61.2 | 30 | 70 |")
    assert "`ground_truth`: the ground-truth answer" in text and report.metrics["ground_truth.refdavis.JF"] == 70.0
    # then the empty answer's row (no boxes: empty masks), with what it is
    assert text.index("| ground_truth | 61.2 |") < text.index("| empty_answer | 6.5 | 100 | 0 |")
    assert "`empty_answer`: the empty answer" in text and report.metrics["empty_answer.revos.JF"] == 6.5
    assert "| empty_answer | 1 / 0 | 1 / 0 |" in text
    off = write_benchmark_table(BenchmarksParams(names=("revos", "refdavis"), reference=False), tmp_path / "m",
                                tmp_path / "off.md")
    assert "ground_truth" not in (tmp_path / "off.md").read_text() and "ground_truth.revos.JF" not in off.metrics
    assert "empty_answer" not in (tmp_path / "off.md").read_text() and "empty_answer.revos.JF" not in off.metrics
    # the answers that made no mask: no boxes / degenerate boxes, per model and benchmark
    assert "| model | revos | refdavis |" in text and "| sft | 2 / 5 | 3 / 5 |" in text
    assert "| base | 9 / 0 | 9 / 0 |" in text
    # a metrics file from before the two were counted apart is refused in one line naming it and the stage
    old = json.loads((tmp_path / "m/refdavis.json").read_text())
    (tmp_path / "m/refdavis.json").write_text(json.dumps({k: v for k, v in old.items() if "degenerate" not in k}))
    with pytest.raises(ValueError, match=r"^\S+refdavis.json: model sft has no n_answer_degenerate_boxes .* dvc repro "
                                         r"bench@refdavis$"):
        write_benchmark_table(BenchmarksParams(names=("revos", "refdavis")), tmp_path / "m", tmp_path / "old.md")


def test_prediction_pngs_are_read_as_opencv_reads_them(tmp_path: Path) -> None:
    from stages.bench.benchmarks import read_prediction
    from stages.evaluate.scorer import read_mask_png

    mask = np.zeros((4, 6), dtype=np.uint16)
    mask[1:3, 2:5] = 200  # a 16-bit PNG with small values: OpenCV keeps the high byte (0); PIL would clip to 200
    Image.fromarray(mask).save(tmp_path / "p16.png")
    rgb = np.zeros((4, 6, 3), dtype=np.uint8)
    rgb[0, 0] = (255, 0, 0)  # pure red: luma 0.299 · 255 → 76
    Image.fromarray(rgb).save(tmp_path / "rgb.png")
    for read in (read_prediction, read_mask_png):
        assert read(tmp_path / "p16.png").max() == 0
        assert read(tmp_path / "rgb.png")[0, 0] == 76 and read(tmp_path / "rgb.png").dtype == np.uint8
    with Image.open(tmp_path / "p16.png") as img:
        assert np.asarray(img.convert("L")).max() > 0  # the PIL path this replaced saw a target here
