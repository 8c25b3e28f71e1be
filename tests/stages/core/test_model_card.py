"""The lineage chain from an output back to the raw data, as printed and as a model card."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.cli import main
from stages.core.lineage import write_lineage
from stages.core.model_card import LineageNotFound, find_lineage, raw_data_hashes, walk_chain, write_model_card


@pytest.fixture()
def chain(tmp_path: Path) -> Path:
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "meta.json").write_text("{}")
    index = tmp_path / "index"
    index.mkdir()
    (index / "tracks.parquet").write_bytes(b"x")
    write_lineage(index, "ingest", {"strict": True}, inputs={"root": raw}, counts={"tracks": 10})
    model = tmp_path / "model"
    model.mkdir()
    write_lineage(model, "sft", {"lr": 1e-4}, inputs={"index": index}, seed=7, extra={"teacher": "template"})
    return model


def test_chain_reaches_raw_data(chain: Path) -> None:
    record = json.loads((chain / "lineage.json").read_text())
    stages = [(entry["stage"], entry["depth"]) for entry in walk_chain(record)]
    assert stages == [("sft", 0), ("ingest", 1)]
    hashes = raw_data_hashes(record)
    assert list(hashes) == [(chain.parent / "raw").as_posix()] and len(next(iter(hashes.values()))) == 64


def test_model_card_lists_stages_metrics_and_raw_hash(chain: Path) -> None:
    card = write_model_card(chain, "tiny model", metrics={"eval": {"jf": 0.5}})
    text = card.read_text()
    assert "### sft" in text and "### ingest" in text
    assert "| eval.jf | 0.5 |" in text
    assert '"teacher": "template"' in text


def test_find_lineage_walks_up_and_fails_clearly(chain: Path, tmp_path: Path) -> None:
    assert find_lineage(chain.parent / "index" / "tracks.parquet") == chain.parent / "index" / "lineage.json"
    with pytest.raises(LineageNotFound, match="no lineage.json"):
        find_lineage(Path("/"))


def test_cli_prints_chain(chain: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lineage", str(chain)]) == 0
    out = capsys.readouterr().out
    assert out.index("sft") < out.index("ingest") and "seed: 7" in out
    assert main(["lineage", "/"]) == 1
