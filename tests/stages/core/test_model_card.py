"""The lineage chain from an output back to the raw data, as printed (a tree) and as a model card."""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields
from pathlib import Path

import pytest

from flows.cli import main
from stages.core import lineage as lineage_module
from stages.core.lineage import write_lineage
from stages.core.model_card import (
    LineageNotFound,
    find_lineage,
    format_chain,
    params_diff,
    raw_data,
    raw_data_hashes,
    walk_chain,
    write_model_card,
)
from stages.params import default_params
from stages.params.ingest import IngestParams
from stages.params.sample import SampleParams


def _folder_hash(files: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).hexdigest().encode())
    return digest.hexdigest()


@pytest.fixture()
def chain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """synth (generator) + an external meta file → ingest → sample; sft reads ingest and sample."""
    monkeypatch.setenv(lineage_module.HASH_CACHE_ENV, "off")
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "meta.json").write_text("{}")
    frames = tmp_path / "synth" / "JPEGImages"
    frames.mkdir(parents=True)
    (frames / "00000.jpg").write_bytes(b"jpeg")
    write_lineage(tmp_path / "synth", "synth", {"seed": 3}, seed=3)
    index = tmp_path / "index"
    index.mkdir()
    (index / "tracks.parquet").write_bytes(b"x")
    write_lineage(index, "ingest", IngestParams(strict=False), inputs={"meta": raw / "meta.json", "JPEGImages": frames},
                  counts={"tracks": 10})
    sample = tmp_path / "sample"
    write_lineage(sample, "sample", SampleParams(grpo_size=32), inputs={"index": index}, seed=0)
    model = tmp_path / "model"
    model.mkdir()
    write_lineage(model, "sft", {"lr": 1e-4}, inputs={"index": index, "sample": sample}, seed=7,
                  extra={"teacher": "template"})
    return model


def test_chain_is_depth_first_and_reaches_raw_data(chain: Path) -> None:
    record = json.loads((chain / "lineage.json").read_text())
    stages = [(entry["stage"], entry["depth"]) for entry in walk_chain(record)]
    assert stages == [("sft", 0), ("ingest", 1), ("synth", 2), ("sample", 1)]
    root = chain.parent
    assert raw_data(record) == [
        {"name": "meta", "path": (root / "raw" / "meta.json").as_posix(), "sha256": hashlib.sha256(b"{}").hexdigest(),
         "generated_by": None, "seed": None},
        {"name": "JPEGImages", "path": (root / "synth" / "JPEGImages").as_posix(),
         "sha256": _folder_hash({"00000.jpg": b"jpeg"}), "generated_by": "synth", "seed": 3},
    ]
    assert list(raw_data_hashes(record)) == [(root / "raw" / "meta.json").as_posix(),
                                             (root / "synth" / "JPEGImages").as_posix()]


def test_tree_shows_params_as_differences_from_defaults(chain: Path) -> None:
    record = json.loads((chain / "lineage.json").read_text())
    root = chain.parent.as_posix()
    lines = format_chain(record, default_params()).splitlines()
    frames = _folder_hash({"00000.jpg": b"jpeg"})[:12]
    index = next(line for line in lines if line.startswith("├─ index"))
    assert lines[0].startswith("sft  code ") and lines[0].endswith("seed 7")
    assert lines[1:5] == ["│  params: 1 value", "│    lr: 0.0001", "│  teacher: template", index]
    assert lines[5].startswith("│  └─ ingest  code ")
    n_ingest, n_sample = len(fields(IngestParams)), len(fields(SampleParams))
    assert lines[6:9] == [f"│     │  params: defaults ({n_ingest} values) except",
                          "│     │    ingest.strict: true → false", "│     │  counts: tracks=10"]
    assert lines[9] == f"│     ├─ JPEGImages  {root}/synth/JPEGImages  sha256 {frames}"
    assert lines[10].startswith("│     │  └─ synth  code ") and lines[10].endswith("seed 3")
    assert lines[11:13] == ["│     │        params: defaults (1 value) except", "│     │          synth.seed: 0 → 3"]
    meta = hashlib.sha256(b"{}").hexdigest()[:12]
    assert lines[13] == f"│     └─ meta  {root}/raw/meta.json  sha256 {meta}  raw data"
    assert lines[14].startswith("└─ sample  ")
    assert lines[16:18] == [f"      │  params: defaults ({n_sample} values) except",
                            "      │    sample.grpo_size: 24 → 32"]
    assert lines[-1] == "         └─ ingest (see above)"
    assert max(len(line.replace(root, "")) for line in lines) < 100


