"""What a served pipeline run may ask for, checked before DVC is called.

A run started from the Prefect UI or API names params overrides, stage targets and an experiment
name. The project it runs in is fixed when the deployment is served (`VRSFLOW_SERVED_PROJECT`, set
by `vrsflow serve`), never a run parameter. Every override key must be a params value and its value
must pass the same validation as params.yaml (`stages.params.apply_overrides`); every target
must be a stage of the served dvc.yaml; the experiment name must be a plain ref name. Anything else
is a `RequestRefused` whose message is one line.

On top of validity, the served-run policy (`ServedPolicy`): a run changes the experiment, never where
secrets, data or requests go. A params field marked `Server[...]` / `SecretEnv` (env-var names, endpoints,
folders outside the project, settings that start processes or open ports; stages/params/<block>.py) is refused
from a run — it is fixed when `vrsflow serve` starts, from the project's params.yaml, and a run is refused
too when params.yaml's server-side values changed since then. A field marked `ExpPath[...]` must stay inside
the project (relative, no `..`, no symlink out) or inside a root the server allows (`vrsflow serve
--allow-root DIR`). `vrsflow check --served` applies the same policy to `-S` overrides.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from stages.core.typed_config import field_type, leaf_fields, served_side, served_walk, to_dict
from stages.params import Params, ParamsError, apply_overrides, load_params, read_params_file

SERVED_PROJECT_ENV = "VRSFLOW_SERVED_PROJECT"
SERVED_POLICY_ENV = "VRSFLOW_SERVED_POLICY"  # the policy `vrsflow serve` fixed, as JSON (ServedPolicy.to_env)
MAX_NAME = 100


class RequestRefused(ValueError):
    """A served run asked for something it may not have; the message is one line."""


@dataclass(frozen=True)
class ServedPolicy:
    """What the server fixed when it started: the roots a run's paths may lie in besides the project, and the
    server-side params values (None: not compared, e.g. `vrsflow check --served`)."""

    allowed_roots: tuple[str, ...] = ()
    server_values: Mapping[str, Any] | None = None

    def to_env(self) -> str:
        return json.dumps({"allowed_roots": list(self.allowed_roots), "server_values": self.server_values})

    @classmethod
    def from_env(cls) -> ServedPolicy:
        """The policy `vrsflow serve` exported; the default (project only, nothing compared) when none."""
        text = os.environ.get(SERVED_POLICY_ENV, "")
        if not text:
            return cls()
        data = json.loads(text)
        return cls(tuple(data.get("allowed_roots") or ()), data.get("server_values"))


def serving_policy(project: Path, allowed_roots: Sequence[str | Path] = ()) -> ServedPolicy:
    """The policy of a server starting now: `allowed_roots` (existing folders, made absolute) and the
    server-side values of the project's params.yaml.

    Raises:
        ParamsError: params.yaml is invalid.
        FileNotFoundError: an allowed root is not a folder.
    """
    roots = []
    for root in allowed_roots:
        path = Path(root).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(f"--allow-root {root}: no such folder")
        roots.append(str(path.resolve()))
    return ServedPolicy(tuple(roots), server_values(load_params(project / "params.yaml")))


def server_values(params: Params) -> dict[str, Any]:
    """Dotted key → value of every server-side params field (JSON-able)."""
    values = to_dict(params)
    out = {}
    for key, tp in leaf_fields(Params):
        side = served_side(tp)
        if side is not None and side.side == "server":
            node: Any = values
            for part in key.split("."):
                node = node[part]
            out[key] = node
    return out


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
                  name: str, policy: ServedPolicy | None = None) -> RunRequest:
    """Validate a run's overrides, targets and experiment name against the served project and policy
    (default: the one `vrsflow serve` exported, else project-only paths).

    Raises:
        RequestRefused: one line naming the key, target or name that is refused and why.
    """
    if not isinstance(overrides, Mapping):
        raise RequestRefused(f"overrides: expected a mapping of params keys to values, got {type(overrides).__name__}")
    try:
        typed = check_overrides(project / "params.yaml", overrides, ServedPolicy.from_env() if policy is None
                                else policy)
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


def check_overrides(params_path: Path, overrides: Mapping[str, Any], policy: ServedPolicy) -> dict[str, Any]:
    """Validate overrides as a served run's: params validation plus the served-run policy.

    The project is the params file's folder. Returns the overrides as typed values.

    Raises:
        ParamsError: one line naming the refused key(s) and how to change them.
    """
    server_keys = []
    for key in overrides:
        if isinstance(key, str):
            try:
                side = served_side(field_type(Params, key))
            except ParamsError:
                continue  # apply_overrides names it below
            if side is None or side.side == "server":  # unmarked: the safe side
                server_keys.append(key)
    if server_keys:
        raise ParamsError(f"{', '.join(server_keys)}: fixed by the server, a run may not change "
                          f"{'it' if len(server_keys) == 1 else 'them'} (edit params.yaml and serve again)")
    raw = read_params_file(params_path)
    params, typed = apply_overrides(raw, overrides)
    project = params_path.resolve().parent
    for key, value in typed.items():
        for where, side, item in served_walk(field_type(Params, key), value, key):
            if side.side == "server":  # a server field inside an experiment value (a list of blocks)
                raise ParamsError(f"{where}: fixed by the server, a run may not change it (edit params.yaml and "
                                  f"serve again)")
            problem = path_problem(item, project, policy.allowed_roots) if side.path and isinstance(item, str) \
                else None
            if problem:
                raise ParamsError(f"{where}: {item!r} {problem}")
    if policy.server_values is not None:
        for key, value in server_values(params).items():  # the file's: no override of these got this far
            if key in policy.server_values and policy.server_values[key] != value:
                raise ParamsError(f"{params_path}: {key} changed since `vrsflow serve` started "
                                  f"({policy.server_values[key]!r} -> {value!r}): serve again to use it")
    return typed


def path_problem(value: str, project: Path, allowed_roots: Sequence[str] = ()) -> str | None:
    """Why a served run may not use `value` as a path, or None: it must be relative to the project and stay in
    it (no `..`, no symlink out), or be an absolute path inside an allowed root ("" means "none": allowed)."""
    if value == "":
        return None
    how = "(paths of a run stay inside the project; `vrsflow serve --allow-root DIR` allows a folder outside it)"
    if ".." in PurePosixPath(value).parts:
        return f"goes up with '..' {how}"
    roots = [Path(r) for r in allowed_roots]
    inside_root = next((r for r in roots if _inside(Path(value) if Path(value).is_absolute() else project / value,
                                                    r)), None)
    if Path(value).is_absolute():
        if inside_root is not None:
            return None
        if _inside(Path(value), project, resolve=False):
            return "is an absolute path into the project: give it relative to the project"
        return f"is outside the project {how}"
    if _inside(project / value, project) or inside_root is not None:
        return None
    return f"leads outside the project through a symlink {how}"


def _inside(path: Path, root: Path, resolve: bool = True) -> bool:
    return (path.resolve() if resolve else path).is_relative_to(root.resolve())


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
