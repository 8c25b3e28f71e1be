"""The served API's experiment-name rule, pinned for the mutation run (scripts/mutation.sh serve_request,
docs/testing.md): a plain ref name — ASCII letters, digits, '.', '_', '-', starting with a letter or digit, at most
100 characters, no '..', not ending in '.' or '.lock' — and every name it accepts is a valid git ref name."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from flows.serve_request import RequestRefused, _check_name, check_request

RULE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def allowed(name: str) -> bool:
    return bool(RULE.fullmatch(name)) and ".." not in name and not name.endswith((".", ".lock"))


@settings(max_examples=80, deadline=None)
@given(st.text(alphabet="ab9Z._-/ é~^:", max_size=12))
@example("a" * 100)
@example("a" * 101)
@example("x")
@example("7")
@example("-x")
@example("_x")
@example(".x")
@example("a..b")
@example("a.")
@example("a.lock")
@example("a.locks")
@example("a/b")
@example("é")
@example("")
def test_name_rule(name):
    if allowed(name):
        _check_name(name)
    else:
        with pytest.raises(RequestRefused):
            _check_name(name)


@pytest.mark.parametrize("name", ["a" * 100, "exp-1.2_b", "0", "A.lockx"])
def test_accepted_names_are_git_ref_names(name):
    _check_name(name)
    assert subprocess.run(["git", "check-ref-format", f"refs/exps/aa/bb/{name}"]).returncode == 0


def test_refusal_message_is_one_line_naming_the_rule():
    message = ("experiment name '-n': use letters, digits, '.', '_' and '-' (starting with a letter or digit, "
               "at most 100)")
    with pytest.raises(RequestRefused, match=f"^{re.escape(message)}$"):
        _check_name("-n")
    with pytest.raises(RequestRefused, match=f"^experiment name '{'y' * 80}': use"):
        _check_name("y" * 101)  # the name is cut to 80 characters in the message
    with pytest.raises(RequestRefused):
        _check_name(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(("value", "text"), [
    (None, "null"), (True, "true"), (False, "false"), (3, "3"), (0.5, "0.5"), ("a b", "'a b'"),
    ([1, "x", None, True, False], "[1,'x',null,true,false]"), ((2, 0.25), "[2,0.25]"),
])
def test_dvc_value_spells_each_value_as_hydra_reads_it_back(value, text):
    """`dvc exp run -S` parses overrides with Hydra's grammar: the text is the canonical spelling, and Hydra's own
    parser reads the value back."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from flows.serve_request import dvc_value

    assert dvc_value(value) == text
    parsed = OverridesParser.create().parse_override(f"k={text}").value()
    assert parsed == (list(value) if isinstance(value, tuple) else value)
    with pytest.raises(RequestRefused, match="^cannot pass a dict to dvc$"):
        dvc_value({"a": 1})


def test_present_walks_the_dotted_key_through_mappings_only():
    from flows.serve_request import _present

    raw = {"a": {"b": {"c": 1}, "l": [1, 2]}, "x": None}
    assert [_present(raw, k) for k in ("a", "a.b", "a.b.c", "x")] == [True, True, True, True]
    assert [_present(raw, k) for k in ("b", "a.c", "a.b.c.d", "a.l.0", "x.y", "a.b.d")] == [False] * 6


def test_an_absolute_path_into_the_project_is_named_so_even_through_a_symlink_out(tmp_path):
    from flows.serve_request import path_problem

    project, outside = tmp_path / "project", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    (project / "link").symlink_to(outside)
    assert path_problem(str(project / "link" / "f"), project) == (
        "is an absolute path into the project: give it relative to the project")
    assert path_problem("link/f", project).startswith("leads outside the project through a symlink")
    assert path_problem("", project) is None and path_problem("data/x", project) is None


def test_a_relative_path_through_a_symlink_into_an_allowed_root_is_allowed(tmp_path, monkeypatch):
    from flows.serve_request import path_problem

    project, outside = tmp_path / "project", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    (project / "link").symlink_to(outside)
    monkeypatch.chdir(tmp_path)  # the value is relative to the project, not to the working folder
    assert path_problem("link/f", project, [str(outside)]) is None
    assert path_problem(str(outside / "f"), project, [str(outside)]) is None
    assert path_problem("link/f", project, [str(tmp_path / "elsewhere")]).startswith("leads outside the project")


@pytest.mark.parametrize(("overrides", "kind"), [(["seed=1"], "list"), ("seed=1", "str"), (None, "NoneType")])
def test_overrides_that_are_not_a_mapping_are_refused_with_their_type(tmp_path: Path, overrides, kind: str) -> None:
    with pytest.raises(RequestRefused) as refused:
        check_request(tmp_path, overrides, None, "exp")
    assert str(refused.value) == f"overrides: expected a mapping of params keys to values, got {kind}"


