"""What a served pipeline run may ask for, checked before DVC is called.

A run started from the Prefect UI or API names params overrides, stage targets and an experiment
name. The project it runs in is fixed when the deployment is served (`VRSFLOW_SERVED_PROJECT`, set
by `vrsflow serve`), never a run parameter. Every override key must be a params value and its value
must pass the same validation as params.yaml (`stages.core.params.apply_overrides`); every target
must be a stage of the served dvc.yaml; the experiment name must be a plain ref name. Anything else
is a `RequestRefused` whose message is one line.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from stages.core.params import ParamsError, apply_overrides, read_params_file

SERVED_PROJECT_ENV = "VRSFLOW_SERVED_PROJECT"
MAX_NAME = 100


class RequestRefused(ValueError):
    """A served run asked for something it may not have; the message is one line."""


@dataclass(frozen=True)
class RunRequest:
    """A checked request: `dvc exp run` arguments and what they mean."""

    project: Path
    name: str
    overrides: dict[str, Any]  # dotted key → typed value
    targets: tuple[str, ...]
    set_args: tuple[str, ...]  # `-S key=value` pairs in DVC's override grammar


def served_project() -> Path:
    """The project folder fixed by `vrsflow serve` for this process.

    Raises:
        RequestRefused: not started by `vrsflow serve`, or the folder has no dvc.yaml.
    """
    value = os.environ.get(SERVED_PROJECT_ENV, "")
    if not value:
        raise RequestRefused(f"no served project: start runs through `vrsflow serve` (${SERVED_PROJECT_ENV} unset)")
    project = Path(value)
    if not (project / "dvc.yaml").is_file():
        raise RequestRefused(f"served project {project} has no dvc.yaml")
    return project


def stage_names(project: Path) -> list[str]:
    """The stages DVC knows in the project (`bench@revos` for a foreach item), and the foreach groups."""
    from dvc.repo import Repo

    spec = yaml.safe_load((project / "dvc.yaml").read_text()) or {}
    with Repo(str(project)) as repo:
        return sorted({stage.addressing for stage in repo.index.stages} | set(spec.get("stages") or {}))


def check_request(project: Path, overrides: Mapping[str, Any] | None, targets: Sequence[str] | None,
                  name: str) -> RunRequest:
    """Validate a run's overrides, targets and experiment name against the served project.

    Raises:
        RequestRefused: one line naming the key, target or name that is refused and why.
    """
    if not isinstance(overrides, Mapping):
        raise RequestRefused(f"overrides: expected a mapping of params keys to values, got {type(overrides).__name__}")
    try:
        _, typed = apply_overrides(read_params_file(project / "params.yaml"), overrides)
    except ParamsError as err:
        raise RequestRefused(str(err)) from err
    known = stage_names(project)
    checked = []
    for target in targets or ():
        if not isinstance(target, str) or target not in known:
            close = difflib.get_close_matches(str(target), known, n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"stages: {', '.join(known)}"
            raise RequestRefused(f"target {str(target)[:80]!r} is not a stage of dvc.yaml ({hint})")
        checked.append(target)
    _check_name(name)
    raw = read_params_file(project / "params.yaml")
    set_args = tuple(f"{'' if _present(raw, key) else '+'}{key}={dvc_value(value)}" for key, value in typed.items())
    return RunRequest(project, name, typed, tuple(checked), set_args)


def dvc_value(value: Any) -> str:
    """A validated value in the override grammar of `dvc exp run -S` (Hydra's): text always quoted."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return f"'{value}'"  # apply_overrides refused quotes, backslashes and `$` in text
    if isinstance(value, list | tuple):
        return "[" + ",".join(dvc_value(v) for v in value) + "]"
    raise RequestRefused(f"cannot pass a {type(value).__name__} to dvc")


def _present(raw: Mapping, dotted: str) -> bool:
    node: Any = raw
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def _check_name(name: str) -> None:
    ok = (isinstance(name, str) and 0 < len(name) <= MAX_NAME and name.isascii() and name[0].isalnum()
          and all(c.isalnum() or c in "._-" for c in name) and ".." not in name and not name.endswith((".", ".lock")))
    if not ok:
        raise RequestRefused(f"experiment name {str(name)[:80]!r}: use letters, digits, '.', '_' and '-' "
                             f"(starting with a letter or digit, at most {MAX_NAME})")
