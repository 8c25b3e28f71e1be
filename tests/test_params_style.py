"""params.yaml is kept in the style DVC's own writer produces (`dvc exp run -S`, `dvc exp apply`): a one-value
change is a one-line diff, and comments survive. Checked with DVC's params writer itself."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest
import yaml
from dvc.utils.hydra import apply_overrides


def _diff(before: str, after: str) -> list[str]:
    return [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


@pytest.fixture()
def params_copy(tmp_path: Path, project_root: Path) -> Path:
    target = tmp_path / "params.yaml"
    shutil.copy(project_root / "params.yaml", target)
    return target


def test_dvc_writer_leaves_params_yaml_unchanged(params_copy: Path) -> None:
    before = params_copy.read_text()
    apply_overrides(str(params_copy), ["seed=0"])  # a no-op -S: DVC re-serialises the whole file
    assert _diff(before, params_copy.read_text()) == []


@pytest.mark.parametrize(("override", "key", "value"), [
    ("sample.grpo_size=32", "grpo_size", "32"),
    ("grpo.learning_rate=2e-3", "learning_rate", "0.002"),
    ("runner.dask_address=tcp://h:8786", "dask_address", "tcp://h:8786"),
    ("synth.large.width=640", "width", "640"),
])
def test_one_value_is_one_line(params_copy: Path, override: str, key: str, value: str) -> None:
    before = params_copy.read_text()
    apply_overrides(str(params_copy), [override])
    diff = _diff(before, params_copy.read_text())
    assert len(diff) == 2, diff
    removed, added = diff
    assert removed.startswith("-") and added.startswith("+")
    assert added[1:].split("#")[0].split() == [f"{key}:", value]
    assert added.partition("#")[1:] == removed.partition("#")[1:]  # a comment stays


def test_list_item_added_is_one_line(params_copy: Path) -> None:
    before = params_copy.read_text()
    apply_overrides(str(params_copy), ["cot.pools=[sft,grpo]"])
    assert _diff(before, params_copy.read_text()) == ["+  - grpo"]
    assert yaml.safe_load(params_copy.read_text())["cot"]["pools"] == ["sft", "grpo"]
