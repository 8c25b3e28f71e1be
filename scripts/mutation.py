"""Mutation testing with mutmut 3: each module of pyproject's [tool.vrsflow.mutation] against its OWN fast tests.

Per module: a scratch copy of the project (its code as it is now in this checkout), whose [tool.mutmut] mutates
only that module's files and selects only its test files; `mutmut run` with one worker; the per-mutant statuses
from `mutmut results --all true`. The figures are merged into bench/results/mutation.json (a module run again
replaces its own entry). Usage: scripts/mutation.sh [MODULE ...] (default: every module, in table order).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COPY = ["stages", "schemas", "flows", "tests", "pyproject.toml"]
IGNORE = shutil.ignore_patterns("__pycache__", ".hypothesis", ".pytest_cache", "mutants", "out")
STATUS_LINE = re.compile(r"^\s+(\S+): (.+)$")


def load_table(pyproject: Path) -> tuple[dict, dict]:
    """([tool.mutmut], [tool.vrsflow.mutation]) of `pyproject`; one clear line when a module entry is wrong."""
    data = tomllib.loads(pyproject.read_text())
    base = data["tool"]["mutmut"]
    modules = data["tool"]["vrsflow"]["mutation"]
    for name, entry in modules.items():
        for key in ("mutate", "tests"):
            if not isinstance(entry.get(key), list) or not entry[key]:
                sys.exit(f"pyproject.toml: [tool.vrsflow.mutation.{name}] needs a non-empty list `{key}`")
        for test in entry["tests"]:
            if not (ROOT / test).exists():
                sys.exit(f"pyproject.toml: [tool.vrsflow.mutation.{name}] tests: {test} does not exist")
    return base, modules


def toml_section(table: dict) -> str:
    """A [tool.mutmut] table as TOML (strings, numbers, booleans and lists of strings: JSON spells them alike)."""
    return "[tool.mutmut]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in table.items()) + "\n"


def scratch_copy(workdir: Path, base: dict, entry: dict) -> None:
    """The project copied to `workdir`, its [tool.mutmut] narrowed to the module's files and tests."""
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    for name in COPY + list(base.get("also_copy", [])):
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, workdir / name, ignore=IGNORE)
        elif src.exists():
            shutil.copy2(src, workdir / name)
    text = (workdir / "pyproject.toml").read_text()
    start = text.index("[tool.mutmut]\n")
    end = text.find("\n[", start + 1)
    deselect = [arg for test in entry.get("deselect", []) for arg in ("--deselect", test)]
    table = {**base, "only_mutate": entry["mutate"], "pytest_add_cli_args_test_selection": entry["tests"],
             "pytest_add_cli_args": [*base.get("pytest_add_cli_args", []), *deselect]}
    (workdir / "pyproject.toml").write_text(text[:start] + toml_section(table) + (text[end + 1:] if end >= 0 else ""))


def run_module(name: str, entry: dict, base: dict, workroot: Path) -> dict:
    """Mutate one module in its scratch copy and count the outcomes."""
    workdir = workroot / name
    scratch_copy(workdir, base, entry)
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    mutmut = [sys.executable, "-m", "mutmut"]
    load = os.getloadavg()[0]
    start = time.monotonic()
    run = subprocess.run(["nice", "-n", "19", *mutmut, "run", "--max-children", "1"], cwd=workdir, env=env,
                         capture_output=True, text=True)
    wall = time.monotonic() - start
    (workdir / "mutmut-run.log").write_text(run.stdout + run.stderr)
    listing = subprocess.run([*mutmut, "results", "--all", "true"], cwd=workdir, env=env, capture_output=True,
                             text=True, check=True).stdout
    statuses = {m.group(1): m.group(2).strip() for line in listing.splitlines() if (m := STATUS_LINE.match(line))}
    if run.returncode != 0 or not statuses:
        tail = "\n".join((run.stdout + run.stderr).splitlines()[-15:])
        sys.exit(f"mutation: mutmut run for module {name} failed (exit {run.returncode}); log tail:\n{tail}")
    counts = Counter(statuses.values())
    generated = len(statuses)
    killed = counts.get("killed", 0)
    return {
        "files": entry["mutate"], "tests": entry["tests"], "deselected": entry.get("deselect", []),
        "generated": generated, "killed": killed,
        "survived": counts.get("survived", 0), "timed_out": counts.get("timeout", 0),
        "no_tests": counts.get("no tests", 0), "other": {k: v for k, v in counts.items()
                                                          if k not in ("killed", "survived", "timeout", "no tests")},
        "killed_share": round(killed / generated, 4), "target": entry.get("target"),
        "meets_target": killed / generated >= entry.get("target", 0.0),
        "wall_s": round(wall, 1), "load_at_start": round(load, 2),
        "not_killed": sorted(k for k, v in statuses.items() if v != "killed"),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="module names of [tool.vrsflow.mutation] (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "mutation.json")
    parser.add_argument("--workdir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "vrsflow-mutation")
    args = parser.parse_args(argv)
    base, modules = load_table(ROOT / "pyproject.toml")
    unknown = [m for m in args.modules if m not in modules]
    if unknown:
        sys.exit(f"mutation: unknown module(s) {unknown}; pyproject.toml [tool.vrsflow.mutation] has {list(modules)}")
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    result.update({"tool": f"mutmut {version('mutmut')}", "command": "scripts/mutation.sh [MODULE ...]",
                   "cores": os.cpu_count(), "workers": 1,
                   "note": "wall_s on a shared 2-core machine with other jobs running (load_at_start: 1-min load)"})
    result.setdefault("modules", {})
    for name in args.modules or list(modules):
        print(f"mutation: {name} …", flush=True)
        figures = run_module(name, modules[name], base, args.workdir)
        result["modules"][name] = figures
        print(f"mutation: {name}: {figures['killed']}/{figures['generated']} killed "
              f"({figures['killed_share']:.1%}), {figures['survived']} survived, {figures['timed_out']} timed out, "
              f"{figures['wall_s']} s", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
