"""dvc.yaml lists, for every stage, the code the stage runs: editing any module a stage imports (at any depth,
also imports inside functions) must make DVC rerun it. Read statically from the sources, not from our own
bookkeeping."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
OUR_PACKAGES = ("stages", "schemas", "flows")


def _module_file(name: str) -> Path | None:
    path = ROOT.joinpath(*name.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return None


def _imports(file: Path) -> set[str]:
    """Every module of ours that `file` imports, anywhere in it (`from a.b import c` may name a module c)."""
    package = ".".join(file.relative_to(ROOT).with_suffix("").parts)
    if file.name == "__init__.py":
        package = package.rsplit(".", 1)[0] + "._"
    found = set()
    for node in ast.walk(ast.parse(file.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: -node.level]
                base = ".".join([*parts, base] if base else parts)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] in OUR_PACKAGES}


def _closure(start: Path) -> set[Path]:
    seen, todo = set(), [start]
    while todo:
        file = todo.pop()
        if file in seen:
            continue
        seen.add(file)
        for name in _imports(file):
            parts = name.split(".")
            for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__ too
                module = _module_file(".".join(parts[:i]))
                if module is not None:
                    todo.append(module)
    return seen


def _docstring_only(file: Path) -> bool:
    """A package `__init__` holding only its docstring runs no code: editing it changes no stage's result."""
    body = ast.parse(file.read_text()).body
    return all(isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in body)


def _stages() -> list[tuple[str, str, list[str]]]:
    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    rows = []
    for name, stage in spec.items():
        body = stage.get("do", stage)
        command = body["cmd"].split()
        if command[:2] != ["vrsflow", "stage"]:
            continue
        deps = [d if isinstance(d, str) else next(iter(d)) for d in body.get("deps", [])]
        rows.append((name, command[2], deps))
    return rows


@pytest.mark.parametrize(("stage", "flow", "deps"), _stages(), ids=[s[0] for s in _stages()])
def test_stage_deps_cover_the_code_it_imports(stage: str, flow: str, deps: list[str]) -> None:
    files = _closure(ROOT / "flows" / f"{flow}.py")
    code = sorted(f.relative_to(ROOT).as_posix() for f in files
                  if f.relative_to(ROOT).parts[0] in ("stages", "schemas") and not _docstring_only(f))
    missing = [f for f in code if not any(f == d or f.startswith(d.rstrip("/") + "/") for d in deps)]
    assert not missing, f"dvc.yaml stage '{stage}' imports code it does not depend on: {missing}"
