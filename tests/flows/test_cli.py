"""The `vrsflow` command line: profiles become checked `dvc exp run -S` arguments; `vrsflow check`, every
stage and the dvc.yaml check stage refuse bad params with one line naming the key, before damage."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from flows.cli import main
from stages.params import ParamsError
from tests.pipeline_repo import dvc, env_with_venv, make_repo, sh


def test_paper_profile_prints_checked_overrides(project_root: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project_root)
    assert main(["profile", "veason-r1"]) == 0
    out = capsys.readouterr().out
    assert "-S sample.grpo_size=10000" in out and "-S keyframes.train_size=560" in out


def test_profile_with_unknown_key_is_refused(tmp_path: Path, project_root: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.yaml").write_text("sample.grpo_sise: 3\n")
    assert main(["profile", "bad", "--dir", str(tmp_path), "--params", str(project_root / "params.yaml")]) == 2
    assert "sample.grpo_sise" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sampel:\n  grpo_size: 8\n", "sampel: unknown key (did you mean 'sample'?)"),
        ("grpo:\n  lerning_rate: 0.1\n", "grpo.lerning_rate: unknown key (did you mean 'grpo.learning_rate'?)"),
        ("sft:\n  learning_rate: 0\n", "sft.learning_rate: must be > 0, got 0"),
        ("keyframes:\n  n_frames: 0\n", "keyframes.n_frames: must be ≥ 1, got 0"),
    ],
)
def test_check_prints_one_line_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                              message: str) -> None:
    path = tmp_path / "params.yaml"
    path.write_text(text)
    assert main(["check", "--params", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {path}: {message}\n" and captured.out == ""
    assert main(["stage", "sample", "--params", str(path)]) == 2  # the first thing a stage does
    assert capsys.readouterr().err == f"error: {path}: {message}\n"
    with pytest.raises(ParamsError, match="unknown key|must be"):  # --debug: the exception with its traceback
        main(["--debug", "check", "--params", str(path)])


def test_check_overrides_and_stamp(tmp_path: Path, project_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = str(project_root / "params.yaml")
    stamp = tmp_path / "check" / "params.ok"
    assert main(["check", "--params", params, "-S", "sample.grpo_size=32", "--stamp", str(stamp)]) == 0
    assert capsys.readouterr().out == f"{params}: ok\n"
    first = stamp.read_bytes()
    assert main(["check", "--params", params, "-S", "sample.grpo_size=8", "--stamp", str(stamp)]) == 0
    assert stamp.read_bytes() == first  # the same bytes for any valid params: nothing downstream reruns
    assert main(["check", "--params", params, "-S", "sample.grpo_size=abc"]) == 2
    assert capsys.readouterr().err == f"error: {params}: sample.grpo_size: expected an integer, got str 'abc'\n"


def test_unknown_stage_suggests_the_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stage", "sampel"]) == 2
    assert capsys.readouterr().err == "error: unknown stage 'sampel' (did you mean 'sample'?)\n"


def test_check_stage_runs_before_dvc_deletes_outputs(tmp_path: Path, project_root: Path) -> None:
    """A params typo stops `dvc repro` at the check stage: the stage's committed outputs survive, and the
    message is printed once, without a traceback (today's DVC deletes a stage's outs before its command)."""
    repo = make_repo(project_root, tmp_path / "repo")
    fake_outputs = {"data/raw/synth/x": "x", "metrics/synth.json": "{}", "data/index/x": "x",
                    "metrics/ingest.json": "{}", "data/sample/pools.parquet": "kept", "metrics/sample.json": "{}"}
    for name, text in fake_outputs.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    sh([sys.executable, "-m", "flows.cli", "check", "--stamp", "data/check/params.ok"], repo)
    dvc(repo, "commit", "-f", "check", "synth", "ingest", "sample")  # as if reproduced: sample is up to date
    good = (repo / "params.yaml").read_text()
    grpo = good.index("\ngrpo:")
    typos = [good.replace("\nsample:\n", "\nsampel:\n", 1),
             good[:grpo] + good[grpo:].replace("\n  learning_rate:", "\n  lerning_rate:", 1)]
    messages = ["sampel: unknown key (did you mean 'sample'?)", "grpo.lerning_rate: unknown key (did you mean "
                "'grpo.learning_rate'?)"]
    for typo, message in zip(typos, messages, strict=True):
        assert typo != good
        (repo / "params.yaml").write_text(typo)
        proc = subprocess.run([sys.executable, "-m", "dvc", "repro", "sample"], cwd=repo, env=env_with_venv(),
                              capture_output=True, text=True, timeout=300)
        output = proc.stdout + proc.stderr
        assert proc.returncode != 0
        assert output.count(message) == 1 and "Traceback" not in output, output
        assert (repo / "data/sample/pools.parquet").read_text() == "kept"


def test_stages_send_no_prefect_heartbeats_unless_the_user_asks(monkeypatch) -> None:
    """Prefect waits up to 1 s per run for its heartbeat thread; stages turn heartbeats off unless the
    user set their frequency (then Prefect's setting stands)."""
    from prefect.settings import get_current_settings

    from flows.cli import HEARTBEAT_SETTINGS, _no_heartbeats_unless_asked

    for name in HEARTBEAT_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    assert get_current_settings().flows.heartbeat_frequency == 180  # Prefect's default
    with _no_heartbeats_unless_asked():
        assert get_current_settings().flows.heartbeat_frequency is None
    monkeypatch.setenv("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "60")
    with _no_heartbeats_unless_asked():
        assert get_current_settings().flows.heartbeat_frequency is not None  # the user's choice stands
