"""One place that writes a benchmark's figures: `bench/results/<name>.json` with the commit and machine.

Each file holds the figures of one run, the baseline they are compared against (what it is and its
figures, measured in the same run), the git commit the code was at (with `dirty: true` when the work
tree had uncommitted changes) and the machine (CPU model and count, load average at the end: the
development machine is shared, so ratios of the same run are what count, not absolute seconds).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=RESULTS.parents[1], capture_output=True, text=True, timeout=30,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def commit(code: tuple[str, ...] = ("stages", "bench", "schemas")) -> dict:
    """HEAD and whether the files the figures depend on (`code`, repo-relative) differ from it."""
    if os.environ.get("VRSFLOW_BENCH_COMMIT"):
        # a copy of the tree sent elsewhere (a lent GPU machine), whose .git, if any, is not the tree's: the sender
        # names the commit it sent, clean
        return {"sha": os.environ["VRSFLOW_BENCH_COMMIT"], "dirty": False, "code": list(code),
                "from": "VRSFLOW_BENCH_COMMIT"}
    head = _git("rev-parse", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no", "--", *code))
    return {"sha": head or "unknown", "dirty": dirty, "code": list(code)}


def _gpu_driver() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.strip().splitlines()[0] if out.strip() else "unknown"


def machine() -> dict:
    """CPU model, logical CPUs, torch threads (when torch is loaded), load average, Python, OS."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {"cpu": model, "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
            "python": platform.python_version(), "os": platform.platform(terse=True)}
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name()
            info["cuda"] = torch.version.cuda
            info["gpu_driver"] = _gpu_driver()
    return info


def portable_path(value: str) -> str:
    """A path as a results file records it: relative to the project when inside it, `<its last component>` when it
    is any other absolute path; anything else as it is."""
    root = RESULTS.parents[1]
    if not value.startswith("/"):
        return value
    path = Path(value)
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else f"<{path.name}>"


def portable_figures(figures: dict, named: dict[str, str]) -> dict:
    """Figures with this machine's folders replaced inside every string (process command lines, a stage's log
    lines): each of `named` (folder → the name it takes, longest first) and then the project and the home folder
    as `<project>`, `<home>`."""
    folders = {**named, str(RESULTS.parents[1]): "<project>", str(Path.home()): "<home>"}
    text = json.dumps(figures)
    for local in sorted(folders, key=len, reverse=True):
        text = text.replace(local, folders[local])
    return json.loads(text)


def portable_command(argv: list[str]) -> str:
    """The command line as a results file records it: paths inside the project relative to it, any other absolute
    path as `<its last component>` (a results file is committed; this machine's folders mean nothing elsewhere)."""
    def portable(token: str) -> str:
        flag, eq, value = token.partition("=")  # --flag=PATH and NAME=PATH tokens: the path after "="
        if not eq:
            flag, value = "", token
        return f"{flag}{eq}{portable_path(value)}"

    return " ".join(["python", *(portable(token) for token in argv)])


def write_result(name: str, figures: dict, baseline: str, code: tuple[str, ...] = ("stages", "bench", "schemas"),
                 out: Path | None = None) -> Path:
    """Write `bench/results/<name>.json` (or `out`) and print it; returns the path.

    `code`: the repo paths the figures depend on (the commit record says whether they were modified).
    """
    record = {"name": name, "baseline": baseline, "command": portable_command(sys.argv),
              "figures": figures, "commit": commit(code), "machine": machine(),
              "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    path = Path(out) if out is not None else RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(record, indent=1, sort_keys=True) + "\n"
    path.write_text(text)
    sys.stdout.write(text)
    return path
