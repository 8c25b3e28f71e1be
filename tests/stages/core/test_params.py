"""params.yaml → frozen typed classes: strict keys and types, errors that name the key."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from stages.core.params import Params, ParamsError, load_params
from stages.core.typed_config import build, to_dict


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


def test_project_params_yaml_loads_and_round_trips(project_root: Path) -> None:
    params = load_params(project_root / "params.yaml")
    raw = yaml.safe_load((project_root / "params.yaml").read_text())
    assert params.synth.size == raw["synth"]["size"]
    # every block of params.yaml is a field of Params, and to_dict gives the same values back
    assert build(Params, to_dict(params)) == params
    assert set(raw) <= {f.name for f in dataclasses.fields(Params)}


def test_params_are_frozen(tmp_path: Path) -> None:
    params = load_params(write(tmp_path, "seed: 3\n"))
    assert params.seed == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.seed = 4  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sede: 1\n", "unknown key(s): sede"),
        ("synth:\n  sizes: large\n", "unknown key(s): synth.sizes"),
        ("synth:\n  default:\n    height: tall\n", "synth.default.height: expected an integer, got str 'tall'"),
        ("synth:\n  size: huge\n", "synth.size: expected one of ['default', 'large']"),
        ("ingest:\n  strict: 1\n", "ingest.strict: expected true/false"),
        ("seed: 1.5\n", "seed: expected an integer"),
        ("data: [1]\n", "data: expected a mapping"),
        ("data:\n  root: [a, b]\n", "data.root: expected a string"),
        ("seed: [\n", "malformed YAML"),
    ],
)
def test_bad_params_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ParamsError) as info:
        load_params(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_int_accepted_for_float(tmp_path: Path) -> None:
    params = load_params(write(tmp_path, "ingest:\n  foreground_tolerance: 0\n"))
    assert params.ingest.foreground_tolerance == 0.0
    assert isinstance(params.ingest.foreground_tolerance, float)


def test_size_preset_selects_scale(tmp_path: Path) -> None:
    params = load_params(write(tmp_path, "synth:\n  size: large\n  large:\n    height: 360\n"))
    assert params.synth.scale.height == 360
    assert params.synth.scale.width == 1280  # unspecified keys keep their defaults
