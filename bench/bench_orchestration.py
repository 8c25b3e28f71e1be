"""Orchestration overhead of a whole `dvc repro`: Prefect's temporary server in every stage process (before)
against one Prefect API shared by all stages (`vrsflow repro`, flows/prefect_api.py) (after), in the same run.

    python bench/bench_orchestration.py [--profile ci|default] [--modes before,shared,after]

Each mode gets a fresh throwaway git + DVC copy of the project (tests/pipeline_repo.py) and a fresh
PREFECT_HOME holding only the empty database that scripts/setup.sh creates at install time
(`python -m flows.prefect_api init-db`, not timed: as for a new user right after installing), then runs the
whole DAG:
`dvc repro` with VRSFLOW_SHARED_PREFECT_API=0 (before: Prefect's temporary server in every stage process),
`vrsflow repro` with VRSFLOW_WARM_STAGES=0 (shared: one server, fresh stage processes), `vrsflow repro` (after:
one server, stages forked from a warm process); PREFECT_API_URL unset in all.
Every stage process appends when it started and when its stage function ran to $VRSFLOW_TIMINGS
(flows/common.py). Per stage: wall = from its process start to the next stage's process start (to the end of
the repro for the last); work = the stage function; orchestration = wall − work (process start, imports,
Prefect API calls and server, DVC hashing and bookkeeping). The time before the first stage process starts
(dvc start-up, the shared server's start) is orchestration too. Each `vrsflow stage` command also records
when it started and ended, which splits the orchestration into the stage commands' own (start → work and
work → exit: process start, imports, the Prefect API and server) and DVC's (the rest: its start-up, status
checks, hashing and caching outputs, writing dvc.lock).

Writes bench/results/orchestration[-PROFILE].json (figures, commit, machine, load average).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.pipeline_repo import env_with_venv, make_repo  # noqa: E402

TARGET_SHARE = 0.05  # issue 15: orchestration ≤ 5 % of the default run
TARGET_DEFAULT_RUN_S = 360.0  # issue 15: default run ≤ 6 min on 2 cores


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def machine() -> dict:
    """CPU count and model, memory, Python; the load average is recorded per mode."""
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        model = next((line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                      if line.startswith("model name")), "")
    import psutil

    return {"cpus": os.cpu_count(), "cpu_model": model, "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
            "python": platform.python_version(), "platform": platform.platform()}


def run_mode(mode: str, profile: str | None, work: Path, overrides: dict[str, object] | None = None,
             prepare: Callable[[Path, dict], None] | None = None) -> dict:
    """One fresh repo (`work/<mode>/repo`, params.yaml with `profile` then `overrides` applied), one whole repro in
    `mode`; per-stage wall / work / orchestration seconds. `prepare(repo, env)` runs before the timed repro (e.g. a
    planted bug: part of the pipeline run and changed first)."""
    repo = make_repo(ROOT, work / mode / "repo", params_overrides=overrides, profile=profile)
    timings = work / mode / "timings.jsonl"
    env = env_with_venv()
    env.pop("PREFECT_API_URL", None)
    env.update(PREFECT_HOME=str(work / mode / "prefect-home"), VRSFLOW_TIMINGS=str(timings),
               PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1", VRSFLOW_PREFECT_LINGER_S="5")
    subprocess.run([sys.executable, "-m", "flows.prefect_api", "init-db"], cwd=ROOT, env=env, check=True,
                   stdout=subprocess.DEVNULL)  # what scripts/setup.sh does once
    if prepare is not None:
        prepare(repo, env)
    if mode == "before":  # Prefect's temporary server in every stage process, each stage a fresh process
        env["VRSFLOW_SHARED_PREFECT_API"] = "0"
        command = [sys.executable, "-m", "dvc", "repro"]
    elif mode == "shared":  # one shared server, each stage still a fresh process
        env["VRSFLOW_WARM_STAGES"] = "0"
        command = [sys.executable, "-m", "flows.cli", "repro"]
    elif mode == "after":  # one shared server, stages forked from the warm process
        command = [sys.executable, "-m", "flows.cli", "repro"]
    else:
        raise SystemExit(f"unknown mode {mode!r} (before, shared, after)")
    load_start = os.getloadavg()
    started = time.time()
    proc = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True)
    ended = time.time()
    if proc.returncode != 0:
        raise SystemExit(f"{mode}: {' '.join(command)} failed:\n{(proc.stdout + proc.stderr)[-4000:]}")
    lines = [json.loads(line) for line in timings.read_text().splitlines()]
    records = [dict(r) for r in lines if "stage" in r]  # copies: lines go into the results as they were
    commands = [r for r in lines if r.get("command") == "stage"]  # the `vrsflow stage` processes DVC ran
    for record in records:  # the `vrsflow stage` command DVC ran for it: the last started before its work
        enclosing = max((c for c in commands if c["command_start"] <= record["task_start"]
                         and record["task_end"] <= c["command_end"]), key=lambda c: c["command_start"], default=None)
        record["command"] = enclosing
        # a stage starts when DVC starts its command (before its forked process exists) when that is recorded
        record["start"] = enclosing["command_start"] if enclosing else record["process_start"]
    records.sort(key=lambda r: r["start"])
    stages = {}
    for i, record in enumerate(records):
        until = records[i + 1]["start"] if i + 1 < len(records) else ended
        wall = until - record["start"]
        work_s = record["task_end"] - record["task_start"]
        stages[record["stage"]] = {"wall_s": round(wall, 2), "work_s": round(work_s, 2),
                                   "orchestration_s": round(wall - work_s, 2),
                                   "start_to_work_s": round(record["task_start"] - record["start"], 2)}
        if record["command"] is not None:  # the command's own share: its start → work, work → its exit
            own = (record["task_start"] - record["command"]["command_start"]) + (record["command"]["command_end"]
                                                                                - record["task_end"])
            stages[record["stage"]].update(command_s=round(own, 2), dvc_s=round(wall - work_s - own, 2))
    total = ended - started
    work_total = sum(s["work_s"] for s in stages.values())
    forked = [r["stage"] for r in records if r.get("forked")]
    return {"command": " ".join(command[2:]), "env": {k: env[k] for k in (
                "VRSFLOW_SHARED_PREFECT_API", "VRSFLOW_WARM_STAGES") if k in env},
            "stages_forked": forked,
            "total_s": round(total, 1), "work_s": round(work_total, 1),
            "orchestration_s": round(total - work_total, 1),
            "orchestration_share": round((total - work_total) / total, 3),
            "before_first_stage_s": round(records[0]["start"] - started, 2),
            "orchestration_per_stage_mean_s": round((total - work_total) / len(stages), 2),
            # split of the orchestration: the stage commands' own (process start, imports, Prefect API and
            # server) vs DVC's (its start-up, status checks, hashing and caching outputs, dvc.lock)
            **({"stage_commands_s": round(sum(s["command_s"] for s in stages.values()), 1),
                "stage_commands_share": round(sum(s["command_s"] for s in stages.values()) / total, 3),
                "dvc_s": round(total - work_total - sum(s["command_s"] for s in stages.values()), 1)}
               if all("command_s" in s for s in stages.values()) else {}),
            "load_avg_1m_start_end": [round(load_start[0], 2), round(os.getloadavg()[0], 2)],
            "stages": stages,
            "timings_raw": lines,  # every record the stage processes and commands wrote (epoch seconds)
            # what the run produced, beside how long it took (the repo is thrown away afterwards)
            "pipeline_metrics": {name: json.loads((repo / "metrics" / f"{name}.json").read_text())
                                 for name in ("sft", "grpo", "eval", "benchmarks")
                                 if (repo / "metrics" / f"{name}.json").is_file()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="ci", help="params profile (ci: seconds of work per stage) or 'default'")
    parser.add_argument("--modes", default="before,shared,after", help="comma-separated: before, shared, after")
    parser.add_argument("--out", default="", help="results file (default bench/results/orchestration[-PROFILE].json)")
    args = parser.parse_args(argv)
    profile = None if args.profile == "default" else args.profile
    modes = [m for m in args.modes.split(",") if m]
    results: dict = {"bench": "orchestration", "profile": args.profile, "command": " ".join(sys.argv),
                     "baseline": "before: dvc repro with Prefect's temporary server in every stage process "
                                 "(VRSFLOW_SHARED_PREFECT_API=0), fresh repo and PREFECT_HOME per mode",
                     "commit": _git("rev-parse", "HEAD"),
                     "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")), "machine": machine(),
                     "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                     "targets": {"orchestration_share_max": TARGET_SHARE, "default_run_max_s": TARGET_DEFAULT_RUN_S},
                     "modes": {}}
    with tempfile.TemporaryDirectory(prefix="vrsflow-bench-orch-") as tmp:
        for mode in modes:
            results["modes"][mode] = run_mode(mode, profile, Path(tmp))
            print(mode, json.dumps({k: v for k, v in results["modes"][mode].items() if k != "stages"}), flush=True)
    if "before" in results["modes"]:
        before = results["modes"]["before"]
        for mode in set(results["modes"]) - {"before"}:
            other = results["modes"][mode]
            results[f"orchestration_before_over_{mode}"] = round(before["orchestration_s"] / other["orchestration_s"],
                                                                 2)
            results[f"orchestration_saved_s_{mode}"] = round(before["orchestration_s"] - other["orchestration_s"], 1)
    results["machine"]["load_avg_1m"] = round(os.getloadavg()[0], 2)  # at the end; per mode in modes.*
    name = "orchestration" if args.profile == "ci" else f"orchestration-{args.profile}"
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
