"""The `vrsflow profile` command: profiles become checked `dvc exp run -S` arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cli import main


def test_paper_profile_prints_checked_overrides(project_root: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project_root)
    assert main(["profile", "revos-paper"]) == 0
    out = capsys.readouterr().out
    assert "-S sample.grpo_size=10000" in out and "-S keyframes.train_size=560" in out


def test_profile_with_unknown_key_is_refused(tmp_path: Path, project_root: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.yaml").write_text("sample.grpo_sise: 3\n")
    assert main(["profile", "bad", "--dir", str(tmp_path), "--params", str(project_root / "params.yaml")]) == 2
    assert "sample.grpo_sise" in capsys.readouterr().err
