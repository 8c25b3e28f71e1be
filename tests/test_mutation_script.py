"""scripts/mutation.py's bookkeeping (issue 30): the narrowed mutmut config, every module in the JSON, --collect's
time accounting. mutmut itself is not run here (scripts/mutation.sh is its own command)."""

from __future__ import annotations

import importlib.util
import json
import os
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mutation():
    spec = importlib.util.spec_from_file_location("mutation_script", ROOT / "scripts" / "mutation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_write_config_narrows_tool_mutmut_to_one_module(tmp_path, mutation):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.mutmut]\nonly_mutate = ["a.py", "b.py"]\npytest_add_cli_args = ["-q"]\n'
        'timeout_constant = 10.0\n\n[tool.vrsflow.mutation.m]\nmutate = ["b.py"]\ntests = ["tests/t.py"]\n')
    base = {"only_mutate": ["a.py", "b.py"], "pytest_add_cli_args": ["-q"], "timeout_constant": 10.0}
    entry = {"mutate": ["b.py"], "tests": ["tests/t.py"], "deselect": ["tests/t.py::slow"]}
    for _ in range(2):  # rewriting a narrowed copy (--resume) gives the same table
        mutation.write_config(tmp_path, base, entry)
        data = tomllib.loads((tmp_path / "pyproject.toml").read_text())
        assert data["tool"]["mutmut"] == {"only_mutate": ["b.py"], "pytest_add_cli_args_test_selection": ["tests/t.py"],
                                          "pytest_add_cli_args": ["-q", "--deselect", "tests/t.py::slow"],
                                          "timeout_constant": 10.0}
        assert data["project"] == {"name": "x"} and data["tool"]["vrsflow"]["mutation"]["m"]["mutate"] == ["b.py"]


def test_every_module_of_the_table_is_in_the_json(tmp_path, mutation):
    modules = {"done": {"mutate": ["a.py"], "tests": ["t.py"], "target": 0.9},
               "later": {"mutate": ["b.py"], "tests": ["u.py"], "target": 0.85}}
    result = {"modules": {"done": {"generated": 10, "killed": 9, "complete": True}}}
    out = tmp_path / "mutation.json"
    mutation.write_result(out, result, modules)
    written = json.loads(out.read_text())["modules"]
    assert written["done"] == {"generated": 10, "killed": 9, "complete": True}
    assert written["later"] == {"files": ["b.py"], "tests": ["u.py"], "target": 0.85, "run": False,
                                "complete": False, "meets_target": False}


def test_collect_adds_the_interrupted_runs_wall_time_once(tmp_path, mutation, monkeypatch):
    work = tmp_path / "work" / "m"
    (work / "mutants").mkdir(parents=True)
    (work / "pyproject.toml").write_text("")
    meta = work / "mutants" / "a.py.meta"
    meta.write_text("{}")
    os.utime(work / "pyproject.toml", (1000.0, 1000.0))  # the run started
    os.utime(meta, (1300.0, 1300.0))  # its last result
    counts = {"generated": 4, "killed": 3, "survived": 1, "timed_out": 0, "not_checked": 0, "killed_share": 0.75}
    monkeypatch.setattr(mutation, "count_results", lambda name, entry, workdir: dict(counts))
    monkeypatch.setattr(mutation, "load_table", lambda path: ({}, {"m": {"mutate": ["a.py"], "tests": ["t.py"]}}))
    monkeypatch.setattr(mutation, "git_commit", lambda: {"sha": "0" * 40, "dirty": False})
    out = tmp_path / "mutation.json"
    out.write_text(json.dumps({"modules": {"m": {"wall_s": 50.0, "cpu_s": 20.0, "complete": False}}}))
    args = ["m", "--collect", "--out", str(out), "--workdir", str(tmp_path / "work"), "--add-cpu-s", "7.5"]
    for _ in range(2):  # collecting twice counts the run once
        mutation.main(args)
        m = json.loads(out.read_text())["modules"]["m"]
        assert (m["wall_s"], m["cpu_s"], m["complete"], m["killed"]) == (350.0, 27.5, True, 3)
