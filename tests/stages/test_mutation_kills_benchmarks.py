"""Benchmark protocol rules the mutation run (scripts/mutation.sh benchmarks, docs/testing.md) found unpinned:
`vrsflow evaluate --benchmark` (evaluate_folder) on a scored split, a server split and ReVOS, and ReVOS through
score_benchmark (its evaluator is VISA's, tested in tests/stages/test_evaluate.py; here: what this module adds)."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest

from stages.evaluate.benchmarks import PredictionsError, evaluate_folder, score_benchmark
from stages.ingest.benchmarks import read_benchmark
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