def test_the_served_project_is_the_variable_s_folder_with_a_dvc_yaml(tmp_path: Path, monkeypatch) -> None:
    from flows.serve_request import SERVED_PROJECT_ENV, served_project

    monkeypatch.delenv(SERVED_PROJECT_ENV, raising=False)
    with pytest.raises(RequestRefused) as unset:
        served_project()
    assert str(unset.value) == ("no served project: start runs through `vrsflow serve` ($VRSFLOW_SERVED_PROJECT "
                                "unset)")
    monkeypatch.setenv(SERVED_PROJECT_ENV, str(tmp_path))
    with pytest.raises(RequestRefused) as bare:
        served_project()
    assert str(bare.value) == f"served project {tmp_path} has no dvc.yaml"
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    assert served_project() == tmp_path


def test_the_policy_handed_in_is_the_one_applied(tmp_path: Path, monkeypatch, project_root: Path) -> None:
    import shutil

    from flows.serve_request import SERVED_POLICY_ENV, ServedPolicy

    project, outside = tmp_path / "project", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    shutil.copy(project_root / "params.yaml", project / "params.yaml")
    # the exported policy would allow the folder outside; the one handed in (project only) does not
    monkeypatch.setenv(SERVED_POLICY_ENV, ServedPolicy(allowed_roots=(str(outside),)).to_env())
    with pytest.raises(RequestRefused) as refused:
        check_request(project, {"data.root": str(outside)}, None, "exp", ServedPolicy())
    assert str(refused.value).startswith(f"data.root: '{outside}' is outside the project")


def test_an_unknown_target_is_named_with_the_closest_stage_or_the_list(tmp_path: Path, monkeypatch,
                                                                     project_root: Path) -> None:
    import shutil

    import flows.serve_request as serve_request

    shutil.copy(project_root / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.setattr(serve_request, "stage_names", lambda project: ["evaluate", "sample", "shard"])
    with pytest.raises(RequestRefused) as far:
        check_request(tmp_path, {}, ["zzz"], "exp", serve_request.ServedPolicy())
    assert str(far.value) == "target 'zzz' is not a stage of dvc.yaml (stages: evaluate, sample, shard)"
    with pytest.raises(RequestRefused) as near:
        check_request(tmp_path, {}, ["shart"], "exp", serve_request.ServedPolicy())
    assert str(near.value) == "target 'shart' is not a stage of dvc.yaml (did you mean 'shard'?)"
    with pytest.raises(RequestRefused) as long:  # a long name is cut to its first 80 characters
        check_request(tmp_path, {}, ["q" * 100], "exp", serve_request.ServedPolicy())
    assert str(long.value).startswith(f"target {'q' * 80!r} is not a stage")
    assert check_request(tmp_path, {}, ["shard", "sample"], "exp", serve_request.ServedPolicy()).targets == (
        "shard", "sample")


def test_a_key_missing_from_params_yaml_is_added_with_a_plus(tmp_path: Path, monkeypatch, project_root: Path) -> None:
    import yaml

    import flows.serve_request as serve_request

    params = yaml.safe_load((project_root / "params.yaml").read_text())
    del params["sample"]["eval_size"]  # the schema's default applies; DVC's override must add the key
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    monkeypatch.setattr(serve_request, "stage_names", lambda project: ["sample"])
    request = check_request(tmp_path, {"sample.eval_size": 7, "sample.sft_size": 5}, None, "exp",
                            serve_request.ServedPolicy())
    assert request.set_args == ("+sample.eval_size=7", "sample.sft_size=5")
    assert (request.project, request.name, request.overrides) == (tmp_path, "exp", {"sample.eval_size": 7,
                                                                                   "sample.sft_size": 5})


def test_a_server_key_is_named_even_after_an_unknown_key(tmp_path: Path, project_root: Path) -> None:
    import shutil

    from flows.serve_request import ServedPolicy, check_overrides
    from stages.params import ParamsError

    shutil.copy(project_root / "params.yaml", tmp_path / "params.yaml")
    with pytest.raises(ParamsError) as refused:  # every key is looked at before the unknown one is named
        check_overrides(tmp_path / "params.yaml", {"nope.key": 1, "teacher.api_key_env": "X"}, ServedPolicy())
    assert str(refused.value).startswith("teacher.api_key_env: fixed by the server")


def test_only_path_fields_are_held_to_the_project(tmp_path: Path, project_root: Path) -> None:
    import shutil

    from flows.serve_request import ServedPolicy, check_overrides

    shutil.copy(project_root / "params.yaml", tmp_path / "params.yaml")
    # a text value that is not a path may look like one leaving the project
    typed = check_overrides(tmp_path / "params.yaml", {"teacher.model": "../../models/vlm"}, ServedPolicy())
    assert typed == {"teacher.model": "../../models/vlm"}
