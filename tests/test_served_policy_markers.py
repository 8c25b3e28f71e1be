"""Every params value field is on one side of the served-run policy (issue 22): `Exp[...]` / `ExpPath[...]` (a run
started from the UI may change it) or `Server[...]` / `SecretEnv` (fixed when `vrsflow serve` starts). Fields that
name environment variables, endpoints and paths are on the side their kind demands, and an env-var name must come
from the declared set wherever params are read."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stages.core.params import SECRET_ENV_PREFIXES
from stages.core.typed_config import HOW_TO_MARK, EnvName, Exp, ExpPath, leaf_fields, served_side, served_walk, unmarked
from stages.params import Params, ParamsError, apply_overrides, load_params


def test_every_params_field_is_on_one_side() -> None:
    missing = unmarked(Params)
    assert not missing, f"params field(s) {', '.join(missing)} on neither side of the served-run policy: {HOW_TO_MARK}"
    assert len(list(leaf_fields(Params))) > 150  # the walk reaches nested blocks (synth.default, grpo.verl, …)


@dataclass(frozen=True)
class _Item:
    root: ExpPath[str] = ""
    name: str = ""  # on neither side


@dataclass(frozen=True)
class _Block:
    items: Exp[tuple[_Item, ...]] = ()
    by_name: Exp[dict[str, _Item]] = field(default_factory=dict)


def test_fields_of_blocks_inside_lists_need_a_side_too() -> None:
    assert unmarked(_Block) == ["items[].name", "by_name[].name"]
    walked = [(key, side.side, side.path, value)
              for key, side, value in served_walk(dict(leaf_fields(_Block))["items"], (_Item("a/b", "x"),), "items")]
    assert walked == [("items[0].root", "experiment", True, "a/b"), ("items[0].name", "experiment", False, "x")]
    as_given = [(key, side.path) for key, side, _ in served_walk(dict(leaf_fields(_Block))["items"],
                                                                [{"name": "x", "root": "a/b"}], "items")]
    assert as_given == [("items[0].name", False), ("items[0].root", True)]  # an override's mapping: same markers


def _side(key: str) -> str:
    mark = dict(leaf_fields(Params))[key]
    side = served_side(mark)
    assert side is not None, key
    return "path" if side.path else side.side


def test_env_names_endpoints_and_launchers_are_the_servers() -> None:
    fields = dict(leaf_fields(Params))
    env_fields = [key for key in fields if key.endswith("_env")]
    assert env_fields, "no *_env field found"
    for key in env_fields:  # every field naming an environment variable is server-side and prefix-checked
        assert _side(key) == "server", key
        assert any(isinstance(m, EnvName) for m in getattr(fields[key], "__metadata__", ())), f"{key}: use SecretEnv"
    for key in [k for k in fields if k.rsplit(".", 1)[-1] in {"base_url", "url", "dask_address"}]:
        assert _side(key) == "server", key
    for key in ("teacher.backend", "difficulty.backend", "sft.processes", "grpo.processes", "grpo.engine",
                "runner.kind", "sft.accelerate_config"):
        assert _side(key) == "server", key
    for key in ("data.root", "model.path", "sam2.checkpoint", "sam2.config", "grpo.out_dir", "benchmarks.roots"):
        assert _side(key) == "path", key
    for key in ("seed", "sample.grpo_size", "grpo.learning_rate", "reward.weights.format", "sample.grpo_tasks",
                "synth.default.width"):
        assert _side(key) == "experiment", key


def test_markers_do_not_change_validation(project_root: Path) -> None:
    params = load_params(project_root / "params.yaml")
    assert params.teacher.api_key_env.startswith(SECRET_ENV_PREFIXES)
    _, typed = apply_overrides({}, {"sample.grpo_size": "32", "data.root": "data/raw/other"})
    assert typed == {"sample.grpo_size": 32, "data.root": "data/raw/other"}


@pytest.mark.parametrize("name", ["PREFECT_API_AUTH_STRING", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "vrsflow_key",
                                  "VRSFLOW", "", "VRSFLOW_KEY-2"])
def test_env_var_names_outside_the_declared_set_are_refused_everywhere(tmp_path: Path, name: str) -> None:
    for key in ("teacher.api_key_env", "remote.url_env"):
        expected = f"{key}: must name an environment variable VRSFLOW_* (upper case), got {name!r}"
        with pytest.raises(ParamsError) as err:  # -S and served overrides
            apply_overrides({}, {key: name})
        assert str(err.value).startswith(expected) and "\n" not in str(err.value)
        block, field = key.split(".")
        path = tmp_path / "params.yaml"
        path.write_text(f"{block}:\n  {field}: '{name}'\n")
        with pytest.raises(ParamsError, match=f"params.yaml: {key}: must name an environment variable VRSFLOW_"):
            load_params(path)  # params.yaml
    _, typed = apply_overrides({}, {"teacher.api_key_env": "VRSFLOW_OTHER_KEY"})
    assert typed == {"teacher.api_key_env": "VRSFLOW_OTHER_KEY"}
