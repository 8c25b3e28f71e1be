"""Imports run one way: schemas ← stages.core ← the stage packages ← flows ← bench, scripts and tests.

The project's code is read with `ast` (every import, including those inside functions, which is where the heavy
ones live) and each module is mapped to its unit: `schemas`, `stages.core`, one unit per stage package
(`stages.sam2_wrapper`, `stages.evaluate`, …), `flows`, `bench`, `scripts`, `tests`. A unit may import only units of a
lower layer or, among the stage packages, another stage package, as long as the stage packages' imports form no
cycle. So a shared piece never reaches up into a stage, a stage never reaches into the orchestration, and nothing
released imports the benchmarks or the tests.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("schemas", "stages", "flows", "bench", "scripts", "tests")
# a unit's layer; it may import its own layer's units only where ALLOWED_SIDEWAYS says so
LAYER = {"schemas": 0, "stages.core": 1, "stages": 2, "flows": 3, "bench": 4, "scripts": 4, "tests": 4}
ALLOWED_SIDEWAYS = {"stages", "bench→tests", "tests→bench"}


def unit_of(module: str) -> str:
    """`stages.evaluate.metrics` → `stages.evaluate`; `flows.cli` → `flows`; `stages` itself → `stages`."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "stages" and len(parts) > 1 else parts[0]


def layer_of(unit: str) -> int:
    return LAYER.get(unit, LAYER["stages"] if unit.startswith("stages.") else -1)


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str, root: Path) -> bool:
    base = root.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imported_modules(path: Path, root: Path) -> set[str]:
    """Every project module `path` imports, anywhere in the file (relative imports resolved; `from pkg import
    mod` names the submodule when `pkg.mod` is one)."""
    this = module_name(path, root)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                found.add(sub if is_module(sub, root) else module)
    return {name for name in found if name.split(".")[0] in PACKAGES}


def module_graph(root: Path) -> dict[str, set[str]]:
    """Module → the other project modules it imports."""
    return {module_name(path, root): imported_modules(path, root) - {module_name(path, root)}
            for package in PACKAGES for path in sorted((root / package).rglob("*.py"))}


def unit_graph(modules: dict[str, set[str]]) -> dict[str, set[str]]:
    """Unit → the other units its modules import."""
    graph: dict[str, set[str]] = {}
    for module, imported in modules.items():
        source = unit_of(module)
        graph.setdefault(source, set()).update(target for target in map(unit_of, imported) if target != source)
    return graph


def wrong_way(graph: dict[str, set[str]]) -> list[str]:
    """Each import that goes up a layer, or sideways where that is not allowed, as 'source → target'."""
    found = []
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            up, down = layer_of(source), layer_of(target)
            sideways = up == down and ("stages" if source.startswith("stages.") else f"{source}→{target}")
            if down > up or down < 0 or (sideways and sideways not in ALLOWED_SIDEWAYS):
                found.append(f"{source} → {target}")
    return found


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle among the units (as a path that comes back to its start), or []."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(unit: str) -> list[str]:
        state[unit] = "open"
        path.append(unit)
        for target in sorted(graph.get(unit, ())):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state and (found := visit(target)):
                return found
        state[unit] = "done"
        path.pop()
        return []

    for unit in sorted(graph):
        if unit not in state and (found := visit(unit)):
            return found
    return []


def stage_packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The unit graph among the stage packages alone."""
    return {unit: {t for t in targets if t.startswith("stages.")} for unit, targets in graph.items()
            if unit.startswith("stages.")}


def test_the_projects_imports_run_one_way() -> None:
    modules = module_graph(ROOT)
    graph = unit_graph(modules)
    assert {"schemas", "stages.core", "stages.sam2_wrapper", "stages.evaluate", "flows", "bench"} <= set(graph)
    # read at all: a shared piece, a stage package, a lazy import inside a function (the flows import stages there)
    assert {"stages.core", "stages.sam2_wrapper"} <= graph["stages.evaluate"] and "stages.sft" in graph["flows"]
    assert wrong_way(graph) == []
    # no module imports itself through others, and the stage packages' imports form no cycle either (the benchmarks
    # and the tests may import each other's modules: a test checks a benchmark, a benchmark builds a test's repo)
    assert cycle(modules) == []
    assert cycle(stage_packages(graph)) == []


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize(("files", "wrong", "loop", "module_loop"), [
    # a shared piece that reaches up into a stage, inside a function
    ({"stages/core/io.py": "def f():\n    from stages.sam2_wrapper import masks\n", "stages/sam2_wrapper/masks.py": ""},
     ["stages.core → stages.sam2_wrapper"], [], []),
    # a stage that imports the orchestration, relatively spelled from a flow's side
    ({"stages/sft/__init__.py": "import flows.cli\n", "flows/cli.py": "from . import common\n",
      "flows/common.py": ""}, ["stages.sft → flows"], [], []),
    # released code that imports the tests
    ({"flows/cli.py": "from tests.pipeline_repo import make_repo\n", "tests/pipeline_repo.py": ""},
     ["flows → tests"], [], []),
    # two stages that import each other (sideways is allowed, a cycle is not), through modules that do not
    ({"stages/a/__init__.py": "from stages.b import x\n", "stages/b/__init__.py": "", "stages/b/x.py": "",
      "stages/b/y.py": "from stages import a\n"}, [], ["stages.a", "stages.b", "stages.a"], []),
    # two modules of one package that import each other
    ({"flows/cli.py": "def main():\n    from flows.common import run\n", "flows/common.py": "import flows.cli\n"},
     [], [], ["flows.cli", "flows.common", "flows.cli"]),
])
def test_an_import_the_wrong_way_or_in_a_circle_is_found(tmp_path: Path, files: dict[str, str], wrong: list[str],
                                                         loop: list[str], module_loop: list[str]) -> None:
    modules = module_graph(_tree(tmp_path, files))
    graph = unit_graph(modules)
    assert wrong_way(graph) == wrong
    assert cycle(stage_packages(graph)) == loop
    assert cycle(modules) == module_loop
