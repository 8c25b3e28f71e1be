"""Throwaway copies of the project as fresh git + DVC repositories, for end-to-end tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PROJECT_FILES = ["params.yaml", "dvc.yaml", ".dvcignore", ".gitignore", "pyproject.toml"]
PROJECT_DIRS = ["stages", "flows", "schemas", "prompts", "profiles", "configs"]
# the frozen pre-training stages' outputs, committed to git (dvc.yaml: cache: false); a clone has them
COMMITTED_OUTPUTS = ["models/pretrain_sam2", "metrics/pretrain_sam2.json", "metrics/pretrain_sam2_curve.tsv",
                     "models/pretrain_sam2_finetuned", "metrics/finetune_sam2.json", "metrics/finetune_sam2_curve.tsv",
                     "models/pretrain", "metrics/pretrain.json", "metrics/pretrain_curve.tsv"]


def env_with_venv() -> dict[str, str]:
    """The environment for subprocesses: this venv's bin first (dvc, vrsflow), offline model libs."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("GIT_AUTHOR_NAME", "vrsflow-tests")
    env.setdefault("GIT_AUTHOR_EMAIL", "tests@vrsflow.invalid")
    env.setdefault("GIT_COMMITTER_NAME", "vrsflow-tests")
    env.setdefault("GIT_COMMITTER_EMAIL", "tests@vrsflow.invalid")
    return env


def sh(args: list[str], cwd: Path, timeout: int = 900) -> str:
    """Run a command, return stdout+stderr; fail loudly with its output."""
    proc = subprocess.run(args, cwd=cwd, env=env_with_venv(), capture_output=True, text=True, timeout=timeout)
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({proc.returncode}):\n{output[-6000:]}")
    return output


def profile_overrides(project_root: Path, name: str) -> dict[str, object]:
    """The dotted-key overrides of `profiles/<name>.yaml`."""
    import yaml

    return dict(yaml.safe_load((project_root / "profiles" / f"{name}.yaml").read_text()) or {})


def override_params(params: dict, overrides: dict[str, object]) -> dict:
    """`params` (a params.yaml read as a dict) with each dotted key of `overrides` set, e.g. "sft.epochs": 3."""
    for dotted, value in overrides.items():
        node = params
        *parents, last = dotted.split(".")
        for key in parents:
            node = node[key]
        node[last] = value
    return params


def make_repo(project_root: Path, dest: Path, params_overrides: dict[str, object] | None = None,
              profile: str | None = None, frozen_checkpoints: bool = True) -> Path:
    """Copy the project's pipeline files into `dest`, `git init` + `dvc init`, commit; return `dest`.

    `profile` (e.g. "ci") applies `profiles/<profile>.yaml` first, then `params_overrides`. Without
    `frozen_checkpoints` the frozen stages' committed checkpoints (models/, 28 MB) stay out, their metrics in: for
    a repo whose runs never reach them: each `dvc exp run --temp` recompresses every committed blob with dulwich
    into its temporary repository (15-20 s of a run on 2 loaded cores with them).
    """
    if profile:
        params_overrides = {**profile_overrides(project_root, profile), **(params_overrides or {})}
    dest.mkdir(parents=True, exist_ok=True)
    for name in PROJECT_FILES:
        if (project_root / name).exists():
            shutil.copy2(project_root / name, dest / name)
    committed = [name for name in COMMITTED_OUTPUTS if frozen_checkpoints or not name.startswith("models/")]
    for name in [*PROJECT_DIRS, *committed]:
        if (project_root / name).is_dir():
            shutil.copytree(project_root / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif (project_root / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(project_root / name, dest / name)
    if params_overrides:
        import yaml

        params = override_params(yaml.safe_load((dest / "params.yaml").read_text()), params_overrides)
        (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    if not (dest / ".gitignore").exists():
        (dest / ".gitignore").write_text("/data/\n/models/\n__pycache__/\n")
    sh(["git", "init", "-q", "-b", "main"], dest)
    sh([sys.executable, "-m", "dvc", "init", "-q"], dest)
    sh([sys.executable, "-m", "dvc", "config", "core.analytics", "false"], dest)
    if (project_root / ".dvc" / "plots").is_dir():  # the project's plot templates (dvc.yaml's `template: series`)
        shutil.copytree(project_root / ".dvc" / "plots", dest / ".dvc" / "plots", dirs_exist_ok=True)
    sh(["git", "add", "-A"], dest)
    sh(["git", "commit", "-qm", "pipeline copy"], dest)
    return dest


def dvc(dest: Path, *args: str, timeout: int = 900) -> str:
    """Run `dvc <args>` in `dest` with this venv's tools on PATH."""
    return sh([sys.executable, "-m", "dvc", *args], dest, timeout=timeout)


def built_once(name: str, dest: Path, build) -> Path:
    """`build(folder)` into `dest`; under scripts/mutation.sh (VRSFLOW_TEST_BUILD_CACHE set) built once per run
    into the cache and copied to `dest` — for inputs no mutant of the module under test can change (the tests
    write into their copy)."""
    cache = os.environ.get("VRSFLOW_TEST_BUILD_CACHE")
    if not cache:
        return build(dest)
    built = Path(cache) / name
    built.parent.mkdir(parents=True, exist_ok=True)
    if not built.is_dir():
        build(Path(tempfile.mkdtemp(dir=cache)) / name).rename(built)
    shutil.copytree(built, dest, symlinks=True, dirs_exist_ok=True)
    return dest
