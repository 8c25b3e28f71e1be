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
import resource
import shutil
import signal
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
MUTMUT = [sys.executable, "-m", "mutmut"]
# tests/conftest.py: no shrinking of a failing example; the fastest tests first (mutmut runs them in ./mutants); a
# Prefect test server (serve_request's tests start one per mutant) may take minutes to start at nice 19 on a busy
# machine: a slow start must not pass for a killed mutant
ENV = {"VRSFLOW_TEST_SERVER_STARTUP_S": "600", **os.environ, "PYTHONHASHSEED": "0",
       "VRSFLOW_HYPOTHESIS_PROFILE": "mutation", "VRSFLOW_TEST_ORDER": "mutmut-stats.json"}


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
    write_config(workdir, base, entry)


def write_config(workdir: Path, base: dict, entry: dict) -> None:
    """The scratch copy's [tool.mutmut]: the project's, narrowed to the module's files and tests (mutmut keeps every
    verdict a change of it cannot affect: a new timeout re-checks only the timed-out mutants)."""
    text = (workdir / "pyproject.toml").read_text()
    start = text.index("[tool.mutmut]\n")
    end = text.find("\n[", start + 1)
    deselect = [arg for test in entry.get("deselect", []) for arg in ("--deselect", test)]
    table = {**base, "only_mutate": entry["mutate"], "pytest_add_cli_args_test_selection": entry["tests"],
             "pytest_add_cli_args": [*base.get("pytest_add_cli_args", []), *deselect]}
    (workdir / "pyproject.toml").write_text(text[:start] + toml_section(table) + (text[end + 1:] if end >= 0 else ""))