def test_params_diff_against_defaults() -> None:
    assert params_diff("sample", {"grpo_size": 24}, default_params()) == ([], 1)
    assert params_diff("cot", {"cot": {"pools": ["sft", "grpo"]}, "teacher": {"model": "x"}}, default_params()) == (
        ['cot.pools: ["sft"] → ["sft", "grpo"]', "teacher.model: doubao-1-5-thinking-vision-pro-250428 → x"], 2)
    assert params_diff("sample", {"nope": 1}, default_params()) is None


def test_model_card_lists_raw_data_metrics_and_tree(chain: Path) -> None:
    card = write_model_card(chain, "tiny model", default_params(), metrics={"eval": {"jf": 0.5}})
    text = card.read_text()
    root = chain.parent.as_posix()
    assert (f"| meta | `{root}/raw/meta.json` | `{hashlib.sha256(b'{}').hexdigest()}` | external |") in text
    assert (f"| JPEGImages | `{root}/synth/JPEGImages` | `{_folder_hash({'00000.jpg': b'jpeg'})}` | "
            "generated by stage `synth` (seed 3) |") in text
    assert "(none)" not in text
    assert "| eval.jf | 0.5 |" in text
    assert format_chain(json.loads((chain / "lineage.json").read_text()), default_params()) in text


def test_find_lineage_walks_up_and_fails_clearly(chain: Path, tmp_path: Path) -> None:
    assert find_lineage(chain.parent / "index" / "tracks.parquet") == chain.parent / "index" / "lineage.json"
    with pytest.raises(LineageNotFound, match="no lineage.json"):
        find_lineage(Path("/"))


def test_find_lineage_through_dvc_yaml(tmp_path: Path) -> None:
    """reports/eval.md has no lineage.json near it: the stage listing it in dvc.yaml answers."""
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n  evaluate:\n    cmd: x\n    outs:\n      - ${evaluate.out}\n      - reports/eval.md\n"
        "      - reports/eval\n    metrics:\n      - metrics/eval.json:\n          cache: false\n"
        "  other:\n    cmd: y\n    outs:\n      - data/other\n")
    (tmp_path / "params.yaml").write_text("evaluate:\n  out: data/evaluate\n")
    write_lineage(tmp_path / "data" / "evaluate", "evaluate", {})
    write_lineage(tmp_path / "data" / "other", "other", {})
    (tmp_path / "reports" / "eval").mkdir(parents=True)
    (tmp_path / "reports" / "eval.md").write_text("# report")
    (tmp_path / "reports" / "eval" / "00_boxes.png").write_bytes(b"png")
    expected = tmp_path / "data" / "evaluate" / "lineage.json"
    assert find_lineage(tmp_path / "reports" / "eval.md") == expected
    assert find_lineage(tmp_path / "reports" / "eval" / "00_boxes.png") == expected
    assert find_lineage(tmp_path / "metrics" / "eval.json", project_dir=tmp_path) == expected
    with pytest.raises(LineageNotFound):
        find_lineage(tmp_path / "reports" / "other.md")


def test_cli_prints_tree(chain: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lineage", str(chain)]) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1] == "         └─ ingest (see above)"
    assert out.index("sft") < out.index("ingest") < out.index("synth") < out.index("└─ sample")
    assert main(["lineage", "/"]) == 1
