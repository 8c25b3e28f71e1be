"""params.yaml → frozen typed classes: strict keys, types, ranges and rules; one-line errors that name the key."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from stages.core.typed_config import build, to_dict
from stages.params import Params, ParamsError, apply_overrides, load_params, read_params_file


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
        ("sede: 1\n", "sede: unknown key (did you mean 'seed'?)"),
        ("sampel:\n  grpo_size: 8\n", "sampel: unknown key (did you mean 'sample'?)"),
        ("grpo:\n  lerning_rate: 0.1\n", "grpo.lerning_rate: unknown key (did you mean 'grpo.learning_rate'?)"),
        ("synth:\n  zzz: large\n", "synth.zzz: unknown key (known here: default, large, "),
        ("sft:\n  learning_rate: 0\n", "sft.learning_rate: must be > 0, got 0"),
        ("keyframes:\n  n_frames: 0\n", "keyframes.n_frames: must be ≥ 1, got 0"),
        ("grpo:\n  num_generations: 1\n", "grpo.num_generations: must be ≥ 2, got 1"),
        ("grpo:\n  top_p: 1.5\n", "grpo.top_p: must be ≤ 1, got 1.5"),
        ("sft:\n  learning_rate: .nan\n", "sft.learning_rate: expected a finite number, got nan"),
        ("cot:\n  pools: []\n", "cot.pools: must be non-empty"),
        ("cot:\n  pools: [sft, test]\n", "cot.pools[1]: expected one of ['sft', 'grpo', 'eval'], got str 'test'"),
        ("synth:\n  default:\n    min_frames: 20\n", "synth.default.min_frames: must be ≤ max_frames (14), got 20"),
        ("difficulty:\n  easy_below: 7\n", "difficulty.easy_below: must be ≤ hard_from (6.5), got 7"),
        ("pretrain_sam2:\n  min_objects: 6\n", "pretrain_sam2.min_objects: must be ≤ max_objects (4), got 6"),
        ("pretrain_sam2:\n  max_objects: 1000000\n", "pretrain_sam2.max_objects: must be ≤ 16, got 1000000"),
        ("pretrain_sam2:\n  iou_loss_weight: 1e9\n", "pretrain_sam2.iou_loss_weight: must be ≤ 100, got 1e+09"),
        ("tiny_models:\n  num_heads: 3\n", "tiny_models.hidden_size: must be a multiple of num_heads (3), got 256"),
        ("reward:\n  components: [format, formt]\n", "reward.components: unknown component 'formt'"),
        ("synth:\n  default:\n    height: tall\n", "synth.default.height: expected an integer, got str 'tall'"),
        ("synth:\n  size: huge\n", "synth.size: expected one of ['default', 'large', 'hostile']"),
        ("ingest:\n  strict: 1\n", "ingest.strict: expected true/false"),
        ("benchmarks:\n  reference: yes please\n", "benchmarks.reference: expected true/false"),
        ("benchmarks:\n  models:\n    ground_truth: models/sft/merged\n",
         "benchmarks.models: 'ground_truth' is the label of a reference row (benchmarks.reference): rename it"),
        ("benchmarks:\n  models:\n    empty_answer: models/sft/merged\n",
         "benchmarks.models: 'empty_answer' is the label of a reference row (benchmarks.reference): rename it"),
        ("seed: 1.5\n", "seed: expected an integer"),
        ("data: [1]\n", "data: expected a mapping"),
        ("data:\n  root: [a, b]\n", "data.root: expected a string"),
        ("seed: [\n", "malformed YAML at line 2, column 1"),
    ],
)
def test_bad_params_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ParamsError) as info:
        load_params(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)  # one line


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"sample.grpo_size": "abc"}, "sample.grpo_size: expected an integer, got str 'abc'"),
        ({"sampel.grpo_size": "8"}, "sampel: unknown key (did you mean 'sample'?)"),
        ({"grpo.lerning_rate": "0.1"}, "grpo.lerning_rate: unknown key (did you mean 'grpo.learning_rate'?)"),
        ({"sft.learning_rate": "0"}, "sft.learning_rate: must be > 0, got 0"),
        ({"keyframes.n_frames": 0}, "keyframes.n_frames: must be ≥ 1, got 0"),
        ({"../../x": "1"}, "'../../x': not a params key"),
        ({"+sample.new": "1"}, "'+sample.new': not a params key"),
        ({"params.yaml:seed": "1"}, "'params.yaml:seed': not a params key"),
        ({"sft": "1"}, "sft: is a block of params"),
        ({"seed.x": "1"}, "seed.x: seed is a single value"),
        ({"data.root": "x; touch owned"}, "data.root: refusing the character(s) ';'"),
        ({"data.root": "$(whoami)"}, "data.root: refusing the character(s) '$'"),
        ({"cot.pools": ["sft", "a`b`"]}, "cot.pools: refusing the character(s) '`'"),
        ({"synth.default.min_frames": "99"}, "synth.default.min_frames: must be ≤ max_frames (14), got 99"),
    ],
)
def test_bad_overrides_are_refused(project_root: Path, overrides: dict, message: str) -> None:
    with pytest.raises(ParamsError) as info:
        apply_overrides(read_params_file(project_root / "params.yaml"), overrides)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_overrides_read_as_dvc_reads_them(project_root: Path) -> None:
    params, typed = apply_overrides(read_params_file(project_root / "params.yaml"), {
        "sample.grpo_size": "32", "grpo.learning_rate": "1e-4", "ingest.strict": "false",
        "cot.pools": "[sft, grpo]", "data.root": "123", "teacher.base_url": "http://127.0.0.1:8000/v1",
    })
    assert typed == {"sample.grpo_size": 32, "grpo.learning_rate": 1e-4, "ingest.strict": False,
                     "cot.pools": ["sft", "grpo"], "data.root": "123", "teacher.base_url": "http://127.0.0.1:8000/v1"}
    assert params.sample.grpo_size == 32 and params.cot.pools == ("sft", "grpo") and params.data.root == "123"
    assert params.keyframes == load_params(project_root / "params.yaml").keyframes  # the rest as in the file


def test_int_accepted_for_float(tmp_path: Path) -> None:
    params = load_params(write(tmp_path, "ingest:\n  foreground_tolerance: 0\n"))
    assert params.ingest.foreground_tolerance == 0.0
    assert isinstance(params.ingest.foreground_tolerance, float)


def test_size_preset_selects_scale(tmp_path: Path) -> None:
    params = load_params(write(tmp_path, "synth:\n  size: large\n  large:\n    height: 360\n"))
    assert params.synth.scale.height == 360
    assert params.synth.scale.width == 1280  # unspecified keys keep their defaults


def test_floats_as_dvc_writes_them(tmp_path: Path) -> None:
    # `dvc exp run -S grpo.learning_rate=1e-5` writes `1e-05` (YAML 1.2); PyYAML alone would read a string
    params = load_params(write(tmp_path, "grpo:\n  learning_rate: 1e-05\n  kl_coef: 5.0e-3\n"))
    assert params.grpo.learning_rate == 1e-5 and params.grpo.kl_coef == 5e-3
    with pytest.raises(ParamsError, match="grpo.learning_rate: expected a number, got str '1e-05'"):
        load_params(write(tmp_path, "grpo:\n  learning_rate: '1e-05'\n"))  # quoted text stays text


@given(st.lists(st.tuples(st.text(alphabet="abcz._", min_size=1, max_size=6), st.text(max_size=8)), max_size=6))
def test_cli_overrides_split_at_the_first_equals_and_the_last_repeat_wins(pairs) -> None:
    from stages.params import cli_overrides

    expected: dict[str, str] = {}
    for key, value in pairs:  # the dict built from the pairs themselves, not by splitting strings
        expected[key] = value
    assert cli_overrides([f"{key}={value}" for key, value in pairs]) == expected


def test_cli_overrides_name_an_item_without_equals_with_the_callers_error() -> None:
    from stages.params import cli_overrides

    class UsageProblem(Exception):
        pass

    with pytest.raises(UsageProblem, match=r"-S 'sft\.epochs': expected key=value"):
        cli_overrides(["sft.lr=1", "sft.epochs"], UsageProblem)