def run_module(name: str, entry: dict, base: dict, workroot: Path, budget_s: float | None,
               resume: bool = False, only: list[str] | None = None) -> dict:
    """Mutate one module in its scratch copy and count the outcomes; with `budget_s`, stop mutmut after that many
    seconds and count what it checked (the rest are `not_checked`); with `resume`, go on in the existing copy
    (mutmut keeps its test statistics and every result already there): the copy's tests are brought up to date
    first (mutmut collects statistics for the new ones) and every mutant not killed so far loses its verdict, so it is
    checked again against them with the unchecked ones (with `only`: just those mutants, e.g. the survivors a new
    test was written for). The mutated source must be unchanged since the copy was made."""
    workdir = workroot / name
    if not (resume and (workdir / "mutants").is_dir()):
        scratch_copy(workdir, base, entry)
    else:
        changed = [str(p.relative_to(workdir)) for pattern in entry["mutate"] for p in sorted(workdir.glob(pattern))
                   if p.is_file() and p.read_bytes() != (ROOT / p.relative_to(workdir)).read_bytes()]
        if changed:
            sys.exit(f"mutation: {changed} changed since module {name}'s scratch copy was made; run it without "
                     "--resume")
        shutil.copytree(ROOT / "tests", workdir / "tests", ignore=IGNORE, dirs_exist_ok=True)
        write_config(workdir, base, entry)
        retest = set(count_results(name, entry, workdir)["not_killed"])
        if only:
            unknown = sorted(set(only) - retest)
            if unknown:
                sys.exit(f"mutation: --only {unknown[:3]}: not among module {name}'s mutants that were not killed")
            retest = set(only)
        for meta in (workdir / "mutants").rglob("*.meta"):  # checked again: mutmut runs what has no verdict
            data = json.loads(meta.read_text())
            data["exit_code_by_key"] = {k: None if k in retest else v for k, v in data["exit_code_by_key"].items()}
            meta.write_text(json.dumps(data, indent=4))
    load = os.getloadavg()[0]
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    with open(workdir / "mutmut-run.log", "a" if resume else "w") as log:
        (workdir / "build-cache").mkdir(exist_ok=True)  # tests/stages/test_shard.py: upstream built once
        env = {**ENV, "VRSFLOW_TEST_BUILD_CACHE": str(workdir / "build-cache")}
        proc = subprocess.Popen(["nice", "-n", "19", *MUTMUT, "run", "--max-children", "1"], cwd=workdir, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=budget_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            code = proc.wait()
    wall = time.monotonic() - start
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    figures = count_results(name, entry, workdir)
    if code != 0 and figures["not_checked"] == 0:
        tail = "\n".join((workdir / "mutmut-run.log").read_text().splitlines()[-15:])
        sys.exit(f"mutation: mutmut run for module {name} failed (exit {code}); log tail:\n{tail}")
    figures.update(wall_s=round(wall, 1), cpu_s=round(cpu, 1), load_at_start=round(load, 2),
                   complete=figures["not_checked"] == 0)
    return figures


def count_results(name: str, entry: dict, workdir: Path) -> dict:
    """Per-status counts of a module's mutants from `mutmut results --all true` in its scratch copy."""
    listing = subprocess.run(["nice", "-n", "19", *MUTMUT, "results", "--all", "true"], cwd=workdir, env=ENV,
                             capture_output=True, text=True, check=True).stdout
    statuses = {m.group(1): m.group(2).strip() for line in listing.splitlines() if (m := STATUS_LINE.match(line))}
    if not statuses:
        sys.exit(f"mutation: no mutants recorded for module {name} in {workdir} (see its mutmut-run.log)")
    counts = Counter(statuses.values())
    generated = len(statuses)
    checked = generated - counts.get("not checked", 0)
    killed = counts.get("killed", 0)
    named = ("killed", "survived", "timeout", "no tests", "not checked")
    return {
        "files": entry["mutate"], "tests": entry["tests"], "deselected": entry.get("deselect", []),
        "generated": generated, "killed": killed, "survived": counts.get("survived", 0),
        "timed_out": counts.get("timeout", 0), "no_tests": counts.get("no tests", 0),
        "not_checked": counts.get("not checked", 0), "other": {k: v for k, v in counts.items() if k not in named},
        "killed_share": round(killed / generated, 4),
        "killed_share_of_checked": round(killed / checked, 4) if checked else None,
        "target": entry.get("target"), "meets_target": killed / generated >= entry.get("target", 0.0),
        "not_killed": sorted(k for k, v in statuses.items() if v not in ("killed", "not checked")),
    }


def git_commit() -> dict:
    """The checkout's HEAD and whether its tracked files differ from it (the scratch copies take the files as they
    are)."""
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip() != ""
    return {"sha": sha or "unknown", "dirty": dirty}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="module names of [tool.vrsflow.mutation] (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "mutation.json")
    parser.add_argument("--workdir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "vrsflow-mutation")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="stop each module's mutmut run after this many seconds and record what it checked")
    parser.add_argument("--resume", action="store_true",
                        help="go on in the existing scratch copies (after --budget-s), checking what is left")
    parser.add_argument("--add-cpu-s", type=float, default=None,
                        help="with --collect: the collected run's CPU seconds, measured outside (e.g. from /proc)")
    parser.add_argument("--only", nargs="+", metavar="MUTANT", default=None,
                        help="with --resume: check again only these mutants (not every one not killed so far)")
    parser.add_argument("--collect", action="store_true",
                        help="record the results already in the scratch copies (an interrupted run), run nothing")
    args = parser.parse_args(argv)
    if args.only and (not args.resume or len(args.modules) != 1):
        sys.exit("mutation: --only goes with --resume and one MODULE")
    base, modules = load_table(ROOT / "pyproject.toml")
    unknown = [m for m in args.modules if m not in modules]
    if unknown:
        sys.exit(f"mutation: unknown module(s) {unknown}; pyproject.toml [tool.vrsflow.mutation] has {list(modules)}")
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    result.update({"tool": f"mutmut {version('mutmut')}", "command": "scripts/mutation.sh [MODULE ...]",
                   "cores": os.cpu_count(), "workers": 1,
                   "note": "wall_s on a shared 2-core machine with other jobs running at higher priority (mutmut "
                           "runs at nice 19; load_at_start: 1-min load average; cpu_s: CPU seconds mutmut used)"})
    result["machine"] = {"cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2)}
    result["commit"] = git_commit()
    result.setdefault("modules", {})
    for name in args.modules or list(modules):
        print(f"mutation: {name} …", flush=True)
        if args.collect:
            previous = result["modules"].get(name, {})
            figures = {**previous, **count_results(name, modules[name], args.workdir / name)}
            metas = [p.stat().st_mtime for p in (args.workdir / name / "mutants").rglob("*.meta")]
            figures["complete"] = figures["not_checked"] == 0
            # this run's wall: from its start (the copy's config was written then, by the first run or --resume) to
            # the last result written; added to the earlier runs' recorded time (collecting twice counts it once)
            started = (args.workdir / name / "pyproject.toml").stat().st_mtime
            again = previous.get("collected_since") == started
            before = {k: previous.get(f"{k}_before_collect" if again else k, 0.0) for k in ("wall_s", "cpu_s")}
            if metas:
                figures.update(wall_s=round(before["wall_s"] + max(metas) - started, 1),
                               cpu_s=round(before["cpu_s"] + (args.add_cpu_s or 0.0), 1), collected_since=started,
                               wall_s_before_collect=before["wall_s"], cpu_s_before_collect=before["cpu_s"])
                if args.add_cpu_s is None:
                    figures["cpu_s_note"] = "cpu_s leaves out the collected run (its CPU time was not measured)"
        else:
            previous = result["modules"].get(name, {}) if args.resume else {}
            figures = run_module(name, modules[name], base, args.workdir, args.budget_s, args.resume, args.only)
            for key in ("wall_s", "cpu_s"):  # a resumed module adds its earlier run's time
                figures[key] = round(figures[key] + previous.get(key, 0.0), 1)
        # the code the module's run mutated: its first run's checkout (a resumed run goes on in that copy)
        figures["commit"] = (result["modules"].get(name, {}).get("commit", result["commit"])
                             if args.collect or args.resume else result["commit"])
        result["modules"][name] = figures
        print(f"mutation: {name}: {figures['killed']}/{figures['generated']} killed "
              f"({figures['killed_share']:.1%}), {figures['survived']} survived, {figures['timed_out']} timed out, "
              f"{figures['not_checked']} not checked, {figures.get('wall_s')} s", flush=True)
        write_result(args.out, result, modules)


def write_result(out: Path, result: dict, modules: dict) -> None:
    """The JSON, every module of the table in it: one not run yet is there with `run: false`, `complete: false`."""
    for name, entry in modules.items():
        if "generated" not in result["modules"].get(name, {}):
            result["modules"][name] = {"files": entry["mutate"], "tests": entry["tests"], "target": entry.get("target"),
                                       "run": False, "complete": False, "meets_target": False}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
